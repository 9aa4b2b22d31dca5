//! The single event writer: one thread, one connection, group commit. Events are published to
//! subscribers only after the transaction holding them has committed (persist, then show).

use std::collections::HashMap;
use std::sync::Arc;
use std::thread::JoinHandle;

use herd_core::{Decoded, SubagentId};
use tokio::sync::{broadcast, mpsc, oneshot};

use crate::plans::{NewOrchestration, StepChange};
use crate::store::{apply_update, insert_event, next_seq, open_conn};
use crate::{NewSubagent, Result, StatePaths, StoreError, StoredEvent, Update, now_ms};

const MAX_BATCH: usize = 4096;
/// A batch smaller than this waits up to [`SMALL_BATCH_YIELDS`] yields for more.
const SMALL_BATCH: usize = 16;
const SMALL_BATCH_YIELDS: usize = 3;

/// A write run on the writer's connection.
type Job = Box<dyn FnOnce(&rusqlite::Connection) -> Result<()> + Send>;

/// Answers a waiting caller once its batch has committed (with the batch's error, if any).
type Reply = Box<dyn FnOnce(Option<&str>)>;

enum Cmd {
    Append {
        id: SubagentId,
        ts: i64,
        events: Vec<Decoded>,
    },
    Update {
        id: SubagentId,
        update: Box<Update>,
        /// Other writes that belong with this update, run right after it in its savepoint.
        with: Option<Job>,
        ack: oneshot::Sender<Result<Vec<StoredEvent>>>,
    },
    Flush(oneshot::Sender<Result<()>>),
    /// Any other write, run in the batch's transaction under a savepoint.
    Exec(Job, oneshot::Sender<Result<()>>),
    Stop,
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
}

impl<T> Pending<T> {
    pub async fn committed(self) -> Result<T> {
        self.rx.await.map_err(|_| StoreError::WriterGone(self.what.into()))?
    }
}

/// A cheap, cloneable way to send work to the writer.
#[derive(Debug, Clone)]
pub struct WriterHandle {
    tx: mpsc::Sender<Cmd>,
    events: broadcast::Sender<Arc<StoredEvent>>,
}

impl std::fmt::Debug for Cmd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cmd")
    }
}

impl Writer {
    /// Start the writer on its own connection to the store under `paths`.
    pub fn start(paths: &StatePaths) -> Result<Self> {
        let conn = open_conn(paths)?;
        let (tx, rx) = mpsc::channel(8192);
        let (events, _) = broadcast::channel(4096);
        let publisher = events.clone();
        let thread = std::thread::Builder::new()
            .name("herd-store-writer".into())
            .spawn(move || run(conn, rx, publisher))
            .map_err(|source| StoreError::Io { path: "writer thread".into(), source })?;
        Ok(Self { handle: WriterHandle { tx, events }, thread: Some(thread) })
    }

    pub fn handle(&self) -> WriterHandle {
        self.handle.clone()
    }

    /// Flush everything and stop the thread (other handles then get `WriterGone`).
    pub async fn shutdown(mut self) -> Result<()> {
        let res = self.handle.flush().await;
        let _ = self.handle.tx.send(Cmd::Stop).await;
        if let Some(t) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
        res
    }
}

