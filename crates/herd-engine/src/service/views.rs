//! What the service answers with: one shape per object — a run, a plan and its steps, a
//! permission request, a worktree — shared by every surface's JSON (CLI, MCP, later gRPC).
//!
//! Timestamps are stored as milliseconds and shown as RFC 3339 text. A run's `status` is its
//! lifecycle status (the transition table); `state` refines it for people (see [`RunState`]).

use std::path::PathBuf;

use herd_core::time::{ser_ms, ser_opt_ms};
use herd_core::{FailureReason, Status, Usage};
use herd_store::{
    AuditRow, OrchestrationRow, PermissionRequestRow, StepRow, StepTally, SubagentRow, WorktreeRow,
    now_ms,
};
use serde::Serialize;

/// A run's status refined by what a person needs to know. Derived on every read from the
/// record (the lifecycle status and the run's permission requests), never stored: a run that
/// waits for a person is still `running` in the transition table, and one whose calls were
/// denied for want of an answer still `completed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    Pending,
    Queued,
    Running,
    /// Running, and one of its tool calls waits for a person (`herd approve`).
    Waiting,
    WaitingForMerge,
    Completed,
    /// Completed, but calls it made were denied because nobody answered (the permission
    /// timeout passed, or it ran non-interactively): likely not the whole job.
    CompletedWithDenials,
    Failed,
    Cancelled,
}

