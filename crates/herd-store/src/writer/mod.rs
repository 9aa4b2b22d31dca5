//! The single event writer: one thread, one connection, group commit. Events are published to
//! subscribers only after the transaction holding them has committed (persist, then show).

use std::sync::Arc;
use std::thread::JoinHandle;

use herd_core::{Decoded, SubagentId};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, broadcast, mpsc, oneshot, watch};

use crate::plans::{NewOrchestration, StepChange};
use crate::store::open_conn;
use crate::{NewSubagent, Result, StatePaths, StoreError, StoredEvent, Update, now_ms};

mod batch;

/// A write run on the writer's connection. `Fn`, not `FnOnce`: a batch in which one write
/// failed is rolled back and run again, each write then in its own savepoint.
type Job = Box<dyn Fn(&crate::db::Db) -> Result<()> + Send>;

enum Cmd {
    Append {
        id: SubagentId,
        ts: i64,
        events: Vec<Decoded>,
        /// The events' share of the bytes in flight, given back once they are stored.
        _weight: Option<OwnedSemaphorePermit>,
    },
    Update {
        id: SubagentId,
        update: Box<Update>,
        /// Other writes that belong with this update, run right after it (undone with it).
        with: Option<Job>,
        ack: oneshot::Sender<Result<Vec<StoredEvent>>>,
        now: bool,
    },
    Flush(oneshot::Sender<Result<()>>),
    /// Any other write, run in the batch's transaction.
    Exec {
        job: Job,
        ack: oneshot::Sender<Result<()>>,
        now: bool,
    },
    /// Commit what is queued without waiting for company (somebody waits on a [`Pending`]).
    Nudge,
    Stop,
}

impl Cmd {
    /// Somebody waits for this commit right now (`now`): the batch is committed without
    /// waiting for company. Queued writes ([`Pending`]) and events may wait a little.
    fn urgent(&self) -> bool {
        match self {
            Cmd::Append { .. } => false,
            Cmd::Update { now, .. } | Cmd::Exec { now, .. } => *now,
            Cmd::Flush(_) | Cmd::Nudge | Cmd::Stop => true,
        }
    }
}

/// Owns the writer thread; dropping every handle and this stops it.
#[derive(Debug)]
pub struct Writer {
    handle: WriterHandle,
    thread: Option<JoinHandle<()>>,
}

/// A write that has been queued: await [`committed`](Self::committed) to learn that it is
/// stored (or why not). Queuing without waiting keeps a caller off the commit's latency.
#[derive(Debug)]
pub struct Pending<T> {
    rx: oneshot::Receiver<Result<T>>,
    what: &'static str,
    /// Weak: a write waited for later must not keep a stopped writer's queue open.
    writer: mpsc::WeakSender<Cmd>,
    thread: std::thread::Thread,
}

impl<T> Pending<T> {
    /// Wait for the commit, whenever the writer makes it (within its commit window).
    pub async fn committed(self) -> Result<T> {
        self.rx.await.map_err(|_| StoreError::WriterGone(self.what.into()))?
    }

    /// Wait for the commit, asking the writer to make it at once if it has not: for a caller
    /// that cannot go on without it.
    pub async fn now(mut self) -> Result<T> {
        match self.rx.try_recv() {
            Ok(r) => return r,
            Err(oneshot::error::TryRecvError::Closed) => {
                return Err(StoreError::WriterGone(self.what.into()));
            }
            Err(oneshot::error::TryRecvError::Empty) => {}
        }
        if let Some(writer) = self.writer.upgrade()
            && writer.send(Cmd::Nudge).await.is_ok()
        {
            self.thread.unpark();
        }
        self.committed().await
    }
}

/// A run's creation, queued ([`WriterHandle::create_run`]).
#[derive(Debug)]
pub struct Created {
    pending: Pending<()>,
    registered: Arc<std::sync::atomic::AtomicBool>,
}

impl Created {
    /// Wait until the run is stored (at once, see [`Pending::now`]); true if it was registered
    /// as an unlocked user of its directory.
    pub async fn now(self) -> Result<bool> {
        self.pending.now().await?;
        Ok(self.registered.load(std::sync::atomic::Ordering::Relaxed))
    }
}

