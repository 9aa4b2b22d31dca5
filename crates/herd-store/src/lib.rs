//! herd-store: everything herd persists — the SQLite database (sessions, subagents, events),
//! its migrations, the single batching event writer, and per-subagent transcripts.

mod audit;
mod db;
mod merges;
mod migrate;
mod model;
mod plans;
mod queue;
mod sql;
mod store;
#[cfg(test)]
mod testing;
mod transcript;
mod worktrees;
mod writer;

pub use audit::{
    AUDIT_RETENTION_DAYS, Answered, AuditFilter, AuditRow, NewAudit, NewPermissionRequest,
    PermissionRequestRow, RunRequests,
};
pub use db::{Backend, redact};
pub use merges::{MergeCandidate, MergeEnd, PlanRepo};
pub use model::{NewSubagent, StoredEvent, SubagentRow, Update};
pub use plans::{
    ActivePlan, NewOrchestration, NewStep, OrchestrationRow, PlanEvent, PlanTotals, StepChange,
    StepRow, StepTally,
};
pub use queue::{Claim, QueuedStep, STEPS_CHANNEL, WorkerRow};
pub use store::{OrphanCandidate, STATE_GITIGNORE, StatePaths, Store, host_id, orphaned_update};
pub use transcript::{Meta, Transcript};
pub use worktrees::{IsAlive, IsAliveFn, LockHolder, NewWorktree, WorktreeRow};
pub use writer::{Created, Pending, Writer, WriterHandle};

/// Store failures. Messages name the file or record involved.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database {path}: {source}")]
    Db { path: String, source: rusqlite::Error },
    #[error("{0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("PostgreSQL at {url}: {source}")]
    Pg { url: String, source: Box<tokio_postgres::Error> },
    /// A statement PostgreSQL refused: what it said, its SQLSTATE code (`08006` for a lost
    /// connection), and the statement's first line.
    #[error("PostgreSQL: {message}{}", in_statement(.statement))]
    Postgres { message: String, code: Option<String>, statement: Option<String> },
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("no subagent matches {0:?}")]
    NotFound(String),
    #[error("{prefix:?} is ambiguous: it matches {matches}")]
    Ambiguous { prefix: String, matches: String },
    #[error("subagent {id}: {source}")]
    Transition { id: String, source: herd_core::IllegalTransition },
    #[error(
        "the database {path} has schema version {found}, newer than this herd understands ({known}); upgrade herd"
    )]
    TooNew { path: String, found: i64, known: i64 },
    #[error("corrupt record: {0}")]
    Corrupt(String),
    #[error("the store writer stopped: {0}")]
    WriterGone(String),
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        StoreError::Postgres {
            message: e.to_string(),
            code: e.code().map(|c| c.code().to_owned()),
            statement: None,
        }
    }
}

fn in_statement(s: &Option<String>) -> String {
    s.as_ref().map(|s| format!(" (in: {s})")).unwrap_or_default()
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
