//! Subagent statuses, the table of legal transitions between them, and why a run failed.
//! Every status change in herd goes through [`Status::check_transition`]; an illegal one is a bug.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Where a subagent is in its lifecycle (DESIGN §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Row and contract persisted; no process yet.
    Pending,
    /// Waiting for a pool slot or a lock.
    Queued,
    /// The agent process is running.
    Running,
    /// Finished in an isolated worktree; the parent must merge.
    WaitingForMerge,
    /// Done, and the backend's terminal event said so.
    Completed,
    /// Done, unsuccessfully; see [`FailureReason`].
    Failed,
    /// Stopped on request.
    Cancelled,
}

/// All statuses, in lifecycle order.
pub const ALL_STATUSES: [Status; 7] = [
    Status::Pending,
    Status::Queued,
    Status::Running,
    Status::WaitingForMerge,
    Status::Completed,
    Status::Failed,
    Status::Cancelled,
];

/// A status change the lifecycle does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("illegal status transition {from} -> {to}")]
pub struct IllegalTransition {
    pub from: Status,
    pub to: Status,
}

impl Status {
    /// The text stored and printed for this status.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Queued => "queued",
            Self::Running => "running",
            Self::WaitingForMerge => "waiting_for_merge",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// No transition leaves a terminal status.
    pub const fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }

    /// The legal-transition table.
    pub const fn can_become(self, to: Status) -> bool {
        use Status::*;
        match self {
            Pending => matches!(to, Queued | Running | Failed | Cancelled),
            Queued => matches!(to, Running | Failed | Cancelled),
            Running => matches!(to, WaitingForMerge | Completed | Failed | Cancelled),
            WaitingForMerge => matches!(to, Completed | Failed | Cancelled),
            Completed | Failed | Cancelled => false,
        }
    }

    /// `Ok` if `self -> to` is legal.
    pub fn check_transition(self, to: Status) -> Result<(), IllegalTransition> {
        if self.can_become(to) { Ok(()) } else { Err(IllegalTransition { from: self, to }) }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Text that names no status.
#[derive(Debug, thiserror::Error)]
#[error("unknown status {0:?}")]
pub struct UnknownStatus(pub String);

impl FromStr for Status {
    type Err = UnknownStatus;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ALL_STATUSES
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

/// Why a subagent failed. Rendered as `code` or `code(detail)` / `code: message`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum FailureReason {
    /// The process exited non-zero without a terminal event saying otherwise.
    ExitCode { code: i32 },
    /// The process was killed by a signal we did not send.
    Signal { signal: i32 },
    /// The run exceeded its time limit.
    Timeout,
    /// The agent reached its turn limit.
    MaxTurns,
    /// The model API answered with an error.
    ApiError { status: Option<u16>, message: String },
    /// The agent reported an error during execution.
    AgentError { message: String },
    /// The process ended without the backend's terminal event.
    NoResult { exit_code: Option<i32> },
    /// A step this one depends on failed.
    DependencyFailed { step: String },
    /// Merging the work back conflicted.
    MergeConflict,
    /// A policy refused the run.
    Policy { message: String },
    /// The process could not be started.
    SpawnError { message: String },
    /// The herd process that owned the run died.
    Orphaned,
    /// The result exceeded the output limit and the policy was to fail.
    OutputLimit,
    /// A lock (or another bounded resource) was unavailable and the run would not wait.
    ResourceExhausted { message: String },
    /// The workspace could not be prepared or finished: worktree, setup command, auto-commit.
    Workspace { message: String },
    /// The agent moved, made or deleted git refs other than its own branch, or changed a HEAD;
    /// herd put them back (event `ref_escape` has what it did). The refs it touched.
    RefEscape { refs: Vec<String> },
    /// The agent did not speak its protocol: an ACP agent that never answered `initialize` (or
    /// `session/new`) in time, or answered with something that is not its answer.
    ProtocolError { message: String },
}

impl FailureReason {
    /// The stable, machine-readable code (`timeout`, `max_turns`, …).
    pub fn code(&self) -> &'static str {
        match self {
            Self::ExitCode { .. } => "exit_code",
            Self::Signal { .. } => "signal",
            Self::Timeout => "timeout",
            Self::MaxTurns => "max_turns",
            Self::ApiError { .. } => "api_error",
            Self::AgentError { .. } => "agent_error",
            Self::NoResult { .. } => "no_result",
            Self::DependencyFailed { .. } => "dependency_failed",
            Self::MergeConflict => "merge_conflict",
            Self::Policy { .. } => "policy",
            Self::SpawnError { .. } => "spawn_error",
            Self::Orphaned => "orphaned",
            Self::OutputLimit => "output_limit",
            Self::ResourceExhausted { .. } => "resource_exhausted",
            Self::Workspace { .. } => "workspace",
            Self::RefEscape { .. } => "ref_escape",
            Self::ProtocolError { .. } => "protocol_error",
        }
    }
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ExitCode { code } => write!(f, "exit_code({code})"),
            Self::Signal { signal } => write!(f, "signal({signal})"),
            Self::ApiError { status: Some(s), message } => write!(f, "api_error({s}): {message}"),
            Self::ApiError { status: None, message } => write!(f, "api_error: {message}"),
            Self::AgentError { message } => write!(f, "agent_error: {message}"),
            Self::NoResult { exit_code: Some(c) } => {
                write!(f, "no_result: the agent exited with code {c} without a result event")
            }
            Self::NoResult { exit_code: None } => {
                write!(f, "no_result: the agent was killed without a result event")
            }
            Self::DependencyFailed { step } => write!(f, "dependency_failed({step})"),
            Self::Policy { message } => write!(f, "policy: {message}"),
            Self::SpawnError { message } => write!(f, "spawn_error: {message}"),
            Self::ResourceExhausted { message } => write!(f, "RESOURCE_EXHAUSTED: {message}"),
            Self::Workspace { message } => write!(f, "workspace: {message}"),
            Self::RefEscape { refs } => write!(f, "ref_escape({})", refs.join(", ")),
            Self::ProtocolError { message } => write!(f, "protocol_error: {message}"),
            other => f.write_str(other.code()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn lifecycle_paths_are_legal() {
        use Status::*;
        for path in [
            &[Pending, Queued, Running, Completed][..],
            &[Pending, Running, WaitingForMerge, Completed],
            &[Pending, Running, Failed],
            &[Pending, Cancelled],
            &[Pending, Queued, Running, Cancelled],
        ] {
            for w in path.windows(2) {
                w[0].check_transition(w[1]).unwrap();
            }
        }
    }

    #[test]
    fn illegal_transitions_are_errors() {
        use Status::*;
        assert!(Completed.check_transition(Running).is_err());
        assert!(Running.check_transition(Queued).is_err());
        assert!(Failed.check_transition(Completed).is_err());
        assert_eq!(
            Completed.check_transition(Failed).unwrap_err().to_string(),
            "illegal status transition completed -> failed"
        );
    }

    #[test]
    fn reasons_render() {
        assert_eq!(FailureReason::Timeout.to_string(), "timeout");
        assert_eq!(FailureReason::Orphaned.to_string(), "orphaned");
        assert_eq!(FailureReason::ExitCode { code: 2 }.to_string(), "exit_code(2)");
        let api = FailureReason::ApiError { status: Some(500), message: "boom".into() };
        assert_eq!(api.to_string(), "api_error(500): boom");
        assert_eq!(api.code(), "api_error");
        let json = serde_json::to_string(&api).unwrap();
        assert_eq!(serde_json::from_str::<FailureReason>(&json).unwrap(), api);
        let esc = FailureReason::RefEscape { refs: vec!["refs/heads/main".into(), "HEAD".into()] };
        assert_eq!(esc.to_string(), "ref_escape(refs/heads/main, HEAD)");
        assert_eq!(esc.code(), "ref_escape");
        let proto = FailureReason::ProtocolError { message: "no answer to initialize".into() };
        assert_eq!(proto.to_string(), "protocol_error: no answer to initialize");
        assert_eq!(proto.code(), "protocol_error");
    }

    proptest! {
        #[test]
        fn terminal_states_are_absorbing_and_no_self_loops(a in 0usize..7, b in 0usize..7) {
            let (from, to) = (ALL_STATUSES[a], ALL_STATUSES[b]);
            if from.is_terminal() { prop_assert!(!from.can_become(to)); }
            prop_assert!(!from.can_become(from));
            prop_assert_eq!(from.as_str().parse::<Status>().unwrap(), from);
            // Never back to an earlier phase of the lifecycle.
            if from.can_become(to) { prop_assert!(b > a); }
        }
    }
}
