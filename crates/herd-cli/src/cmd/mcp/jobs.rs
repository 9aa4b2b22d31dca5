//! The MCP server's jobs: tasks and plans started through its tools, the pool bound tasks share
//! (running + queued; `RESOURCE_EXHAUSTED` beyond), their status and results, cancel, shutdown.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use herd_core::plan::Plan;
use herd_core::{AgentEvent, Status, SubagentId, Usage};
use herd_engine::plan::PlanOptions;
use herd_engine::workspace::{IsolatedSpec, IsolationPlan};
use herd_engine::{Engine, EngineError, StopLevel, TaskRequest};
use herd_store::{SubagentRow, Update, now_ms};
use serde_json::{Value, json};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};

use super::log::Log;
use crate::cmd::task::{self, Isolate};

/// A tool call that cannot be carried out; its message goes back to the model as a tool error.
#[derive(Debug)]
pub struct ToolError(pub String);

impl From<EngineError> for ToolError {
    fn from(e: EngineError) -> Self {
        Self(e.to_string())
    }
}

impl From<herd_store::StoreError> for ToolError {
    fn from(e: herd_store::StoreError) -> Self {
        Self(e.to_string())
    }
}

/// How a job ended; what it produced is in the store.
#[derive(Debug)]
pub enum Outcome {
    Ended,
    /// herd itself failed (the store, a plan it could not start); the message says how.
    Error(String),
}

type Done = watch::Receiver<Option<Arc<Outcome>>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Task,
    Plan,
}

#[derive(Debug, Clone)]
struct Job {
    kind: Kind,
    background: bool,
    stop: watch::Sender<StopLevel>,
    done: Done,
}

/// Every job this server started, and the pool its tasks share.
#[derive(Debug)]
pub struct Jobs {
    engine: Arc<Engine>,
    bound: usize,
    max_queue: usize,
    slots: Arc<Semaphore>,
    /// Tasks admitted and not yet finished (running + queued).
    admitted: Arc<AtomicUsize>,
    jobs: Mutex<BTreeMap<String, Job>>,
    changed: Arc<Notify>,
    log: Arc<Log>,
}

/// One admitted task; dropping it frees its place in the pool's count.
struct Admission(Arc<AtomicUsize>);

impl Drop for Admission {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Jobs {
    pub fn new(engine: Arc<Engine>, bound: usize, max_queue: usize, log: Arc<Log>) -> Self {
        Self {
            engine,
            bound,
            max_queue,
            slots: Arc::new(Semaphore::new(bound)),
            admitted: Arc::new(AtomicUsize::new(0)),
            jobs: Mutex::new(BTreeMap::new()),
            changed: Arc::new(Notify::new()),
            log,
        }
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    fn job(&self, id: &str) -> Option<Job> {
        self.jobs.lock().unwrap_or_else(|p| p.into_inner()).get(id).cloned()
    }

    fn admit(&self) -> Result<Admission, ToolError> {
        let cap = self.bound + self.max_queue;
        match self
            .admitted
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < cap).then_some(n + 1))
        {
            Ok(_) => Ok(Admission(Arc::clone(&self.admitted))),
            Err(n) => {
                let running = self.bound - self.slots.available_permits();
                Err(ToolError(format!(
                    "RESOURCE_EXHAUSTED: the pool is full: {running} task(s) running and {} \
                     queued (at most {} at once, {} queued). Wait for one with task_wait or \
                     stop one with task_cancel, then try again.",
                    n.saturating_sub(running),
                    self.bound,
                    self.max_queue
                )))
            }
        }
    }