/// How many bytes of events may wait for the writer at once. A run whose agent prints faster
/// than the store takes it waits for room (and stops reading its pipe, so the agent waits too):
/// what herd holds in memory stays bounded whatever an agent prints.
pub const BYTES_IN_FLIGHT: usize = 16 << 20;

/// A cheap, cloneable way to send work to the writer.
#[derive(Debug, Clone)]
pub struct WriterHandle {
    tx: mpsc::Sender<Cmd>,
    /// Room for [`BYTES_IN_FLIGHT`] bytes of queued events.
    room: Arc<Semaphore>,
    events: broadcast::Sender<Arc<StoredEvent>>,
    /// Counts the writer's commits: a reader of rows other than events (plan events, statuses)
    /// waits for the next commit instead of polling.
    commits: watch::Receiver<u64>,
    /// The writer's thread, woken when an urgent write arrives while it waits for company.
    thread: std::thread::Thread,
}

impl std::fmt::Debug for Cmd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cmd")
    }
}

/// The bytes `events` hold for the budget (never more than all of it).
fn weight(events: &[Decoded]) -> u32 {
    let w: usize = events.iter().map(|d| d.event.weight()).sum();
    w.min(BYTES_IN_FLIGHT) as u32
}

impl Writer {
    /// Start the writer on its own connection to the store under `paths`.
    pub fn start(paths: &StatePaths) -> Result<Self> {
        let conn = open_conn(paths)?;
        let (tx, rx) = mpsc::channel(8192);
        let (events, _) = broadcast::channel(4096);
        let publisher = events.clone();
        let (committed, commits) = watch::channel(0u64);
        let thread = std::thread::Builder::new()
            .name("herd-store-writer".into())
            .spawn(move || batch::run(conn, rx, publisher, committed))
            .map_err(|source| StoreError::Io { path: "writer thread".into(), source })?;
        let room = Arc::new(Semaphore::new(BYTES_IN_FLIGHT));
        let handle = WriterHandle { tx, room, events, commits, thread: thread.thread().clone() };
        Ok(Self { handle, thread: Some(thread) })
    }

    pub fn handle(&self) -> WriterHandle {
        self.handle.clone()
    }

    /// Flush everything and stop the thread (other handles then get `WriterGone`).
    pub async fn shutdown(mut self) -> Result<()> {
        let res = self.handle.flush().await;
        let _ = self.handle.send(Cmd::Stop).await;
        if let Some(t) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
        res
    }
}

impl WriterHandle {
    /// Send `cmd`; an urgent one, or a full batch's worth queued, wakes the writer if it waits
    /// for company.
    async fn send(&self, cmd: Cmd) -> std::result::Result<(), ()> {
        let urgent = cmd.urgent();
        self.tx.send(cmd).await.map_err(drop)?;
        self.wake_if(urgent);
        Ok(())
    }

    fn send_blocking(&self, cmd: Cmd) -> std::result::Result<(), ()> {
        let urgent = cmd.urgent();
        self.tx.blocking_send(cmd).map_err(drop)?;
        self.wake_if(urgent);
        Ok(())
    }

    fn wake_if(&self, urgent: bool) {
        if urgent || self.tx.capacity() + batch::FULL_BATCH <= self.tx.max_capacity() {
            self.thread.unpark();
        }
    }

    fn pending<T>(&self, rx: oneshot::Receiver<Result<T>>, what: &'static str) -> Pending<T> {
        Pending { rx, what, writer: self.tx.downgrade(), thread: self.thread.clone() }
    }

