//! herd-engine: the runtime. Opens the store, sweeps runs whose owner died, and runs subagents
//! under its process guard with timeouts, cancellation and the stop ladder (see `run`).

pub mod agents;
pub mod config;
pub mod gate;
pub mod guard;
mod inputs;
pub mod lines;
pub mod plan;
pub mod procfs;
mod protected;
mod run;
pub mod sandbox;
pub mod service;
mod slots;
mod supervisor;
pub mod workspace;

use std::sync::{Arc, Mutex, MutexGuard};

use herd_core::SubagentId;
use herd_store::{StatePaths, Store, StoreError, Writer, WriterHandle, orphaned_update};
use nix::sys::signal::Signal;

pub use inputs::Delivery;
pub use run::{Progress, RunCaller, StopLevel, TaskReport, TaskRequest};
pub use supervisor::{Child, GuardCommand, SpawnError, child_env};

/// Engine failures (the run itself failing is a [`TaskReport`], not an error).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("a subagent task ended abnormally: {0}")]
    Task(String),
    /// The pool or queue cannot take the work.
    #[error("{0}")]
    ResourceExhausted(String),
    /// A subagent tried to spawn beyond the allowed depth.
    #[error(
        "depth exceeded: this herd runs inside a subagent at depth {depth} and the limit is {max} \
         (a subagent may not spawn more unless its contract allows: HERD_MAX_DEPTH)"
    )]
    DepthExceeded { depth: u32, max: u32 },
    /// Permission settings that cannot be run (seed 000's `INVALID_PERMISSION_CONFIG`).
    #[error("{0}")]
    InvalidPermissionConfig(String),
    /// A workspace could not be prepared (not a git repository, bad base, root inside the repo).
    #[error("{0}")]
    Workspace(String),
}

/// Tunables, with the defaults of DESIGN §4.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The longest stdout line decoded; longer ones are skipped with an event.
    pub max_line_bytes: usize,
    /// How long a graceful stop (interrupt / SIGINT) may take before SIGTERM.
    pub graceful_stop: std::time::Duration,
    /// How long after SIGTERM before SIGKILL.
    pub term_grace: std::time::Duration,
    /// How often a running task checks the store for `herd cancel`.
    pub cancel_poll: std::time::Duration,
    /// How long a CLI with an opening handshake (ACP `initialize`, `session/new`) may take to
    /// finish it before the run fails `protocol_error`.
    pub handshake_timeout: std::time::Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            max_line_bytes: 8 << 20,
            graceful_stop: std::time::Duration::from_millis(1500),
            term_grace: std::time::Duration::from_secs(5),
            cancel_poll: std::time::Duration::from_millis(250),
            handshake_timeout: std::time::Duration::from_secs(30),
        }
    }
}

/// An open engine: the store, its writer, and its process guards (each started on first use).
#[derive(Debug)]
pub struct Engine {
    paths: StatePaths,
    store: Arc<Mutex<Store>>,
    writer: Writer,
    guard: GuardCommand,
    /// A few guards, taken in turn: a guard is single-threaded and blocked while an agent it
    /// starts is exec'd, so one guard would start agents one at a time.
    keepers: Mutex<Keepers>,
    /// This process and its start time, recorded as the owner of what it runs.
    owner: (u32, Option<u64>),
    session_id: String,
    /// What opened this engine (`cli`, `mcp`…); its session is stored with the first run.
    session_kind: String,
    session_stored: Mutex<bool>,
    config: EngineConfig,
    /// In-process answers to permission requests reach their waiting gate here.
    answers: Arc<gate::Answers>,
    /// Runs that take follow-up messages on their open stdin, while they run.
    inputs: inputs::Inputs,
}

impl Engine {
    /// Open the store under `paths`, sweep orphans, and record a session of `kind`.
    pub fn open(paths: StatePaths, guard: GuardCommand, kind: &str) -> Result<Self, EngineError> {
        let mut store = Store::open(paths.clone())?;
        sweep_orphans(&mut store)?;
        let session_id = format!("ses_{}", SubagentId::generate());
        let writer = Writer::start(&paths)?;
        Ok(Self {
            paths,
            store: Arc::new(Mutex::new(store)),
            writer,
            guard,
            keepers: Mutex::new(Keepers::new()),
            owner: (std::process::id(), procfs::own_start_time()),
            session_id,
            session_kind: kind.to_owned(),
            session_stored: Mutex::new(false),
            config: EngineConfig::default(),
            answers: Arc::default(),
            inputs: inputs::Inputs::default(),
        })
    }

    pub fn with_config(mut self, config: EngineConfig) -> Self {
        self.config = config;
        self
    }

    pub fn paths(&self) -> &StatePaths {
        &self.paths
    }

    pub fn writer(&self) -> WriterHandle {
        self.writer.handle()
    }