    /// Persist and start (or queue) one task; returns its id and a receiver that holds the
    /// outcome once it ends.
    pub async fn submit_task(
        &self,
        mut req: TaskRequest,
        isolate: Option<Isolate>,
        background: bool,
    ) -> Result<(SubagentId, Done), ToolError> {
        let admission = self.admit()?;
        let id = SubagentId::generate();
        // An isolated task gets its worktree first: the run is recorded with its real cwd.
        let iso = match &isolate {
            Some(i) => Some(
                task::isolate_request(&self.engine, &id, &mut req, i)
                    .await
                    .map_err(|e| ToolError(format!("{e:#}")))?,
            ),
            None => None,
        };
        if let Err(e) = self.engine.create_run(&id, &req).await {
            if let Some((plan, _)) = &iso {
                let _ = self.engine.close_isolation(plan).await;
            }
            return Err(e.into());
        }
        // Taken now, in call order: a task that gets no slot is `queued` before this returns.
        let permit = Arc::clone(&self.slots).try_acquire_owned().ok();
        if permit.is_none() {
            let queued = Update { status: Some(Status::Queued), ..Update::default() };
            self.engine.writer().update(&id, queued).await?;
        }
        let (stop_tx, stop_rx) = watch::channel(StopLevel::None);
        let (done_tx, done_rx) = watch::channel(None);
        let job = Job { kind: Kind::Task, background, stop: stop_tx, done: done_rx.clone() };
        self.jobs.lock().unwrap_or_else(|p| p.into_inner()).insert(id.to_string(), job);
        self.log.line(format_args!(
            "task {id} submitted ({}, {})",
            req.backend,
            if background { "background" } else { "foreground" }
        ));
        let (engine, slots, changed, log) = (
            Arc::clone(&self.engine),
            Arc::clone(&self.slots),
            Arc::clone(&self.changed),
            Arc::clone(&self.log),
        );
        let task_id = id.clone();
        tokio::spawn(async move {
            let mut ended = run_task(&engine, permit, slots, task_id.clone(), req, stop_rx).await;
            if let Some((plan, spec)) = &iso {
                ended = merge_isolated(&engine, &task_id, ended, plan, spec, &log).await;
            }
            let outcome = match ended {
                Ok(status) => {
                    log.line(format_args!("task {task_id} {status}"));
                    Outcome::Ended
                }
                Err(e) => {
                    log.line(format_args!("task {task_id} error: {e}"));
                    Outcome::Error(e)
                }
            };
            drop(admission);
            done_tx.send_replace(Some(Arc::new(outcome)));
            changed.notify_waiters();
        });
        Ok((id, done_rx))
    }

    /// Run a validated plan as one job (its steps bounded by the plan's own limits).
    pub async fn submit_plan(
        &self,
        plan: Plan,
        mut opts: PlanOptions,
        background: bool,
    ) -> Result<(String, Done), ToolError> {
        self.engine.check_depth()?;
        let id = format!("pln_{}", SubagentId::generate());
        opts.id = Some(id.clone());
        // A plan's agents count against the server's pool like its tasks do.
        opts.pool = Some(self.slots.clone());
        let (stop_tx, stop_rx) = watch::channel(StopLevel::None);
        let (done_tx, done_rx) = watch::channel(None);
        let job = Job { kind: Kind::Plan, background, stop: stop_tx, done: done_rx.clone() };
        self.jobs.lock().unwrap_or_else(|p| p.into_inner()).insert(id.clone(), job);
        self.log.line(format_args!("plan {id} ({}) submitted", plan.name));
        let (engine, changed, log) =
            (Arc::clone(&self.engine), Arc::clone(&self.changed), Arc::clone(&self.log));
        let plan_id = id.clone();
        tokio::spawn(async move {
            let outcome = match engine.run_plan(&plan, opts, stop_rx, None).await {
                Ok(r) => {
                    log.line(format_args!("plan {plan_id} {}", r.status));
                    Outcome::Ended
                }
                Err(e) => {
                    log.line(format_args!("plan {plan_id} error: {e}"));
                    Outcome::Error(e.to_string())
                }
            };
            done_tx.send_replace(Some(Arc::new(outcome)));
            changed.notify_waiters();
        });
        Ok((id, done_rx))
    }

