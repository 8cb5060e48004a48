//! fleetbus API types, wire messages and NATS subject names. Types only: no IO,
//! no async runtime, no Kubernetes or NATS client.
//!
//! Where to start:
//! - [`crd`]: the Kubernetes API (`fleetbus.io/v1alpha1`): Cluster, ClusterFeature,
//!   ResourceSyncRule (+ `validate()`), Bundle, ReportedState, and [`all_crds`].
//! - [`subject`]: how objects are named on NATS ([`subject::ObjectKey`]) and the
//!   reversible token escaping behind every subject and KV key.
//! - [`registry`]: the KV bucket where agents announce their cluster and heartbeat.
//! - [`envelope`]: the MessagePack message carrying one object version (or tombstone).
//! - [`drift`]: the JSON drift events; [`conflict`]: the JSON conflict events;
//!   [`reported`]: the JSON reported-state messages; [`ObjectRef`] names the object in each.
//! - [`command`]: the request/reply of `fleetbus drift correct` (`<p>.cmd.<cluster>.correct`).
//! - [`jetstream`]: stream, bucket and consumer layout as plain data, and the
//!   minimum server version.
//! - [`rollout`]: progressive rollouts: the origin's rollout records and the operator's
//!   rollout commands.
//! - [`multicluster`]: SIG Multicluster's ClusterProfile and ClusterProperty, as published.
//! - [`well_known`]: annotation, label, condition and Secret-type names.
//! - [`permissions`]: the NATS publish/subscribe allow lists of one cluster's agent.
//! - [`seal`]: payloads sealed to the clusters that may read them (HPKE).
//! - [`trust`]: cluster certificates signed by the fleet root, cluster keys.
//! - [`yaml`]: YAML read and written for people and kubectl (quoting YAML 1.1 lookalikes).
//!
//! docs/PROTOCOL.md specifies the same protocol for readers who do not use Rust.

mod codec;
pub mod command;
pub mod conflict;
pub mod crd;
pub mod drift;
pub mod envelope;
pub mod health;
pub mod jetstream;
pub mod k8s_names;
pub mod multicluster;
mod object_ref;
pub mod permissions;
pub mod placement;
pub mod pointer;
pub mod preview;
pub mod progress;
pub mod registry;
pub mod reported;
pub mod rollout;
pub mod rule_status;
pub mod seal;
pub mod selector;
pub mod subject;
pub mod time;
pub mod trust;
pub mod well_known;
pub mod yaml;

pub use codec::{DecodeError, EncodeError};
pub use crd::all_crds;
pub use object_ref::ObjectRef;