impl WriterHandle {
    /// Queue events for a subagent; they are stored in order, then published.
    pub async fn append(&self, id: &SubagentId, events: Vec<Decoded>) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        self.tx
            .send(Cmd::Append { id: id.clone(), ts: now_ms(), events })
            .await
            .map_err(|_| StoreError::WriterGone("append".into()))
    }

    /// Like [`append`](Self::append), from a thread that is not running async code.
    pub fn append_blocking(&self, id: &SubagentId, events: Vec<Decoded>) -> Result<()> {
        self.tx
            .blocking_send(Cmd::Append { id: id.clone(), ts: now_ms(), events })
            .map_err(|_| StoreError::WriterGone("append".into()))
    }

    /// Apply an update (checked status transition, fields, events) after all queued events.
    pub async fn update(&self, id: &SubagentId, update: Update) -> Result<Vec<StoredEvent>> {
        self.queue_update(id, update).await?.committed().await
    }

    /// Queue an update without waiting for its commit.
    pub async fn queue_update(
        &self,
        id: &SubagentId,
        update: Update,
    ) -> Result<Pending<Vec<StoredEvent>>> {
        self.queue_update_with(id, update, None).await
    }

    /// Queue an update, and `with` (writes that belong with it, in the same savepoint), without
    /// waiting for the commit.
    async fn queue_update_with(
        &self,
        id: &SubagentId,
        update: Update,
        with: Option<Job>,
    ) -> Result<Pending<Vec<StoredEvent>>> {
        let (ack, rx) = oneshot::channel();
        self.tx
            .send(Cmd::Update { id: id.clone(), update: Box::new(update), with, ack })
            .await
            .map_err(|_| StoreError::WriterGone("update".into()))?;
        Ok(Pending { rx, what: "update" })
    }

    /// Run `f` on the writer's connection, in order with everything else; waits for the commit.
    async fn exec(
        &self,
        f: impl FnOnce(&rusqlite::Connection) -> Result<()> + Send + 'static,
    ) -> Result<()> {
        self.queue(Box::new(f)).await?.committed().await
    }

    /// Queue `job` without waiting for its commit.
    async fn queue(&self, job: Job) -> Result<Pending<()>> {
        let (ack, rx) = oneshot::channel();
        self.tx
            .send(Cmd::Exec(job, ack))
            .await
            .map_err(|_| StoreError::WriterGone("exec".into()))?;
        Ok(Pending { rx, what: "exec" })
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
    pub async fn create_run(
        &self,
        n: NewSubagent,
        auto_approve: bool,
        audit: crate::NewAudit,
        step: Option<StepChange>,
        unlocked_in: Option<(String, crate::IsAliveFn)>,
    ) -> Result<bool> {
        let slot = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let out = Arc::clone(&slot);
        self.exec(move |c| {
            crate::store::create_subagent(c, &n)?;
            // The column defaults to off.
            if auto_approve {
                crate::audit::set_auto_approve(c, n.id.as_str(), true)?;
            }
            crate::audit::insert_audit(c, &audit)?;
            if let Some(s) = step {
                crate::plans::set_step(c, &s)?;
            }
            if let Some((path, alive)) = unlocked_in {
                let owner = (n.owner_pid, n.owner_start_time);
                let hold = herd_core::workspace::Hold::None;
                let got =
                    crate::worktrees::acquire_lock(c, &path, n.id.as_str(), hold, owner, &alive)?;
                out.store(got.is_ok(), std::sync::atomic::Ordering::Relaxed);
            }
            Ok(())
        })
        .await?;
        Ok(slot.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// The end of a run in one savepoint: its final update, its requests still waiting for a
    /// person closed, its audit entry, its locks released.
    /// Queued: await the returned [`Pending`] before showing the end to anyone.
    pub async fn finish_run(
        &self,
        id: &SubagentId,
        update: Update,
        audit: crate::NewAudit,
    ) -> Result<Pending<Vec<StoredEvent>>> {
        let holder = id.to_string();
        let with: Job = Box::new(move |c| {
            crate::audit::close_requests_of(c, &holder)?;
            crate::audit::insert_audit(c, &audit)?;
            crate::worktrees::release_locks(c, &holder).map(drop)
        });
        self.queue_update_with(id, update, Some(with)).await
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
        self.queue(Box::new(move |c| crate::plans::set_step(c, &change))).await
    }

    /// Set a plan's status and roll-ups.
    pub async fn finish_orchestration(
        &self,
        orch: &str,
        status: &str,
        cost_usd: f64,
        usage: herd_core::Usage,
    ) -> Result<()> {
        let (orch, status) = (orch.to_owned(), status.to_owned());
        self.exec(move |c| {
            crate::plans::finish_orchestration(
                c,
                &orch,
                &status,
                cost_usd,
                usage.input_tokens,
                usage.output_tokens,
            )
        })
        .await
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
        self.tx.send(Cmd::Flush(ack)).await.map_err(|_| StoreError::WriterGone("flush".into()))?;
        rx.await.map_err(|_| StoreError::WriterGone("flush".into()))?
    }

    /// Blocking flush, for benchmarks and threads outside the runtime.
    pub fn flush_blocking(&self) -> Result<()> {
        let (ack, rx) = oneshot::channel();
        self.tx
            .blocking_send(Cmd::Flush(ack))
            .map_err(|_| StoreError::WriterGone("flush".into()))?;
        rx.blocking_recv().map_err(|_| StoreError::WriterGone("flush".into()))?
    }

    /// Events as they are committed.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<StoredEvent>> {
        self.events.subscribe()
    }
}

/// Store `events` of `id` in order; serialized here, since the producer (decoding) is the
/// busier side.
fn append_events(
    tx: &rusqlite::Connection,
    seqs: &mut HashMap<SubagentId, i64>,
    id: &SubagentId,
    ts: i64,
    events: Vec<Decoded>,
    published: &mut Vec<StoredEvent>,
) -> Result<()> {
    for d in events {
        let seq = next_seq(tx, seqs, id)?;
        insert_event(tx, id, seq, ts, &d)?;
        published.push(StoredEvent {
            subagent_id: id.clone(),
            seq,
            ts,
            parent_tool_use_id: d.parent_tool_use_id,
            event: d.event,
        });
    }
    Ok(())
}

/// A statement without parameters (transaction control, savepoints), prepared once per
/// connection: each batch runs several.
fn fixed(tx: &rusqlite::Connection, sql: &str) -> Result<()> {
    tx.prepare_cached(sql)?.execute([])?;
    Ok(())
}

fn run(
    conn: rusqlite::Connection,
    mut rx: mpsc::Receiver<Cmd>,
    publisher: broadcast::Sender<Arc<StoredEvent>>,
) {
    let mut seqs: HashMap<SubagentId, i64> = HashMap::new();
    let mut pending_error: Option<String> = None;
    let mut batch = Vec::with_capacity(64);
    let mut stop = false;
    while let Some(first) = rx.blocking_recv() {
        batch.push(first);
        // Group commit: a small batch gives the CPU away a few times first, so writers that are
        // about to send (other runs) join this commit instead of paying for one of their own.
        // With nothing else runnable a yield returns at once.
        for round in 0..=SMALL_BATCH_YIELDS {
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(c) => batch.push(c),
                    Err(_) => break,
                }
            }
            if round == SMALL_BATCH_YIELDS || batch.len() >= SMALL_BATCH {
                break;
            }
            std::thread::yield_now();
        }
        let mut published: Vec<StoredEvent> = Vec::new();
        let mut replies: Vec<Reply> = Vec::new();
        let outcome = (|| -> Result<()> {
            let tx = &conn;
            fixed(tx, "BEGIN IMMEDIATE")?;
            for cmd in batch.drain(..) {
                match cmd {
                    Cmd::Append { id, ts, events } => {
                        // In its own savepoint: events that cannot be stored (an unknown
                        // subagent) must not take the rest of the batch down with them.
                        fixed(tx, "SAVEPOINT app")?;
                        let before = published.len();
                        match append_events(tx, &mut seqs, &id, ts, events, &mut published) {
                            Ok(()) => fixed(tx, "RELEASE app")?,
                            Err(e) => {
                                fixed(tx, "ROLLBACK TO app")?;
                                fixed(tx, "RELEASE app")?;
                                published.truncate(before);
                                seqs.remove(&id);
                                let msg = format!("events of {id} not stored: {e}");
                                pending_error.get_or_insert(msg);
                            }
                        }
                    }
                    Cmd::Update { id, update, with, ack } => {
                        fixed(tx, "SAVEPOINT upd")?;
                        let applied = apply_update(tx, &mut seqs, &id, &update, now_ms())
                            .and_then(|evs| with.map_or(Ok(()), |f| f(tx)).map(|()| evs));
                        match applied {
                            Ok(evs) => {
                                fixed(tx, "RELEASE upd")?;
                                published.extend(evs.iter().cloned());
                                replies.push(Box::new(move |err| {
                                    let _ = ack.send(match err {
                                        None => Ok(evs),
                                        Some(e) => Err(StoreError::WriterGone(e.into())),
                                    });
                                }));
                            }
                            Err(e) => {
                                fixed(tx, "ROLLBACK TO upd")?;
                                fixed(tx, "RELEASE upd")?;
                                // The sequence cache may have advanced; re-read it next time.
                                seqs.remove(&id);
                                let _ = ack.send(Err(e));
                            }
                        }
                    }
                    Cmd::Stop => stop = true,
                    Cmd::Exec(f, ack) => {
                        fixed(tx, "SAVEPOINT ex")?;
                        match f(tx) {
                            Ok(()) => {
                                fixed(tx, "RELEASE ex")?;
                                replies.push(Box::new(move |err| {
                                    let _ = ack.send(match err {
                                        None => Ok(()),
                                        Some(e) => Err(StoreError::WriterGone(e.into())),
                                    });
                                }));
                            }
                            Err(e) => {
                                fixed(tx, "ROLLBACK TO ex")?;
                                fixed(tx, "RELEASE ex")?;
                                seqs.clear();
                                let _ = ack.send(Err(e));
                            }
                        }
                    }
                    Cmd::Flush(ack) => {
                        let pending = pending_error.take();
                        replies.push(Box::new(move |err| {
                            let msg = err.map(str::to_owned).or(pending);
                            let _ = ack.send(match msg {
                                None => Ok(()),
                                Some(e) => Err(StoreError::WriterGone(e)),
                            });
                        }));
                    }
                }
            }
            fixed(tx, "COMMIT")?;
            Ok(())
        })();
        if outcome.is_err() && !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        let err = outcome.err().map(|e| e.to_string());
        if err.is_some() {
            // Nothing of this batch is stored: sequence numbers must be re-read.
            seqs.clear();
            published.clear();
            pending_error = err.clone();
        }
        for ev in published {
            let _ = publisher.send(Arc::new(ev));
        }
        for reply in replies {
            reply(err.as_deref());
        }
        if stop {
            break;
        }
    }
}