    /// Stop a job: the stop ladder (or a kill with `force`); a queued task ends `cancelled`
    /// without starting. A run owned by another herd is asked to stop through the store.
    pub async fn cancel(&self, id: &str, force: bool) -> Result<Value, ToolError> {
        let key = self.key(id)?;
        let Some(job) = self.job(&key) else {
            if key.starts_with("pln_") {
                return Err(ToolError(format!(
                    "plan {key} was not started by this server; stop it where it runs (Ctrl-C \
                     in its herd run)"
                )));
            }
            let sid = self.engine.store().resolve(&key)?;
            let asked = self.engine.store().request_cancel(&sid)?;
            let mut v = self.status_of(&key)?;
            v["note"] = if asked {
                "another herd process owns this task; it was asked to stop (see task_status)"
            } else {
                "the task had already ended"
            }
            .into();
            return Ok(v);
        };
        if job.done.borrow().is_none() {
            job.stop.send_replace(if force { StopLevel::Force } else { StopLevel::Graceful });
            self.log.line(format_args!("cancel {key} (force: {force})"));
            let mut done = job.done.clone();
            // The ladder takes at most graceful (1.5 s) + SIGTERM grace (5 s).
            let _ =
                tokio::time::timeout(Duration::from_secs(15), done.wait_for(Option::is_some)).await;
        }
        self.status_of(&key)
    }

    /// The full id for `id` (a task id may be a unique prefix).
    fn key(&self, id: &str) -> Result<String, ToolError> {
        let id = id.trim();
        if id.starts_with("pln_") || self.job(id).is_some() {
            return Ok(id.to_owned());
        }
        Ok(self.engine.store().resolve(id)?.to_string())
    }

    /// Whether the job has ended (a task or plan of any herd process, read from the store).
    fn is_terminal(&self, status: &Value) -> bool {
        matches!(status["status"].as_str(), Some("completed" | "failed" | "cancelled"))
    }

    /// One job's status: what it is, where it stands, what it cost so far.
    pub fn status_of(&self, id: &str) -> Result<Value, ToolError> {
        let key = self.key(id)?;
        let job = self.job(&key);
        let background = job.as_ref().map(|j| j.background);
        if let Some(outcome) = job.as_ref().and_then(|j| j.done.borrow().clone())
            && let Outcome::Error(e) = &*outcome
        {
            let kind =
                if job.as_ref().is_some_and(|j| j.kind == Kind::Plan) { "plan" } else { "task" };
            return Ok(json!({"id": key, "kind": kind, "status": "failed", "error": e}));
        }
        if key.starts_with("pln_") {
            let store = self.engine.store();
            let Some(o) = store.orchestration(&key)? else {
                if job.is_some() {
                    return Ok(json!({"id": key, "kind": "plan", "status": "pending"}));
                }
                return Err(ToolError(format!("no plan {key}")));
            };
            return Ok(json!({
                "id": o.id, "kind": "plan", "name": o.name, "status": o.status,
                "background": background, "total_steps": o.total_steps,
                "completed_steps": o.completed_steps, "failed_steps": o.failed_steps,
                "cost_usd": o.cost_usd,
                "usage": {"input_tokens": o.input_tokens, "output_tokens": o.output_tokens},
            }));
        }
        let row = self.row(&key)?;
        let mut v = json!({
            "id": row.id, "kind": "task", "description": row.name, "cli": row.cli,
            "status": row.status, "failure_reason": row.failure_reason,
            "background": background, "duration_ms": row.duration_ms(),
            "cost_usd": row.cost_usd, "usage": usage(&row.usage),
        });
        self.add_task_details(&row, &mut v)?;
        Ok(v)
    }

    /// A task's tool calls waiting for `approve`, and its worktree when it is isolated.
    fn add_task_details(&self, row: &SubagentRow, v: &mut Value) -> Result<(), ToolError> {
        let store = self.engine.store();
        if !row.status.is_terminal() {
            let now = now_ms();
            let pending: Vec<Value> = store
                .pending_requests(Some(row.id.as_str()))?
                .into_iter()
                .map(|r| {
                    json!({
                        "request_id": r.id, "tool": r.tool, "input": r.input_preview,
                        "expires_in_s": (r.expires_at - now).max(0) / 1000,
                    })
                })
                .collect();
            if !pending.is_empty() {
                v["pending_permissions"] = pending.into();
            }
        }
        if let Some(w) = store.worktree_of(row.id.as_str())? {
            v["workspace"] = json!({
                "worktree": w.path, "branch": w.branch, "integration_branch": w.integration_branch,
                "merge_status": w.status,
            });
        }
        Ok(())
    }

