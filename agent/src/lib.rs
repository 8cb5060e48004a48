//! The fleetbus agent library. The binary `fleetbus-agent` is a thin wrapper around it.
