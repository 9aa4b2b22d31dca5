//! The event vocabulary: what backends decode from agent streams and what herd adds around a run.
//! One enum, persisted as `(kind, payload)` rows and shown to watchers only after it is stored.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Token usage, as reported by the agent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_creation_input_tokens: u64,
    pub cache_read_input_tokens: u64,
}

impl Usage {
    /// Field-wise sum.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_creation_input_tokens += other.cache_creation_input_tokens;
        self.cache_read_input_tokens += other.cache_read_input_tokens;
    }
}

/// Which kind of terminal `result` the agent reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResultKind {
    Success,
    ErrorMaxTurns,
    ErrorDuringExecution,
    /// A subtype this herd does not know, kept verbatim.
    Other(String),
}

/// A call the agent wanted to make and was refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PermissionDenial {
    pub tool_name: String,
    #[serde(default)]
    pub tool_use_id: Option<String>,
    #[serde(default)]
    pub tool_input: Value,
}

/// The agent's own account of how a run ended (claude `result`, codex `turn.completed`, …).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultInfo {
    pub subtype: ResultKind,
    pub is_error: bool,
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub api_error_status: Option<u16>,
    #[serde(default)]
    pub errors: Vec<String>,
    #[serde(default)]
    pub num_turns: Option<u32>,
    #[serde(default)]
    pub native_session_id: Option<String>,
    #[serde(default)]
    pub usage: Usage,
    #[serde(default)]
    pub cost_usd: Option<f64>,
    #[serde(default)]
    pub duration_ms: Option<u64>,
    #[serde(default)]
    pub permission_denials: Vec<PermissionDenial>,
    #[serde(default)]
    pub terminal_reason: Option<String>,
}

/// How a ref (or a HEAD) differed after a run from what it was before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefChangeKind {
    Moved,
    Created,
    Deleted,
    /// A worktree's HEAD points elsewhere (another branch, or detached).
    Head,
}

