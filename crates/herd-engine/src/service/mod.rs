//! The engine service: the one door every surface (CLI, MCP, the daemon to come) uses to reach
//! the engine — spawn, plans, cancel, answers, status, wait, watch, list — and what it owns.
//!
//! It owns the pool and its queue (one for tasks and plan steps), the registry of the jobs this
//! process runs, agent resolution and context assembly (one path for tasks and steps), and the
//! stop ladder. Surfaces translate their parameters into its vocabulary ([`api`]), make one
//! call, and render what comes back ([`views`]); errors are [`ApiError`]s with a closed set of
//! codes.

mod api;
mod board;
mod error;
mod jobs;
mod plan_watch;
mod plans;
mod pool;
mod queue_watch;
mod read;
mod request;
mod tasks;
mod views;
mod watch;
mod worker;
mod worker_repo;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use herd_store::StatePaths;

pub use api::{
    Answer, Caller, CancelLevel, DEPTH_VAR, MAX_DEPTH_VAR, PlanSource, PlanSpec, TaskSpec,
    WaitMode, WorkspaceSpec,
};
pub use error::{ApiError, Code};
/// Where a service's database is (`--store`), and a worker as the shared store records it.
pub use herd_store::{Backend as StoreBackend, WorkerRow};
pub use jobs::{JobState, Waited};
pub use plan_watch::PlanWatch;
pub use plans::{PlanOutline, PlanStarted};
pub use queue_watch::QueueWatch;
pub use read::{AuditQuery, GcReport, Pruned, RunFilter};
pub use request::{AGENTS_MD_BUDGET, DEFAULT_TIMEOUT, MEMORY_BUDGET};
pub use tasks::Spawned;
pub use views::{
    AuditEntry, PermissionRequestView, PlanEventView, PlanUsage, PlanView, RunState, RunView,
    StepView, WorktreeView,
};
pub use watch::Watch;
pub use worker::{WorkerOptions, WorkerSummary};

pub use crate::plan::{PlanReport, PlanUpdate, PriorStep, Resume, StepOutcome};
pub use crate::{Progress, StopLevel};
pub use herd_store::{AUDIT_RETENTION_DAYS, StoredEvent};

use crate::{Engine, EngineConfig, GuardCommand};

/// Agents alive at once when nothing says otherwise.
pub const DEFAULT_MAX_CONCURRENT: usize = 5;
/// Tasks that may wait for a place when nothing says otherwise.
pub const DEFAULT_MAX_QUEUE: usize = 20;

/// How a service runs: its pool, and whether others share it.
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    /// What kind of surface opened it (`cli`, `mcp`, `daemon`): its session is recorded so.
    pub surface: String,
    /// Agents alive at once, tasks and plan steps together (1-20).
    pub max_concurrent: usize,
    /// Tasks that may wait for a place; beyond that a spawn is `RESOURCE_EXHAUSTED`.
    pub max_queue: usize,
    /// Several callers share this service (MCP, a daemon): one caller's steps must not register
    /// in a directory ahead of their place, since another's work may wait for a lock there
    /// while holding a place.
    pub shared: bool,
    /// `max_concurrent` came from the project's config (not a default).
    pub configured_max_concurrent: bool,
    pub engine: EngineConfig,
    /// Where the database is (SQLite under the state dir unless a PostgreSQL URL is given).
    pub store: herd_store::Backend,
}

impl ServiceOptions {
    /// The options `project_root`'s `.herd/config.yml` sets (`max_concurrent`, `max_queue`),
    /// else the defaults; a surface's flags override them after.
    pub fn for_project(project_root: &Path, surface: &str) -> Result<Self, ApiError> {
        let cfg =
            crate::config::load(project_root).map_err(|e| ApiError::invalid(e.to_string()))?;
        let store = match &cfg.store {
            Some(s) => herd_store::Backend::parse(s).map_err(|e| {
                ApiError::invalid(format!(
                    "{}: store: {e}",
                    project_root.join(".herd/config.yml").display()
                ))
            })?,
            None => herd_store::Backend::Sqlite,
        };
        let mut engine = EngineConfig::default();
        if let Some(t) = cfg.handshake_timeout().map_err(ApiError::invalid)? {
            engine.handshake_timeout = t;
        }
        Ok(Self {
            store,
            surface: surface.into(),
            max_concurrent: cfg.max_concurrent.map_or(DEFAULT_MAX_CONCURRENT, |n| n as usize),
            max_queue: cfg.max_queue.map_or(DEFAULT_MAX_QUEUE, |n| n as usize),
            configured_max_concurrent: cfg.max_concurrent.is_some(),
            engine,
            ..Self::default()
        })
    }
}

