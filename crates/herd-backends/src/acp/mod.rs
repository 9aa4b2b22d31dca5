//! The ACP backend: any Agent Client Protocol agent on stdio (gemini `--acp`, codex-acp,
//! claude-code-acp), driven by the sans-IO [`AcpClient`]; argv and permission answers. Not yet a `BackendKind`.
//!
//! How the engine drives one run (measured against the three agents, see herd-testkit's
//! `acp_real.rs`):
//! 1. spawn [`AcpAgent::args`] with stdin a pipe kept open; write [`AcpClient::start`]
//!    (`initialize`);
//! 2. feed every stdout line to the client ([`Decoder::decode`]) and after each write
//!    [`Decoder::take_stdin`]: the client answers `initialize` with `session/new` (or
//!    `session/load`), then `session/set_mode` if asked, then `session/prompt`;
//! 3. a `ControlRequest` event of subtype [`PERMISSION_METHOD`] is a permission request:
//!    [`permission_request`] gives it in neutral terms, [`answer_permission`] the line to write;
//! 4. the `Result` event ends the run (the prompt's answer); then close stdin — the agents
//!    exit on EOF;
//! 5. to stop gracefully write [`AcpClient::cancel`] (`session/cancel`, pending permission
//!    requests answered `cancelled`), wait for the `Result` (`stopReason: "cancelled"`), then
//!    close stdin / signal the process group.

mod client;
mod update;
mod wire;

pub use client::{AcpClient, AcpConfig, PERMISSION_METHOD, Step};
pub use wire::RpcError;

use herd_core::AgentEvent;

use crate::{Decoder, PermissionAnswer, PermissionRequest};

/// The ACP agents herd was tested with, and how each is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcpAgent {
    /// `gemini --acp` (gemini-cli 0.61.0): the environment of a gemini run (protocols.md §3.0).
    Gemini,
    /// `codex-acp` (`@zed-industries/codex-acp` 0.16.0): codex's `CODEX_HOME`/config.
    CodexAcp,
    /// `claude-code-acp` (`@zed-industries/claude-code-acp` 0.16.2): the Anthropic
    /// variables; it runs the Claude Agent SDK's own bundled claude, not herd's pinned one.
    ClaudeCodeAcp,
}

impl AcpAgent {
    /// The program's name (on PATH or in `node_modules/.bin`).
    pub const fn program(self) -> &'static str {
        match self {
            AcpAgent::Gemini => "gemini",
            AcpAgent::CodexAcp => "codex-acp",
            AcpAgent::ClaudeCodeAcp => "claude-code-acp",
        }
    }

    /// The variable that overrides the binary's location.
    pub const fn program_override_var(self) -> &'static str {
        match self {
            AcpAgent::Gemini => "HERD_GEMINI_BIN",
            AcpAgent::CodexAcp => "HERD_CODEX_ACP_BIN",
            AcpAgent::ClaudeCodeAcp => "HERD_CLAUDE_CODE_ACP_BIN",
        }
    }

    /// The argv after the program name.
    pub fn args(self) -> Vec<String> {
        match self {
            AcpAgent::Gemini => vec!["--acp".to_owned()],
            AcpAgent::CodexAcp | AcpAgent::ClaudeCodeAcp => Vec::new(),
        }
    }

    /// Prefixes of the variables the agent needs passed through.
    pub const fn env_prefixes(self) -> &'static [&'static str] {
        match self {
            AcpAgent::Gemini => crate::gemini::ENV_PREFIXES,
            AcpAgent::CodexAcp => crate::codex::ENV_PREFIXES,
            AcpAgent::ClaudeCodeAcp => &["ANTHROPIC_", "CLAUDE_CODE_", "DISABLE_"],
        }
    }

    /// The mode that makes the agent ask herd before risky calls (its `session/new` default,
    /// measured): gemini `default` (shell and edits ask), codex-acp `read-only` (edits and
    /// escalated commands ask), claude-code-acp `default`.
    pub const fn asking_mode(self) -> &'static str {
        match self {
            AcpAgent::Gemini | AcpAgent::ClaudeCodeAcp => "default",
            AcpAgent::CodexAcp => "read-only",
        }
    }
}

/// A fresh client for one run: the decoder the engine feeds, with its stdin bytes.
pub fn decoder(config: AcpConfig) -> (Box<dyn Decoder>, Vec<u8>) {
    let mut client = AcpClient::new(config);
    let start = client.start();
    (Box::new(client), start)
}

/// The permission request a `ControlRequest` event of subtype [`PERMISSION_METHOD`] carries.
/// When the request does not name its tool but an earlier `tool_call` update did, the client
/// notes the name in the event's `toolCall._meta.herd`, so this stays a function of the event.
pub fn permission_request(ev: &AgentEvent) -> Option<PermissionRequest> {
    match ev {
        AgentEvent::ControlRequest { request_id, subtype, request }
            if subtype == PERMISSION_METHOD =>
        {
            Some(update::permission_request(request_id.clone(), request))
        }
        _ => None,
    }
}

/// The line answering `req`: the agent's own `allow_once` (else any allow) option for an allow,
/// its `reject_once` (else any reject) option for a deny, `cancelled` when it offered none.
/// ACP has no way to change the call's input: an allow with other input runs the call as asked.
pub fn answer_permission(req: &PermissionRequest, answer: &PermissionAnswer) -> Vec<u8> {
    client::encode_answer(req, Some(answer))
}
