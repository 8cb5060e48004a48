//! fleetbus-devcluster: a Kubernetes-API-compatible server for local meshes and tests.
//!
//! Start at [`server::run`]: it opens the `store::Store` (objects, resource
//! registry, watch history, optional redb persistence), seeds system objects and
//! serves the HTTP API routed in `api`. Verb semantics live in `write` and
//! `delete`; server-side cleanups in `gc`; authentication and RBAC in `auth`; authorization reviews in `review`; PATCH/SSA in [`patch`] and
//! [`managed_fields`]; the built-in resource table in [`resources`].
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod api;
pub mod auth;
mod body;
mod bootstrap;
pub mod cli;
mod cluster_ip;
mod crd;
mod decode;
pub mod decoders;
mod delete;
mod delete_body;
mod deletion;
mod discovery;
pub mod faults;
mod gc;
mod jsonpath;
mod kubeconfig;
pub mod limits;
pub mod managed_fields;
mod meta;
mod names;
pub mod openapi;
mod partial;
pub mod patch;
mod persist;
pub mod proto;
mod registry;
pub mod resources;
mod review;
mod seed;
mod selectors;
mod serialize;
pub mod server;
mod service;
mod status;
mod store;
mod table;
mod tls;
mod token_review;
pub mod validation;
mod watch;
mod write;
mod yaml;