/// One ref an agent changed outside its own branch, and what herd did about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefChange {
    /// `refs/heads/main`, or `HEAD` of the worktree at `worktree`.
    pub name: String,
    pub change: RefChangeKind,
    /// The value before the run (a commit, or `ref: …` for a HEAD); `None`: it did not exist.
    pub before: Option<String>,
    /// The value the agent left; `None`: it deleted the ref.
    pub after: Option<String>,
    /// For a HEAD: the worktree it belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<String>,
    /// Where herd kept what the agent left (`refs/herd/escaped/<id>/…`), so no work is lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept: Option<String>,
    /// Why putting it back failed (it is then left as the agent left it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Everything that can happen in a subagent run, in one persisted vocabulary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AgentEvent {
    // --- lifecycle (herd's own) ---
    SubagentCreated {
        cli: String,
        cwd: String,
    },
    SubagentStarted {
        pid: u32,
        pgid: u32,
        argv: Vec<String>,
    },
    SubagentCompleted,
    SubagentFailed {
        reason: String,
    },
    SubagentCancelled {
        reason: String,
    },
    SubagentClosed {
        final_status: String,
        close_reason: String,
    },
    /// herd began stopping the agent (`interrupt`, `sigint`, `sigterm`, `sigkill`).
    StopRequested {
        step: String,
        why: String,
    },
    /// The result text was cut to the output limit; the transcript has all of it.
    OutputTruncated {
        limit_bytes: u64,
        total_bytes: u64,
    },
    /// The run's stored output reached its bound (`max_stored_output`): from here on its text,
    /// stderr and tool output are not stored (its lifecycle, permission and result events are).
    OutputLimit {
        limit_bytes: u64,
    },
    /// Processes the agent left behind that herd killed when the run ended.
    LeftoversKilled {
        count: u32,
    },
    /// A tool call waits for a person: `herd approve <request>` / `herd deny <request>`.
    PermissionRequested {
        request: String,
        tool: String,
        input_preview: String,
        timeout_ms: u64,
    },
    /// herd answered the agent's permission request (`allow` or `deny`) and what decided.
    PermissionDecided {
        tool: String,
        decision: String,
        by: String,
        #[serde(default)]
        request: Option<String>,
    },
    /// A hook ran; `outcome` is `ok`, `veto`, `failed` or `timeout`.
    HookRan {
        hook: String,
        event: String,
        outcome: String,
        #[serde(default)]
        message: Option<String>,
    },
    /// Auto-approve was switched off mid-run: later calls ask a person.
    AutoApproveRevoked {
        reason: String,
    },
    /// An isolated run's worktree was created (and set up).
    WorktreeCreated {
        path: String,
        branch: String,
        base: String,
    },
    /// The run waits for an advisory lock on its directory held by others.
    LockWaiting {
        path: String,
        mode: String,
        holders: Vec<String>,
    },
    /// The run holds its lock (`none` registers an unlocked run).
    LockAcquired {
        path: String,
        mode: String,
    },
    /// The agent succeeded in an isolated worktree; its branch waits to be merged.
    SubagentWaitingForMerge {
        branch: String,
        head: String,
        auto_committed: bool,
    },
    /// The run's branch was merged into the integration branch.
    WorktreeMerged {
        branch: String,
        into: String,
        commit: String,
    },
    /// The run's branch held nothing the integration branch lacks: no merge was made.
    /// `uncommitted` lists what the agent left uncommitted in its worktree (kept there).
    NothingToMerge {
        branch: String,
        into: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        uncommitted: Vec<String>,
    },
    /// The agent runs without a filesystem sandbox (`sandbox: off`, or none is available).
    Unconfined {
        reason: String,
    },
    /// The agent changed git refs or HEADs other than its own branch; herd put them back.
    RefEscape {
        changes: Vec<RefChange>,
    },
    /// Merging the run's branch conflicted; the merge was aborted and the branch kept.
    MergeConflict {
        branch: String,
        into: String,
        files: Vec<String>,
        output: String,
    },
    // --- decoded from the agent's stream ---
    Init {
        #[serde(default)]
        native_session_id: Option<String>,
        #[serde(default)]
        model: Option<String>,
        #[serde(default)]
        tools: Vec<String>,
    },
    Text {
        text: String,
    },
    Thinking {
        text: String,
    },
    /// Text on the user side of the conversation (subagent prompts, interrupt markers).
    UserText {
        text: String,
    },
    ToolCall {
        id: String,
        /// In Claude Code's vocabulary (what rules, hooks and the audit use).
        name: String,
        input: Value,
        /// The CLI's own name for the tool, where it differs from `name` (gemini
        /// `run_shell_command`, codex `command_execution`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cli_tool: Option<String>,
    },
    ToolResult {
        tool_use_id: String,
        content: String,
        is_error: bool,
    },
    ApiRetry {
        #[serde(default)]
        attempt: Option<u32>,
        #[serde(default)]
        max_retries: Option<u32>,
        #[serde(default)]
        error_status: Option<u16>,
        #[serde(default)]
        error: Option<String>,
    },
    /// Claude's own internal subagents (`system/task_*`).
    Task {
        subtype: String,
        #[serde(default)]
        task_id: Option<String>,
        #[serde(default)]
        description: Option<String>,
        #[serde(default)]
        status: Option<String>,
    },
    /// A partial-message stream event; only its type is kept here (the transcript has all).
    StreamEvent {
        event_type: String,
    },
    /// Another `system` subtype.
    System {
        subtype: String,
    },
    ControlRequest {
        request_id: String,
        subtype: String,
        request: Value,
    },
    ControlResponse {
        #[serde(default)]
        request_id: Option<String>,
        #[serde(default)]
        subtype: Option<String>,
    },
    Result(ResultInfo),
    /// A line on the agent's stderr.
    Stderr {
        line: String,
    },
    /// Valid JSON of a shape herd does not know, kept verbatim.
    Unknown {
        raw: String,
    },
    /// A line that is not valid JSON (or was cut); a preview is kept, the transcript has all of it.
    DecodeError {
        error: String,
        preview: String,
    },
    /// A line longer than the reader's bound: skipped (but kept in the transcript).
    LineTooLong {
        bytes: u64,
        limit: u64,
    },
}

/// Roughly what a JSON value weighs stored: its strings and a little per node.
fn json_weight(v: &Value) -> usize {
    match v {
        Value::String(s) => s.len() + 2,
        Value::Array(a) => 2 + a.iter().map(json_weight).sum::<usize>(),
        Value::Object(o) => 2 + o.iter().map(|(k, v)| k.len() + 4 + json_weight(v)).sum::<usize>(),
        _ => 8,
    }
}

impl AgentEvent {
    /// Roughly how many bytes this event takes when stored: its large fields plus a fixed
    /// overhead. What bounds the memory a run's output holds and how much of it is stored.
    pub fn weight(&self) -> usize {
        const OVERHEAD: usize = 64;
        OVERHEAD
            + match self {
                Self::Text { text } | Self::Thinking { text } | Self::UserText { text } => {
                    text.len()
                }
                Self::Stderr { line } => line.len(),
                Self::Unknown { raw } => raw.len(),
                Self::DecodeError { error, preview } => error.len() + preview.len(),
                Self::ToolResult { content, .. } => content.len(),
                Self::ToolCall { input, .. } => json_weight(input),
                Self::ControlRequest { request, .. } => json_weight(request),
                Self::Result(r) => {
                    r.text.as_ref().map_or(0, String::len)
                        + r.errors.iter().map(String::len).sum::<usize>()
                }
                Self::MergeConflict { output, .. } => output.len(),
                _ => 0,
            }
    }

