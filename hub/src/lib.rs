//! The fleetbus operator CLI library. The binary `fleetbus` is a thin wrapper around it.