    /// Answer a pending permission request of one of the tasks (first answer wins).
    pub fn answer(
        &self,
        request: &str,
        allow: bool,
        always: bool,
        reason: Option<String>,
    ) -> Result<Value, ToolError> {
        let mut store = self.engine.store();
        let id = store.resolve_request(request)?;
        let by = format!("mcp client (herd mcp pid {})", std::process::id());
        match store.answer_request(&id, allow, always, reason.as_deref(), &by)? {
            herd_store::Answered::Decided => {
                let decision = if allow { "allowed" } else { "denied" };
                self.log.line(format_args!("request {id} {decision}"));
                Ok(json!({"request_id": id, "decision": decision}))
            }
            herd_store::Answered::AlreadyDecided(status) => {
                Err(ToolError(format!("{id} was already decided ({status}); nothing changed")))
            }
        }
    }

    fn row(&self, key: &str) -> Result<SubagentRow, ToolError> {
        let store = self.engine.store();
        let id = store.resolve(key)?;
        store.get(&id)?.ok_or_else(|| ToolError(format!("no task {key}")))
    }

    /// The jobs of this server, oldest first (ids are time-ordered).
    pub fn all_ids(&self) -> Vec<String> {
        self.jobs.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect()
    }

    /// A finished job's full result: a task's output, or a plan's steps with their outputs.
    pub fn result_of(&self, id: &str) -> Result<Value, ToolError> {
        let key = self.key(id)?;
        let status = self.status_of(&key)?;
        if !self.is_terminal(&status) {
            return Err(ToolError(format!(
                "{key} is still {}; call task_wait first",
                status["status"].as_str().unwrap_or("running")
            )));
        }
        if status.get("error").is_some() {
            return Ok(status);
        }
        if key.starts_with("pln_") {
            let steps = self.engine.store().steps(&key)?;
            let steps: Vec<Value> = steps
                .into_iter()
                .map(|s| {
                    let output = s
                        .subagent_id
                        .as_deref()
                        .and_then(|sid| self.row(sid).ok().and_then(|r| r.result));
                    json!({
                        "id": s.step_key, "status": s.status, "failure_reason": s.failure_reason,
                        "session_id": s.subagent_id, "attempts": s.attempts, "output": output,
                    })
                })
                .collect();
            let mut v = status;
            v["steps"] = steps.into();
            return Ok(v);
        }
        let row = self.row(&key)?;
        let transcript = self.engine.paths().transcripts().join(format!("{}.jsonl", row.id));
        let mut v = json!({
            "session_id": row.id, "status": row.status, "failure_reason": row.failure_reason,
            "output": row.result.clone().unwrap_or_default(), "output_truncated": row.result_truncated,
            "duration_ms": row.duration_ms(), "usage": usage(&row.usage), "cost_usd": row.cost_usd,
            "num_turns": row.num_turns, "transcript": transcript,
        });
        self.add_task_details(&row, &mut v)?;
        Ok(v)
    }

    /// Wait until any or all of `ids` ended, or `timeout` passed; their statuses either way.
    pub async fn wait(
        &self,
        ids: &[String],
        all: bool,
        timeout: Duration,
    ) -> Result<Value, ToolError> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.changed.notified();
            let states = ids.iter().map(|id| self.status_of(id)).collect::<Result<Vec<_>, _>>()?;
            let done = states.iter().filter(|s| self.is_terminal(s)).count();
            let satisfied = if all { done == states.len() } else { done > 0 };
            if satisfied || tokio::time::Instant::now() >= deadline {
                return Ok(json!({"timed_out": !satisfied, "done": done, "tasks": states}));
            }
            // Our own jobs notify; runs of other herd processes are polled.
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep(Duration::from_millis(250)) => {}
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// Wait for one job's outcome, asking it to stop if `cancel` fires first.
    pub async fn finish(
        &self,
        id: &str,
        mut done: Done,
        cancel: tokio_util::sync::CancellationToken,
    ) {
        tokio::select! {
            _ = done.wait_for(Option::is_some) => return,
            _ = cancel.cancelled() => {}
        }
        self.log.line(format_args!("{id}: the client cancelled the call; stopping it"));
        if let Some(job) = self.job(id) {
            job.stop.send_replace(StopLevel::Graceful);
        }
        let _ = done.wait_for(Option::is_some).await;
    }

