//! herd-server: `herd serve`'s gRPC API — seed 000's SubagentService, one more translator over
//! the engine service — the daemon around it (socket, lock, token, signals) and its client.

pub mod api;
pub mod auth;
pub mod client;
pub mod convert;
pub mod daemon;
pub mod request;
mod streams;
pub mod web;

/// The messages and the client and server code generated from `proto/herd/v1/*.proto`.
#[allow(clippy::all, clippy::pedantic, missing_debug_implementations)]
pub mod pb {
    tonic::include_proto!("herd.v1");
}

pub use api::Api;
pub use client::Client;
pub use daemon::{DaemonError, ServeOptions, serve};
/// The gRPC library the client speaks through (its `Code`, `Status`, `Streaming`).
pub use tonic;