    /// Output of the agent that a run may stop storing once it has stored enough: its text,
    /// stderr and tool output — never its lifecycle, permission, tool-call or result events.
    pub fn is_bulk_output(&self) -> bool {
        matches!(
            self,
            Self::Text { .. }
                | Self::Thinking { .. }
                | Self::UserText { .. }
                | Self::Stderr { .. }
                | Self::ToolResult { .. }
                | Self::StreamEvent { .. }
                | Self::Unknown { .. }
                | Self::DecodeError { .. }
                | Self::LineTooLong { .. }
        )
    }

    /// The stored `kind` of this event (its serde tag).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::SubagentCreated { .. } => "subagent_created",
            Self::SubagentStarted { .. } => "subagent_started",
            Self::SubagentCompleted => "subagent_completed",
            Self::SubagentFailed { .. } => "subagent_failed",
            Self::SubagentCancelled { .. } => "subagent_cancelled",
            Self::SubagentClosed { .. } => "subagent_closed",
            Self::StopRequested { .. } => "stop_requested",
            Self::OutputTruncated { .. } => "output_truncated",
            Self::OutputLimit { .. } => "output_limit",
            Self::LeftoversKilled { .. } => "leftovers_killed",
            Self::PermissionRequested { .. } => "permission_requested",
            Self::PermissionDecided { .. } => "permission_decided",
            Self::HookRan { .. } => "hook_ran",
            Self::AutoApproveRevoked { .. } => "auto_approve_revoked",
            Self::WorktreeCreated { .. } => "worktree_created",
            Self::LockWaiting { .. } => "lock_waiting",
            Self::LockAcquired { .. } => "lock_acquired",
            Self::SubagentWaitingForMerge { .. } => "subagent_waiting_for_merge",
            Self::WorktreeMerged { .. } => "worktree_merged",
            Self::NothingToMerge { .. } => "nothing_to_merge",
            Self::MergeConflict { .. } => "merge_conflict",
            Self::Unconfined { .. } => "unconfined",
            Self::RefEscape { .. } => "ref_escape",
            Self::Init { .. } => "init",
            Self::Text { .. } => "text",
            Self::Thinking { .. } => "thinking",
            Self::UserText { .. } => "user_text",
            Self::ToolCall { .. } => "tool_call",
            Self::ToolResult { .. } => "tool_result",
            Self::ApiRetry { .. } => "api_retry",
            Self::Task { .. } => "task",
            Self::StreamEvent { .. } => "stream_event",
            Self::System { .. } => "system",
            Self::ControlRequest { .. } => "control_request",
            Self::ControlResponse { .. } => "control_response",
            Self::Result(_) => "result",
            Self::Stderr { .. } => "stderr",
            Self::Unknown { .. } => "unknown",
            Self::DecodeError { .. } => "decode_error",
            Self::LineTooLong { .. } => "line_too_long",
        }
    }
}

/// One decoded event with the tool call it belongs to, if it came from inside one of the
/// agent's own subagents (claude's `parent_tool_use_id`).
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    pub parent_tool_use_id: Option<String>,
    pub event: AgentEvent,
}

impl Decoded {
    /// A top-level event.
    pub fn top(event: AgentEvent) -> Self {
        Self { parent_tool_use_id: None, event }
    }
}

/// Cut `s` to at most `max` bytes on a char boundary.
pub fn truncate_str(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_matches_serde_tag() {
        let samples = [
            AgentEvent::SubagentCompleted,
            AgentEvent::Text { text: "hi".into() },
            AgentEvent::LineTooLong { bytes: 1, limit: 1 },
            AgentEvent::Unconfined { reason: "sandbox: off".into() },
            AgentEvent::RefEscape {
                changes: vec![RefChange {
                    name: "refs/heads/rogue".into(),
                    change: RefChangeKind::Created,
                    before: None,
                    after: Some("abc".into()),
                    worktree: None,
                    kept: Some("refs/herd/escaped/sub_1/heads/rogue".into()),
                    error: None,
                }],
            },
            AgentEvent::Result(ResultInfo {
                subtype: ResultKind::Success,
                is_error: false,
                text: None,
                api_error_status: None,
                errors: vec![],
                num_turns: None,
                native_session_id: None,
                usage: Usage::default(),
                cost_usd: None,
                duration_ms: None,
                permission_denials: vec![],
                terminal_reason: None,
            }),
        ];
        for ev in samples {
            let v = serde_json::to_value(&ev).unwrap();
            assert_eq!(v["kind"], ev.kind());
            assert_eq!(serde_json::from_value::<AgentEvent>(v).unwrap(), ev);
        }
    }

    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(truncate_str("héllo", 2), "h");
        assert_eq!(truncate_str("abc", 10), "abc");
    }
}
