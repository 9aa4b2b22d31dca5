//! The records herd stores: a new subagent, its row as read back, a status/field update,
//! and a stored event. Plain data; the SQL lives in `store` and `writer`.

use herd_core::{AgentEvent, FailureReason, Status, SubagentId, Usage};
use serde::Serialize;

/// What is known about a subagent before its process exists.
#[derive(Debug, Clone)]
pub struct NewSubagent {
    pub id: SubagentId,
    pub parent_session_id: String,
    pub name: String,
    pub cli: String,
    pub prompt: String,
    pub model: Option<String>,
    pub working_directory: String,
    pub max_turns: Option<u32>,
    pub timeout_ms: Option<u64>,
    /// The full run specification as JSON (the delegation contract).
    pub spec: serde_json::Value,
    pub owner_pid: u32,
    pub owner_start_time: Option<u64>,
}

/// A subagent as stored.
#[derive(Debug, Clone, Serialize)]
pub struct SubagentRow {
    pub id: String,
    pub parent_session_id: String,
    pub name: String,
    pub cli: String,
    pub status: Status,
    pub prompt: String,
    pub model: Option<String>,
    pub working_directory: String,
    pub max_turns: Option<u32>,
    pub timeout_ms: Option<u64>,
    pub spec: serde_json::Value,
    pub result: Option<String>,
    pub result_truncated: bool,
    pub failure_reason: Option<String>,
    pub failure: Option<FailureReason>,
    pub native_session_id: Option<String>,
    pub num_turns: Option<u32>,
    pub usage: Usage,
    pub cost_usd: Option<f64>,
    pub owner_pid: Option<u32>,
    pub owner_start_time: Option<u64>,
    pub pid: Option<u32>,
    pub pgid: Option<u32>,
    pub process_start_time: Option<u64>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub cancel_requested_at: Option<i64>,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub completed_at: Option<i64>,
    pub closed_at: Option<i64>,
    pub close_reason: Option<String>,
    /// One of its tool calls waits for a person now (a pending permission request).
    pub waiting: bool,
    /// Its tool calls denied because nobody answered (the permission timeout passed, or nobody
    /// could be asked).
    pub unanswered: u32,
}

impl SubagentRow {
    /// Wall time from start to end (or to now while running).
    pub fn duration_ms(&self) -> Option<i64> {
        let start = self.started_at?;
        Some(self.completed_at.unwrap_or_else(crate::now_ms) - start)
    }
}

/// Changes to a subagent row; `None` leaves a column alone. A status change is checked
/// against the legal-transition table in the same transaction that applies it.
#[derive(Debug, Clone, Default)]
pub struct Update {
    pub status: Option<Status>,
    pub failure: Option<FailureReason>,
    pub pid: Option<u32>,
    pub pgid: Option<u32>,
    pub process_start_time: Option<u64>,
    pub started_at: Option<i64>,
    pub completed_at: Option<i64>,
    pub closed_at: Option<i64>,
    pub close_reason: Option<String>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub native_session_id: Option<String>,
    /// The model as the agent's stream names it (it replaces the one asked for).
    pub model: Option<String>,
    pub result: Option<String>,
    pub result_truncated: Option<bool>,
    pub num_turns: Option<u32>,
    pub usage: Option<Usage>,
    pub cost_usd: Option<f64>,
    /// Events appended in the same transaction, after the row changes.
    pub events: Vec<AgentEvent>,
}

/// An event as stored: its subagent, per-subagent sequence number and time.
#[derive(Debug, Clone, Serialize)]
pub struct StoredEvent {
    pub subagent_id: SubagentId,
    pub seq: i64,
    /// When it was stored: ms since the epoch, RFC 3339 text in JSON.
    #[serde(serialize_with = "herd_core::time::ser_ms")]
    pub ts: i64,
    pub parent_tool_use_id: Option<String>,
    #[serde(flatten)]
    pub event: AgentEvent,
}