    /// Stop everything still running (the ladder, then kills) and flush the store.
    pub async fn shutdown(&self) {
        let jobs: Vec<Job> =
            self.jobs.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
        let open: Vec<Job> = jobs.into_iter().filter(|j| j.done.borrow().is_none()).collect();
        if !open.is_empty() {
            self.log.line(format_args!("shutdown: stopping {} job(s)", open.len()));
        }
        for (level, limit) in [(StopLevel::Graceful, 10), (StopLevel::Force, 5)] {
            for j in &open {
                j.stop.send_replace(level);
            }
            let all = async {
                for j in &open {
                    let _ = j.done.clone().wait_for(Option::is_some).await;
                }
            };
            if tokio::time::timeout(Duration::from_secs(limit), all).await.is_ok() {
                break;
            }
        }
        if let Err(e) = self.engine.writer().flush().await {
            self.log.line(format_args!("shutdown: flushing the store failed: {e}"));
        }
    }
}

fn usage(u: &Usage) -> Value {
    json!({"input_tokens": u.input_tokens, "output_tokens": u.output_tokens})
}

/// Wait for a slot unless one was given (the task is then `queued`), and run; the final status,
/// or herd's own error. A stop while queued cancels the task before it starts.
async fn run_task(
    engine: &Engine,
    permit: Option<OwnedSemaphorePermit>,
    slots: Arc<Semaphore>,
    id: SubagentId,
    req: TaskRequest,
    mut stop: watch::Receiver<StopLevel>,
) -> Result<Status, String> {
    let permit: OwnedSemaphorePermit = match permit {
        Some(p) => p,
        None => {
            // One acquire kept across the loop: the semaphore is FIFO, so is the queue.
            let acquire = slots.acquire_owned();
            tokio::pin!(acquire);
            let mut poll = tokio::time::interval(Duration::from_millis(250));
            loop {
                tokio::select! {
                    p = &mut acquire => break p.map_err(|e| e.to_string())?,
                    changed = stop.changed() => {
                        if changed.is_err() || *stop.borrow() != StopLevel::None {
                            return cancel_queued(engine, &id).await;
                        }
                    }
                    _ = poll.tick() => {
                        // `herd cancel` from a terminal.
                        if engine.store().cancel_requested(&id).unwrap_or(false) {
                            return cancel_queued(engine, &id).await;
                        }
                    }
                }
            }
        }
    };
    let report = engine.start_run(id, req, stop, None).await;
    drop(permit);
    report.map(|r| r.status).map_err(|e| e.to_string())
}

/// An isolated task that succeeded is merged into its integration branch (a conflict fails it,
/// its branch kept); the integration worktree is closed either way.
async fn merge_isolated(
    engine: &Engine,
    id: &SubagentId,
    ended: Result<Status, String>,
    plan: &IsolationPlan,
    spec: &IsolatedSpec,
    log: &Log,
) -> Result<Status, String> {
    let ended = match ended {
        Ok(Status::WaitingForMerge) => {
            engine.merge_and_close(id, spec, plan).await.map(|(s, _)| s).map_err(|e| e.to_string())
        }
        other => other,
    };
    match engine.close_isolation(plan).await {
        Ok(Some(w)) => log.line(format_args!("task {id}: {w}")),
        Ok(None) => {}
        Err(e) => log.line(format_args!("task {id}: closing its integration worktree: {e}")),
    }
    ended
}

/// Record a task that never started as cancelled.
async fn cancel_queued(engine: &Engine, id: &SubagentId) -> Result<Status, String> {
    let now = now_ms();
    let update = Update {
        status: Some(Status::Cancelled),
        completed_at: Some(now),
        closed_at: Some(now),
        close_reason: Some("cancelled".into()),
        events: vec![
            AgentEvent::SubagentCancelled { reason: "cancelled while queued".into() },
            AgentEvent::SubagentClosed {
                final_status: "cancelled".into(),
                close_reason: "cancelled".into(),
            },
        ],
        ..Update::default()
    };
    engine.writer().update(id, update).await.map_err(|e| e.to_string())?;
    Ok(Status::Cancelled)
}
