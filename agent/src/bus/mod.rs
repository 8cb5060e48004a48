//! Building blocks on NATS JetStream, shared by every task: connecting, the
//! streams and the registry bucket (the layout), typed JetStream error codes, and the
//! rate limits on requests to the agent, and the pull watch of a KV bucket.

pub mod command;
pub mod command_sub;
pub mod connect;
pub mod errors;
pub mod kv_watch;
pub mod layout;
pub mod rate;
pub mod replay;
pub mod streams;