    /// Queue events for a subagent; they are stored in order, then published. Waits while
    /// [`BYTES_IN_FLIGHT`] bytes of events already wait for the writer.
    pub async fn append(&self, id: &SubagentId, events: Vec<Decoded>) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        let permit = Arc::clone(&self.room)
            .acquire_many_owned(weight(&events))
            .await
            .map_err(|_| StoreError::WriterGone("append".into()))?;
        let cmd = Cmd::Append { id: id.clone(), ts: now_ms(), events, _weight: Some(permit) };
        self.send(cmd).await.map_err(|_| StoreError::WriterGone("append".into()))
    }

    /// Like [`append`](Self::append), from a thread that is not running async code (outside
    /// the byte budget: only benchmarks feed the writer this way).
    pub fn append_blocking(&self, id: &SubagentId, events: Vec<Decoded>) -> Result<()> {
        self.send_blocking(Cmd::Append { id: id.clone(), ts: now_ms(), events, _weight: None })
            .map_err(|_| StoreError::WriterGone("append".into()))
    }

    /// Apply an update (checked status transition, fields, events) after all queued events.
    pub async fn update(&self, id: &SubagentId, update: Update) -> Result<Vec<StoredEvent>> {
        self.send_update(id, update, None, true).await?.committed().await
    }

    /// Queue an update without waiting for its commit.
    pub async fn queue_update(
        &self,
        id: &SubagentId,
        update: Update,
    ) -> Result<Pending<Vec<StoredEvent>>> {
        self.send_update(id, update, None, false).await
    }

    /// Send an update, and `with` (writes that belong with it, in the same savepoint); `now`:
    /// the caller waits for the commit at once.
    async fn send_update(
        &self,
        id: &SubagentId,
        update: Update,
        with: Option<Job>,
        now: bool,
    ) -> Result<Pending<Vec<StoredEvent>>> {
        let (ack, rx) = oneshot::channel();
        self.send(Cmd::Update { id: id.clone(), update: Box::new(update), with, ack, now })
            .await
            .map_err(|_| StoreError::WriterGone("update".into()))?;
        Ok(self.pending(rx, "update"))
    }

    /// Run `f` on the writer's connection, in order with everything else; waits for the commit.
    async fn exec(&self, f: impl Fn(&crate::db::Db) -> Result<()> + Send + 'static) -> Result<()> {
        self.send_job(Box::new(f), true).await?.committed().await
    }

    /// Send `job`; `now`: the caller waits for the commit at once.
    async fn send_job(&self, job: Job, now: bool) -> Result<Pending<()>> {
        let (ack, rx) = oneshot::channel();
        self.send(Cmd::Exec { job, ack, now })
            .await
            .map_err(|_| StoreError::WriterGone("exec".into()))?;
        Ok(self.pending(rx, "exec"))
    }

    /// [`Store::acquire_lock`](crate::Store::acquire_lock) on the writer's connection, so
    /// taking a lock never waits on this process's own writes; committed when it returns.
    pub async fn acquire_lock(
        &self,
        path: String,
        holder: String,
        hold: herd_core::workspace::Hold,
        owner: (u32, Option<u64>),
        alive: crate::IsAliveFn,
    ) -> Result<std::result::Result<(), Vec<crate::LockHolder>>> {
        let slot = Arc::new(std::sync::Mutex::new(None));
        let out = Arc::clone(&slot);
        self.exec(move |c| {
            let got = crate::worktrees::acquire_lock(c, &path, &holder, hold, owner, &alive)?;
            *out.lock().unwrap_or_else(|p| p.into_inner()) = Some(got);
            Ok(())
        })
        .await?;
        let got = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
        got.ok_or_else(|| StoreError::WriterGone("acquire_lock".into()))
    }

    /// Persist a new run in one go: the subagent (`pending`), whether it auto-approves, its
    /// `subagent_spawn` audit entry, for a plan step the step's change to `running`, and, when
    /// asked, its registration as an unlocked user of directory `unlocked_in` (true if made;
    /// refused only by a live exclusive holder, and then the run registers later as usual).
    /// Queued: it commits with the writes around it, as a run is created ahead of its agent;
    /// [`Created::now`] waits for it.
    pub async fn create_run(
        &self,
        n: NewSubagent,
        auto_approve: bool,
        audit: crate::NewAudit,
        step: Option<StepChange>,
        unlocked_in: Option<(String, crate::IsAliveFn)>,
    ) -> Result<Created> {
        let slot = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let out = Arc::clone(&slot);
        let pending = self.send_job(
            Box::new(move |c| {
                crate::store::create_subagent(c, &n)?;
                // The column defaults to off.
                if auto_approve {
                    crate::audit::set_auto_approve(c, n.id.as_str(), true)?;
                }
                crate::audit::insert_audit(c, &audit)?;
                if let Some(s) = &step {
                    crate::plans::set_step(c, s)?;
                }
                if let Some((path, alive)) = &unlocked_in {
                    let owner = (n.owner_pid, n.owner_start_time);
                    let hold = herd_core::workspace::Hold::None;
                    let got =
                        crate::worktrees::acquire_lock(c, path, n.id.as_str(), hold, owner, alive)?;
                    out.store(got.is_ok(), std::sync::atomic::Ordering::Relaxed);
                }
                Ok(())
            }),
            false,
        );
        Ok(Created { pending: pending.await?, registered: slot })
    }

    /// The end of a run in one savepoint: its final update (which closes its requests still
    /// waiting for a person), its audit entry, its locks released.
    /// Queued: await the returned [`Pending`] before showing the end to anyone.
    pub async fn finish_run(
        &self,
        id: &SubagentId,
        update: Update,
        audit: crate::NewAudit,
    ) -> Result<Pending<Vec<StoredEvent>>> {
        let holder = id.to_string();
        let with: Job = Box::new(move |c| {
            crate::audit::insert_audit(c, &audit)?;
            crate::worktrees::release_locks(c, &holder).map(drop)
        });
        self.send_update(id, update, Some(with), false).await
    }

    /// Persist a plan run and its steps.
    pub async fn create_orchestration(&self, o: NewOrchestration) -> Result<()> {
        self.exec(move |c| crate::plans::create_orchestration(c, &o)).await
    }

    /// Change a plan step's status (with a plan event).
    pub async fn set_step(&self, change: StepChange) -> Result<()> {
        self.queue_set_step(change).await?.committed().await
    }

    /// Queue a plan step's change without waiting for its commit.
    pub async fn queue_set_step(&self, change: StepChange) -> Result<Pending<()>> {
        self.send_job(Box::new(move |c| crate::plans::set_step(c, &change)), false).await
    }

    /// Set a plan's status and roll-ups.
    pub async fn finish_orchestration(
        &self,
        orch: &str,
        status: &str,
        totals: crate::PlanTotals,
    ) -> Result<()> {
        let (orch, status) = (orch.to_owned(), status.to_owned());
        self.exec(move |c| crate::plans::finish_orchestration(c, &orch, &status, &totals)).await
    }

    /// Append an audit entry (in order with the run's events).
    pub async fn audit(&self, entry: crate::NewAudit) -> Result<()> {
        self.exec(move |c| crate::audit::insert_audit(c, &entry)).await
    }

    /// Persist a tool call waiting for a person.
    pub async fn create_permission_request(&self, r: crate::NewPermissionRequest) -> Result<()> {
        self.exec(move |c| crate::audit::insert_request(c, &r)).await
    }

    /// Close a request nobody answered (`expired`) or whose run ended (`cancelled`).
    pub async fn close_permission_request(
        &self,
        id: &str,
        status: &'static str,
        by: &'static str,
    ) -> Result<()> {
        let id = id.to_owned();
        self.exec(move |c| crate::audit::close_request(c, &id, status, by).map(|_| ())).await
    }

    /// Wait until everything queued so far is committed; reports a failed append since the last flush.
    pub async fn flush(&self) -> Result<()> {
        let (ack, rx) = oneshot::channel();
        self.send(Cmd::Flush(ack)).await.map_err(|_| StoreError::WriterGone("flush".into()))?;
        rx.await.map_err(|_| StoreError::WriterGone("flush".into()))?
    }

    /// Blocking flush, for benchmarks and threads outside the runtime.
    pub fn flush_blocking(&self) -> Result<()> {
        let (ack, rx) = oneshot::channel();
        self.send_blocking(Cmd::Flush(ack)).map_err(|_| StoreError::WriterGone("flush".into()))?;
        rx.blocking_recv().map_err(|_| StoreError::WriterGone("flush".into()))?
    }

    /// A counter bumped after each commit: wait on it to read rows again once something new
    /// may be stored.
    pub fn commits(&self) -> watch::Receiver<u64> {
        self.commits.clone()
    }

    /// Events as they are committed.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<StoredEvent>> {
        self.events.subscribe()
    }
}