impl RunState {
    /// The state of a run in `status` with a call `waiting` and `unanswered` denials.
    pub fn of(status: Status, waiting: bool, unanswered: u32) -> Self {
        match status {
            Status::Pending => Self::Pending,
            Status::Queued => Self::Queued,
            Status::Running if waiting => Self::Waiting,
            Status::Running => Self::Running,
            Status::WaitingForMerge => Self::WaitingForMerge,
            Status::Completed if unanswered > 0 => Self::CompletedWithDenials,
            Status::Completed => Self::Completed,
            Status::Failed => Self::Failed,
            Status::Cancelled => Self::Cancelled,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Waiting => "waiting",
            Self::WaitingForMerge => "waiting_for_merge",
            Self::Completed => "completed",
            Self::CompletedWithDenials => "completed_with_denials",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

impl std::fmt::Display for RunState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One subagent run.
#[derive(Debug, Clone, Serialize)]
pub struct RunView {
    pub id: String,
    /// The session it is recorded under (its caller's, else the service's own).
    #[serde(skip)]
    pub parent_session_id: String,
    /// A short label: a plan step's key, an MCP task's description, else the CLI's name.
    pub name: String,
    pub cli: String,
    /// The lifecycle status (pending, queued, running, waiting_for_merge, completed, failed,
    /// cancelled).
    pub status: Status,
    /// `status` refined: `waiting` while a call waits for a person, `completed_with_denials`
    /// when calls were denied for want of an answer.
    pub state: RunState,
    pub failure_reason: Option<String>,
    /// The plan and step this run is, when it is one.
    pub plan_id: Option<String>,
    pub step: Option<String>,
    /// The task as the caller gave it (without the context blocks herd put before it).
    pub prompt: String,
    /// The model: as asked for, then as the agent's stream names it.
    pub model: Option<String>,
    pub cwd: String,
    pub native_session_id: Option<String>,
    pub result: Option<String>,
    pub result_truncated: bool,
    /// Model turns so far (live while it runs).
    pub num_turns: Option<u32>,
    /// Tokens so far (live while it runs).
    pub usage: Usage,
    pub cost_usd: Option<f64>,
    pub pid: Option<u32>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    /// Tool calls denied because nobody answered.
    pub unanswered_denials: u32,
    #[serde(serialize_with = "ser_ms")]
    pub created_at: i64,
    #[serde(serialize_with = "ser_opt_ms")]
    pub started_at: Option<i64>,
    #[serde(serialize_with = "ser_opt_ms")]
    pub completed_at: Option<i64>,
    pub duration_ms: Option<i64>,
    /// Where its raw stream is kept.
    pub transcript: PathBuf,
    /// Its worktree, when it worked in one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktree: Option<WorktreeView>,
    /// Its tool calls waiting for a person.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pending_permissions: Vec<PermissionRequestView>,
    /// The typed failure (its string form is `failure_reason`).
    #[serde(skip)]
    pub failure: Option<FailureReason>,
    /// Closed: nothing more will happen to it.
    #[serde(skip)]
    pub closed: bool,
}

impl RunView {
    pub(crate) fn of(r: SubagentRow, transcript: PathBuf) -> Self {
        let duration_ms = r.duration_ms();
        let plan = &r.spec["plan"];
        let text = |v: &serde_json::Value| v.as_str().map(str::to_owned);
        Self {
            state: RunState::of(r.status, r.waiting, r.unanswered),
            plan_id: text(&plan["id"]),
            step: text(&plan["step"]),
            id: r.id,
            parent_session_id: r.parent_session_id,
            name: r.name,
            cli: r.cli,
            status: r.status,
            failure_reason: r.failure_reason,
            prompt: r.prompt,
            model: r.model,
            cwd: r.working_directory,
            native_session_id: r.native_session_id,
            result: r.result,
            result_truncated: r.result_truncated,
            num_turns: r.num_turns,
            usage: r.usage,
            cost_usd: r.cost_usd,
            pid: r.pid,
            exit_code: r.exit_code,
            exit_signal: r.exit_signal,
            unanswered_denials: r.unanswered,
            created_at: r.created_at,
            started_at: r.started_at,
            completed_at: r.completed_at,
            duration_ms,
            transcript,
            worktree: None,
            pending_permissions: Vec::new(),
            failure: r.failure,
            closed: r.closed_at.is_some(),
        }
    }

    /// Ended (completed, failed, cancelled) — a run waiting for its merge has not.
    pub fn is_terminal(&self) -> bool {
        self.status.is_terminal()
    }
}

/// A worktree herd created: a step's or task's, or the integration worktree of a run.
#[derive(Debug, Clone, Serialize)]
pub struct WorktreeView {
    pub id: String,
    /// `step` (an agent works there) or `integration` (herd merges there).
    pub kind: String,
    pub run_id: String,
    pub step: String,
    pub subagent_id: Option<String>,
    pub repo: String,
    pub path: String,
    pub branch: String,
    pub base: String,
    pub integration_branch: Option<String>,
    /// `active`, `waiting_for_merge`, `merged`, `conflict`, `failed` or `removed`.
    pub status: String,
    pub head: Option<String>,
    pub merge_commit: Option<String>,
    #[serde(serialize_with = "ser_ms")]
    pub created_at: i64,
    #[serde(serialize_with = "ser_opt_ms")]
    pub merged_at: Option<i64>,
    #[serde(serialize_with = "ser_opt_ms")]
    pub removed_at: Option<i64>,
}

impl From<WorktreeRow> for WorktreeView {
    fn from(w: WorktreeRow) -> Self {
        Self {
            id: w.id,
            kind: w.kind,
            run_id: w.run_id,
            step: w.step_key,
            subagent_id: w.subagent_id,
            repo: w.repo,
            path: w.path,
            branch: w.branch,
            base: w.base,
            integration_branch: w.integration_branch,
            status: w.status,
            head: w.head,
            merge_commit: w.merge_commit,
            created_at: w.created_at,
            merged_at: w.merged_at,
            removed_at: w.removed_at,
        }
    }
}

/// A tool call that waits (or waited) for a person.
#[derive(Debug, Clone, Serialize)]
pub struct PermissionRequestView {
    pub id: String,
    pub subagent_id: String,
    /// The asking run's name (a plan step's key).
    pub run_name: String,
    /// The plan and step the asking run is, when it is one.
    pub plan_id: Option<String>,
    pub step: Option<String>,
    pub tool: String,
    pub input_preview: String,
    pub input_sha256: String,
    /// `pending`, `approved`, `denied`, `expired` (nobody answered) or `cancelled` (the run
    /// ended first).
    pub status: String,
    #[serde(serialize_with = "ser_ms")]
    pub created_at: i64,
    #[serde(serialize_with = "ser_ms")]
    pub expires_at: i64,
    /// Seconds left to answer (0 once expired).
    pub expires_in_s: i64,
    pub always: bool,
    pub reason: Option<String>,
    pub decided_by: Option<String>,
}

impl From<PermissionRequestRow> for PermissionRequestView {
    fn from(r: PermissionRequestRow) -> Self {
        Self {
            expires_in_s: (r.expires_at - now_ms()).max(0) / 1000,
            id: r.id,
            subagent_id: r.subagent_id,
            run_name: r.run_name,
            plan_id: r.plan_id,
            step: r.step,
            tool: r.tool,
            input_preview: r.input_preview,
            input_sha256: r.input_sha256,
            status: r.status,
            created_at: r.created_at,
            expires_at: r.expires_at,
            always: r.always,
            reason: r.reason,
            decided_by: r.decided_by,
        }
    }
}

/// A plan run and its steps.
#[derive(Debug, Clone, Serialize)]
pub struct PlanView {
    pub id: String,
    pub name: String,
    pub strategy: String,
    /// `pending`, `running`, `completed`, `failed`, `cancelled`, or `interrupted` (its herd
    /// died with steps unfinished: `herd run --resume` runs them).
    pub status: String,
    /// `status`, or `cancelling` once a stop was asked for and it has not ended yet.
    pub state: String,
    /// The plan file it was read from, when it was.
    pub source_file: Option<String>,
    pub total_steps: u32,
    pub completed_steps: u32,
    pub failed_steps: u32,
    pub cancelled_steps: u32,
    /// Steps whose run is under way (started, waiting for a place or a person, merging).
    pub running_steps: u32,
    /// Steps that have not started (waiting for their dependencies, or for a lock).
    pub pending_steps: u32,
    /// Over its runs (while it runs: each step's latest run).
    pub cost_usd: f64,
    pub usage: PlanUsage,
    #[serde(serialize_with = "ser_ms")]
    pub created_at: i64,
    #[serde(serialize_with = "ser_opt_ms")]
    pub completed_at: Option<i64>,
    /// From its creation to its end (or to now while it runs).
    pub duration_ms: i64,
    /// Where its isolated steps were merged, when it has any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub integration_branch: Option<String>,
    /// Its steps in plan order (left out of lists: `herd show PLAN` has them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<Vec<StepView>>,
    /// The worktrees of its isolated steps and its integration worktree: the merge results.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub worktrees: Vec<WorktreeView>,
}

/// A plan's tokens.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct PlanUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl PlanView {
    /// A plan from its row and its steps' tally (live figures while it has not ended).
    pub(crate) fn of(o: OrchestrationRow, t: StepTally) -> Self {
        let ended = matches!(o.status.as_str(), "completed" | "failed" | "cancelled");
        let state = if !ended && o.cancel_requested_at.is_some() {
            "cancelling".to_owned()
        } else {
            o.status.clone()
        };
        // Once ended, the plan's own roll-up (retried attempts included) is the record.
        let (cost_usd, usage) = if ended {
            (o.cost_usd, PlanUsage { input_tokens: o.input_tokens, output_tokens: o.output_tokens })
        } else {
            (t.cost_usd, PlanUsage { input_tokens: t.input_tokens, output_tokens: t.output_tokens })
        };
        Self {
            duration_ms: o.completed_at.unwrap_or_else(now_ms) - o.created_at,
            id: o.id,
            name: o.name,
            strategy: o.strategy,
            status: o.status,
            state,
            source_file: o.source_file,
            total_steps: o.total_steps,
            completed_steps: t.completed,
            failed_steps: t.failed,
            cancelled_steps: t.cancelled,
            running_steps: t.running,
            pending_steps: t.pending + t.blocked,
            cost_usd,
            usage,
            created_at: o.created_at,
            completed_at: o.completed_at,
            integration_branch: None,
            steps: None,
            worktrees: Vec::new(),
        }
    }

    pub fn is_terminal(&self) -> bool {
        plan_status_ended(&self.status)
    }
}

/// Whether a plan in `status` has ended (an `interrupted` one until `--resume` reopens it).
pub(crate) fn plan_status_ended(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "cancelled" | "interrupted")
}

/// One step of a plan, with the figures of its latest run.
#[derive(Debug, Clone, Serialize)]
pub struct StepView {
    pub id: String,
    pub name: String,
    /// `pending`, `running`, `blocked`, `completed`, `failed` or `cancelled`.
    pub status: String,
    /// What it is doing: `pending` (its dependencies have not ended), `queued` (waiting for a
    /// place or a lock), `starting`, `running`, `waiting` (for a person), `merging`, or its
    /// end (`completed`, `completed_with_denials`, `failed`, `cancelled`).
    pub state: String,
    pub failure_reason: Option<String>,
    /// The run of its latest attempt.
    pub subagent_id: Option<String>,
    pub attempts: u32,
    pub depends_on: Vec<String>,
    pub model: Option<String>,
    pub num_turns: Option<u32>,
    pub usage: Usage,
    pub cost_usd: Option<f64>,
    /// Tool calls of its run denied because nobody answered.
    pub unanswered_denials: u32,
    /// Its run's result text (what its dependents were given).
    pub result: Option<String>,
    #[serde(serialize_with = "ser_opt_ms")]
    pub started_at: Option<i64>,
    #[serde(serialize_with = "ser_opt_ms")]
    pub completed_at: Option<i64>,
    pub duration_ms: Option<i64>,
    /// The files it declares it produces, where they are.
    pub outputs: Vec<PathBuf>,
}

impl StepView {
    pub(crate) fn of(s: StepRow, run: Option<SubagentRow>, outputs: Vec<PathBuf>) -> Self {
        let run_state = run.as_ref().map(|r| RunState::of(r.status, r.waiting, r.unanswered));
        let state = match (s.status.as_str(), run_state, &run) {
            ("running" | "blocked", Some(RunState::Pending), _) => "queued",
            ("running" | "blocked", Some(RunState::Queued), _) => "queued",
            // Started, and the agent CLI has not said anything yet (a program has nothing to say).
            ("running", Some(RunState::Running), Some(r))
                if r.cli != "command"
                    && r.native_session_id.is_none()
                    && r.num_turns.unwrap_or(0) == 0 =>
            {
                "starting"
            }
            ("running", Some(RunState::Waiting), _) => "waiting",
            ("running", Some(RunState::WaitingForMerge), _) => "merging",
            ("running", Some(_), _) => "running",
            ("completed", Some(RunState::CompletedWithDenials), _) => "completed_with_denials",
            ("blocked", None, _) => "queued",
            (other, _, _) => other,
        }
        .to_owned();
        let (started_at, duration_ms) = match &run {
            Some(r) => (r.started_at, r.duration_ms()),
            None => (None, None),
        };
        Self {
            id: s.step_key,
            name: s.name,
            status: s.status,
            state,
            failure_reason: s.failure_reason,
            subagent_id: s.subagent_id,
            attempts: s.attempts,
            depends_on: s.depends_on,
            model: run.as_ref().and_then(|r| r.model.clone()),
            num_turns: run.as_ref().and_then(|r| r.num_turns),
            usage: run.as_ref().map(|r| r.usage).unwrap_or_default(),
            cost_usd: run.as_ref().and_then(|r| r.cost_usd),
            unanswered_denials: run.as_ref().map_or(0, |r| r.unanswered),
            result: run.as_ref().and_then(|r| r.result.clone()),
            started_at,
            completed_at: s.completed_at,
            duration_ms,
            outputs,
        }
    }

