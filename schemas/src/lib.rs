//! fleetbus API types, wire messages and NATS subjects (types only, no IO).