impl Default for ServiceOptions {
    fn default() -> Self {
        Self {
            surface: "cli".into(),
            max_concurrent: DEFAULT_MAX_CONCURRENT,
            max_queue: DEFAULT_MAX_QUEUE,
            shared: false,
            configured_max_concurrent: false,
            engine: EngineConfig::default(),
            store: herd_store::Backend::Sqlite,
        }
    }
}

/// The engine service of one state directory. A handle: clones share one service.
#[derive(Debug, Clone)]
pub struct Service {
    inner: Arc<Inner>,
}

/// What the service owns.
#[derive(Debug)]
pub struct Inner {
    engine: Arc<Engine>,
    pool: pool::Pool,
    jobs: jobs::Jobs,
    shared: bool,
}

impl std::ops::Deref for Service {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.inner
    }
}

impl Service {
    /// Open the state directory `state_dir` (created if missing), sweep runs whose owner died,
    /// and start the machinery agents run under (the guard starts on first use).
    pub fn open(state_dir: &Path, opts: ServiceOptions) -> Result<Self, ApiError> {
        let guard = GuardCommand::current_exe()
            .map_err(|e| ApiError::internal(format!("cannot find the herd executable: {e}")))?;
        Self::open_with(state_dir, guard, opts)
    }

    /// [`open`](Self::open) with an explicit guard program (tests, embedders).
    pub fn open_with(
        state_dir: &Path,
        guard: GuardCommand,
        opts: ServiceOptions,
    ) -> Result<Self, ApiError> {
        let paths = StatePaths::new(state_dir).with_store(opts.store.clone());
        let engine = Engine::open(paths, guard, &opts.surface)?.with_config(opts.engine.clone());
        Ok(Self {
            inner: Arc::new(Inner {
                engine: Arc::new(engine),
                pool: pool::Pool::new(opts.max_concurrent.clamp(1, 20), opts.max_queue),
                jobs: jobs::Jobs::default(),
                shared: opts.shared,
            }),
        })
    }

    /// Where this service keeps its state.
    pub fn state_dir(&self) -> &Path {
        &self.engine.paths().root
    }

    /// The longest a graceful stop can take before everything is killed: the ladder's rungs.
    pub fn stop_ladder(&self) -> Duration {
        let c = self.engine.config();
        c.graceful_stop + c.term_grace
    }

    /// Stop every job of this process (the stop ladder, then kills) and flush the store, the
    /// service left open: a daemon stops its runs first, then lets its clients' streams end.
    pub async fn stop_jobs(&self) -> Result<(), ApiError> {
        self.jobs.stop_all(self.stop_ladder()).await;
        Ok(self.engine.writer().flush().await?)
    }

    /// Stop every job of this process (the stop ladder, then kills), flush what is queued for
    /// the store, and stop the guards. Nothing this service started outlives it. Other clones
    /// of this handle must be gone (or going) by then: the guards stop once they are.
    pub async fn shutdown(self) -> Result<(), ApiError> {
        self.jobs.stop_all(self.stop_ladder()).await;
        let flushed = self.engine.writer().flush().await;
        let mut engine = Arc::clone(&self.engine);
        drop(self);
        // A job's task drops its handle on the engine just after it reports its end.
        for _ in 0..200 {
            match Arc::try_unwrap(engine) {
                Ok(e) => {
                    e.shutdown().await?;
                    break;
                }
                Err(shared) => {
                    engine = shared;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        }
        flushed?;
        Ok(())
    }
}
