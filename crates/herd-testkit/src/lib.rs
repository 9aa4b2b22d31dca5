//! herd-testkit: a scripted mock of the Anthropic Messages API on 127.0.0.1 that the real
//! `claude` CLI can run against offline, plus helpers to find and configure that CLI in tests.

mod anthropic;
mod claude;
mod conversation;
mod http;
mod script;
mod server;

pub use claude::{claude_bin, claude_env, require_claude};
pub use conversation::find_marker;
pub use script::{Reply, Script, Turn};
pub use server::{MockServer, RecordedRequest};
