//! Building blocks on NATS JetStream: typed error codes and the bus layout (bucket + streams).

pub mod errors;
pub mod layout;
