//! Building blocks on the local Kubernetes API: the periodic API health probe.

pub mod api_probe;