    /// The store, for short synchronous reads and writes.
    pub fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// This process and its start time, as recorded for what it owns.
    pub(crate) fn owner(&self) -> (u32, Option<u64>) {
        self.owner
    }

    /// The next guard in turn, started now if it is not running (or died).
    fn keeper(&self) -> Result<Arc<supervisor::Keeper>, SpawnError> {
        let mut k = self.keepers.lock().unwrap_or_else(|p| p.into_inner());
        let i = k.next % k.slots.len();
        k.next = k.next.wrapping_add(1);
        match k.slots[i].as_ref() {
            Some(keeper) if keeper.is_alive() => Ok(keeper.clone()),
            _ => Ok(k.slots[i].insert(supervisor::Keeper::start(&self.guard)?).clone()),
        }
    }

    /// The session a caller's runs are recorded under: its own, else this engine's (stored
    /// the first time a run needs it, so commands that only read leave no session behind).
    pub(crate) fn session_of(&self, caller: &RunCaller) -> Result<String, EngineError> {
        if let Some(s) = &caller.session {
            return Ok(s.clone());
        }
        let mut stored = self.session_stored.lock().unwrap_or_else(|p| p.into_inner());
        if !*stored {
            let cwd = std::env::current_dir().unwrap_or_default();
            self.store().create_session(&self.session_id, &self.session_kind, &cwd)?;
            *stored = true;
        }
        Ok(self.session_id.clone())
    }

    /// This engine's own session (every run of a caller without one is recorded under it).
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Where in-process answers to permission requests are announced.
    pub(crate) fn answers(&self) -> &gate::Answers {
        &self.answers
    }

    /// Give run `id` of this engine another user message, written to its open stdin when its
    /// current turn ends; returns once it is taken (or refused: the run is stopping or has
    /// given its final result).
    pub async fn send_input(&self, id: &SubagentId, text: String) -> Delivery {
        self.inputs.send(id.as_str(), text).await
    }

    /// Flush and stop the writer.
    pub async fn shutdown(self) -> Result<(), EngineError> {
        let flushed = self.writer.shutdown().await;
        // Every run has ended: the guards go too (a run still holding one keeps it alive, and
        // dropping that run's last handle closes it).
        let slots =
            std::mem::take(&mut self.keepers.lock().unwrap_or_else(|p| p.into_inner()).slots);
        // All at once: each waits for its guard to kill what is left and exit.
        let mut stopping = tokio::task::JoinSet::new();
        for k in slots.into_iter().flatten().filter_map(|k| Arc::try_unwrap(k).ok()) {
            stopping.spawn(k.stop());
        }
        while stopping.join_next().await.is_some() {}
        Ok(flushed?)
    }
}

/// The engine's guards: a place for each, filled on first use, taken in turn.
#[derive(Debug)]
struct Keepers {
    slots: Vec<Option<Arc<supervisor::Keeper>>>,
    next: usize,
}

impl Keepers {
    /// `HERD_GUARDS` places (1–8), else as many as cores, two to four: starting agents is
    /// exec-bound, not CPU-bound in the guard, so two overlap even on one core; more than four
    /// buy nothing measurable.
    fn new() -> Self {
        let n = match env_u32("HERD_GUARDS") {
            Some(n) => (n as usize).clamp(1, 8),
            None => std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(2, 4),
        };
        Self { slots: vec![None; n], next: 0 }
    }
}

fn env_u32(key: &str) -> Option<u32> {
    std::env::var(key).ok().and_then(|v| v.trim().parse().ok())
}

/// Mark active runs whose owning herd process is gone as `failed(orphaned)`, and make sure
/// their agent's process group is gone too. Returns the ids marked.
pub fn sweep_orphans(store: &mut Store) -> Result<Vec<SubagentId>, StoreError> {
    let mut marked = Vec::new();
    for run in store.active_runs()? {
        let owner_alive =
            run.owner_pid.is_some_and(|pid| procfs::is_same_process(pid, run.owner_start_time));
        if owner_alive {
            continue;
        }
        // Only with a recorded start time: a bare pid may have been reused by a stranger.
        if let (Some(pid), Some(pgid), Some(start)) = (run.pid, run.pgid, run.process_start_time)
            && procfs::is_same_process(pid, Some(start))
        {
            procfs::signal_group(pgid, Signal::SIGKILL);
        }
        match store.update(&run.id, &orphaned_update()) {
            Ok(_) => marked.push(run.id),
            // Finished between our read and our write: nothing to mark.
            Err(StoreError::Transition { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    // Locks whose holder ended or whose owner died are free again.
    store.reclaim_locks(&|pid, start| procfs::is_same_process(pid, start))?;
    for plan in store.active_orchestrations()? {
        if !plan.owner_pid.is_some_and(|p| procfs::is_same_process(p, plan.owner_start_time)) {
            store.fail_orphaned_orchestration(&plan.id)?;
        }
    }
    Ok(marked)
}
