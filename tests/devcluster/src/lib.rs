//! fleetbus-devcluster: a Kubernetes-API-compatible server for local meshes and tests.
//!
//! Start at [`server::run`]: it builds a [`store::Store`] (objects, resource
//! registry, watch history) and serves the HTTP API routed in `router`.

pub mod managed_fields;
pub mod openapi;
pub mod patch;
pub mod resources;
pub mod validation;
