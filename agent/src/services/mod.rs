//! Multi-cluster Services (KEP-1645, the MCS API): a `ServiceExport` next
//! to a Service makes this cluster publish the Service and its endpoints on
//! the bus; every cluster that has the namespace writes a `ServiceImport`
//! and EndpointSlices from every exporter (PROTOCOL §6.11). [`task`] is the
//! loop; [`plan`] decides what is exported, what conflicts and what is
//! imported, and [`render`] what is written (both pure); [`export`] and
//! [`import`] do the IO; [`mirror`] keeps what a watch showed. Files import
//! their siblings, never this table.

mod export;
mod import;
mod mirror;
mod plan;
mod render;
mod task;

pub use task::run;
