//! The devcluster's integration tests against a real `fleetbus-devcluster`
//! process, in one test binary: each file here was once its own binary, and
//! each linked and monomorphised kube, tokio and hyper again (CI's build time).
//! Every test still runs in its own process under nextest.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod raw;

mod compat;
mod crd_schema;
mod faults;
mod gc;
mod hostile_depth;
mod hostile_proptest;
mod hostile_validation;
mod kube_rs;
mod kubectl;
mod kubectl_protobuf;
mod rbac;
mod serialization;
mod services;
mod sync_support;
mod tables;
