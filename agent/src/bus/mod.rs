//! Building blocks on NATS JetStream, shared by every task: connecting, the
//! streams and the registry bucket (the layout), and typed JetStream error codes.

pub mod command_sub;
pub mod connect;
pub mod errors;
pub mod layout;
pub mod streams;