    /// Ended: completed, failed or cancelled.
    pub fn is_terminal(&self) -> bool {
        matches!(self.status.as_str(), "completed" | "failed" | "cancelled")
    }
}

/// One audit log entry.
pub type AuditEntry = AuditRow;

/// One entry of a plan's own event log: the plan's transitions and its steps'.
#[derive(Debug, Clone, Serialize)]
pub struct PlanEventView {
    pub plan_id: String,
    pub seq: i64,
    #[serde(serialize_with = "ser_ms")]
    pub ts: i64,
    /// `plan_created`, `plan_running`, `step_started`, `subagent_attempt`, `step_completed`,
    /// `step_failed`, `step_cancelled`, `step_blocked`, `plan_cancel_requested`,
    /// `plan_completed`, `plan_failed`, `plan_cancelled`.
    pub kind: String,
    pub step: Option<String>,
    /// The run a step event is about.
    pub subagent_id: Option<String>,
    pub status: Option<String>,
    pub reason: Option<String>,
    pub attempt: Option<u32>,
    /// The event's JSON as stored (for surfaces that pass it on whole).
    #[serde(skip)]
    pub payload: String,
}

impl PlanEventView {
    pub(crate) fn of(plan_id: &str, e: herd_store::PlanEvent) -> Self {
        let p: serde_json::Value = serde_json::from_str(&e.payload).unwrap_or_default();
        let text = |k: &str| p[k].as_str().map(str::to_owned);
        Self {
            plan_id: plan_id.to_owned(),
            seq: e.seq,
            ts: e.ts,
            kind: e.kind,
            step: e.step,
            subagent_id: text("subagent_id"),
            status: text("status"),
            reason: text("reason"),
            attempt: p["attempt"].as_u64().map(|a| a as u32),
            payload: e.payload,
        }
    }
}
