//! Spawning one subagent: resolve the request, continue an earlier run, take a place in the pool
//! (or queue for one), isolate it in a worktree and merge it back, and record its end.

use std::sync::Arc;

use herd_core::context::Part;
use herd_core::workspace::WorkspaceMode;
use herd_core::{AgentEvent, BackendKind, Status, SubagentId};
use herd_store::{Update, now_ms};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use super::Service;
use super::api::{Caller, TaskSpec, WorkspaceSpec};
use super::error::ApiError;
use super::jobs::Ended;
use super::request::{Fallbacks, Project, Resolved, resolve};
use crate::workspace::{IsolatedSpec, IsolationPlan, WorkspaceReq};
use crate::{Engine, Progress, StopLevel, TaskRequest};

/// Messages replayed when a run cannot be resumed natively.
const REPLAY_MESSAGES: usize = 20;

/// A subagent that has been created: recorded, and running or queued for a place.
#[derive(Debug)]
pub struct Spawned {
    pub id: SubagentId,
    pub cli: BackendKind,
    /// How its CLI was chosen (`--explain`).
    pub cli_reason: String,
    /// Where its CLI's tool calls meet herd's permission gate, or what herd's rules map to
    /// when the CLI asks nothing (`--explain`).
    pub permission_route: String,
    /// `pending` (started at once) or `queued` (waiting for a place in the pool).
    pub status: Status,
    /// Live turns, tokens and the current tool, published once stored.
    pub progress: watch::Receiver<Progress>,
}

impl Service {
    /// Create and start (or queue) one subagent for `caller`. Returns once it is recorded; it
    /// runs on whatever happens to the caller's call (see [`wait`](Self::wait) and
    /// [`cancel`](Self::cancel)).
    pub async fn spawn(&self, caller: &Caller, spec: TaskSpec) -> Result<Spawned, ApiError> {
        let isolate = Isolate::of(&spec.workspace);
        let resume = spec.resume.clone().map(|id| (id, spec.cwd.is_some()));
        let mut project = Project::open(&caller.project_root)?;
        let Resolved { mut req, cli_reason } =
            resolve(&mut project, caller, spec, Fallbacks::default())?;
        match &resume {
            Some((id, cwd_given)) => {
                let history = self.resume_into(&mut req, id, *cwd_given)?;
                if req.spec.resume.is_none() {
                    req.assemble(history);
                } else {
                    // Native: the CLI has the history. An ACP agent that turns out unable to
                    // load its session gets it replayed instead.
                    if req.backend == BackendKind::Acp {
                        let mut replayed = req.clone();
                        replayed.assemble(history);
                        req.spec.replay_prompt = Some(replayed.spec.prompt);
                    }
                    req.assemble(Vec::new());
                }
                super::request::check_program(&req)?;
            }
            None => req.assemble(Vec::new()),
        }
        let confined =
            matches!(req.permissions.confine.decide(), crate::sandbox::Decision::Confine(_));
        let permission_route = match herd_backends::backend(req.backend)
            .permission_route(&req.spec, confined)
        {
            herd_backends::PermissionRoute::Asks(how) => {
                format!("the agent asks herd before the calls it would ask a person about ({how})")
            }
            herd_backends::PermissionRoute::Mapped(how) => how,
            herd_backends::PermissionRoute::None => {
                "a program asks nothing: it runs with what the sandbox allows".into()
            }
        };
        req.caller.check_depth()?;
        let admission = self.pool.admit()?;
        let engine = &self.engine;
        let id = SubagentId::generate();
        // An isolated task gets its worktree first: the run is recorded with its real cwd.
        let iso = match &isolate {
            Some(i) => Some(isolate_request(engine, &id, &mut req, i).await?),
            None => None,
        };
        if let Err(e) = engine.create_run(&id, &req).await {
            if let Some((plan, _)) = &iso {
                let _ = engine.close_isolation(plan).await;
            }
            return Err(e.into());
        }
        // Taken now, in call order: a task that gets no place is `queued` before this returns.
        let permit = Arc::clone(&self.pool.places).try_acquire_owned().ok();
        let status = if permit.is_some() { Status::Pending } else { Status::Queued };
        if permit.is_none() {
            let queued = Update { status: Some(Status::Queued), ..Update::default() };
            engine.writer().update(&id, queued).await?;
        }
        let (progress_tx, progress) = watch::channel(Progress::default());
        let running = self.jobs.insert(id.as_str());
        let (engine, places) = (Arc::clone(engine), Arc::clone(&self.pool.places));
        let (task_id, cli) = (id.clone(), req.backend);
        tokio::spawn(async move {
            let _admitted = admission;
            let stop = running.stop.clone();
            let mut ended =
                run_task(&engine, permit, places, task_id.clone(), req, stop, progress_tx).await;
            if let Some((plan, spec)) = &iso {
                ended = merge_isolated(&engine, &task_id, ended, plan, spec).await;
            }
            running.finish(match ended {
                Ok(()) => Ended::Task,
                Err(e) => Ended::Error(e),
            });
        });
        Ok(Spawned { id, cli, cli_reason, permission_route, status, progress })
    }

    /// Turn `req` into a continuation of run `prefix`: its CLI (and program) and, unless a cwd
    /// was given, its directory; the CLI's own session (`spec.resume`) where it has one. Returns
    /// the last messages of its record as an untrusted context part, for when it has none.
    fn resume_into(
        &self,
        req: &mut TaskRequest,
        prefix: &str,
        cwd_given: bool,
    ) -> Result<Vec<Part>, ApiError> {
        let store = self.engine.store();
        let id = store.resolve(prefix)?;
        let row = store.get(&id)?.ok_or_else(|| ApiError::not_found(format!("no run {prefix}")))?;
        if !row.status.is_terminal() {
            return Err(ApiError::precondition(format!(
                "{id} is still {}; resume a finished run",
                row.status
            )));
        }
        req.backend = row.cli.parse().map_err(ApiError::internal)?;
        if !cwd_given {
            req.cwd = row.working_directory.clone().into();
        }
        if req.spec.command.is_empty() {
            req.spec.command =
                serde_json::from_value(row.spec["spec"]["command"].clone()).unwrap_or_default();
        }
        if herd_backends::backend(req.backend).resumes_natively(&req.spec)
            && let Some(native) = &row.native_session_id
        {
            req.spec.resume = Some(native.clone());
        }
        let mut messages = vec![format!("user: {}", row.prompt)];
        let mut after = 0;
        loop {
            let batch = store.events_after(&id, after, 1000)?;
            let Some(last) = batch.last() else { break };
            after = last.seq;
            for e in batch.iter().filter(|e| e.parent_tool_use_id.is_none()) {
                use herd_core::AgentEvent as E;
                match &e.event {
                    E::Text { text } => messages.push(format!("assistant: {text}")),
                    E::UserText { text } => messages.push(format!("user: {text}")),
                    E::ToolCall { name, input, .. } => {
                        messages.push(format!("assistant called {name}: {input}"))
                    }
                    E::ToolResult { content, .. } => {
                        messages.push(format!("tool result: {content}"))
                    }
                    _ => {}
                }
            }
        }
        let start = messages.len().saturating_sub(REPLAY_MESSAGES);
        Ok(vec![Part {
            source: format!("history:{id}"),
            trusted: false,
            content: messages[start..].join("\n"),
        }])
    }
}

/// An isolated task's options.
#[derive(Debug, Clone)]
struct Isolate {
    into: Option<String>,
    base: Option<String>,
    setup: Option<String>,
    auto_commit: bool,
}

impl Isolate {
    fn of(w: &WorkspaceSpec) -> Option<Self> {
        (w.mode == WorkspaceMode::Isolated).then(|| Self {
            into: w.into.clone(),
            base: w.base.clone(),
            setup: w.setup.clone(),
            auto_commit: w.auto_commit.unwrap_or(true),
        })
    }
}

/// Put an isolated task in its own worktree: `herd/<id>/task` from its base (or HEAD), merged
/// into `into` or `herd/<id>/integration`.
async fn isolate_request(
    engine: &Engine,
    id: &SubagentId,
    req: &mut TaskRequest,
    i: &Isolate,
) -> Result<(IsolationPlan, IsolatedSpec), ApiError> {
    let plan = engine.open_isolation(&req.cwd, id.as_str(), None, i.into.as_deref()).await?;
    let base = match &i.base {
        Some(b) => match plan.resolve_base(b) {
            Ok(c) => (c, b.clone()),
            Err(e) => {
                let _ = engine.close_isolation(&plan).await;
                return Err(ApiError::invalid(format!("base {b}: {e}")));
            }
        },
        None => (plan.base.clone(), "HEAD".into()),
    };
    let spec =
        plan.spec("task", base, i.setup.clone(), i.auto_commit, &req.task_prompt, req.timeout);
    req.cwd = plan.cwd_in(&spec, &req.cwd);
    req.workspace = WorkspaceReq::Isolated(Box::new(spec.clone()));
    Ok((plan, spec))
}

/// Wait for a place unless one was given (the task is `queued` meanwhile), then run. A stop
/// while queued — from this process or `herd cancel` elsewhere — cancels it before it starts.
async fn run_task(
    engine: &Engine,
    permit: Option<OwnedSemaphorePermit>,
    places: Arc<Semaphore>,
    id: SubagentId,
    req: TaskRequest,
    mut stop: watch::Receiver<StopLevel>,
    progress: watch::Sender<Progress>,
) -> Result<(), ApiError> {
    let permit = match permit {
        Some(p) => p,
        None => {
            // One acquire kept across the loop: the semaphore is FIFO, so is the queue.
            let acquire = places.acquire_owned();
            tokio::pin!(acquire);
            let poll = engine.config().cancel_poll;
            let mut tick = tokio::time::interval(poll);
            loop {
                tokio::select! {
                    p = &mut acquire => break p.map_err(|e| ApiError::internal(e.to_string()))?,
                    changed = stop.changed() => {
                        if changed.is_err() || *stop.borrow() != StopLevel::None {
                            return cancel_queued(engine, &id).await;
                        }
                    }
                    _ = tick.tick() => {
                        // `herd cancel` from another process.
                        if engine.store().cancel_requested(&id).unwrap_or(false) {
                            return cancel_queued(engine, &id).await;
                        }
                    }
                }
            }
        }
    };
    let report = engine.start_run(id, req, stop, Some(progress)).await;
    drop(permit);
    report.map(|_| ()).map_err(ApiError::from)
}

/// An isolated task that succeeded is merged into its integration branch (a conflict fails it,
/// its branch kept); the integration worktree is closed either way.
async fn merge_isolated(
    engine: &Engine,
    id: &SubagentId,
    ended: Result<(), ApiError>,
    plan: &IsolationPlan,
    spec: &IsolatedSpec,
) -> Result<(), ApiError> {
    let waiting = engine.store().get(id).ok().flatten().map(|r| r.status);
    let merged = match (ended, waiting) {
        (Ok(()), Some(Status::WaitingForMerge)) => {
            engine.merge_and_close(id, spec, plan).await.map(|_| ()).map_err(ApiError::from)
        }
        (other, _) => other,
    };
    match engine.close_isolation(plan).await {
        Ok(None) => {}
        Ok(Some(w)) => eprintln!("herd: warning: task {id}: {w}"),
        Err(e) => eprintln!("herd: warning: task {id}: closing its integration worktree: {e}"),
    }
    merged
}

/// Record a task that never started as cancelled.
async fn cancel_queued(engine: &Engine, id: &SubagentId) -> Result<(), ApiError> {
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
    engine.writer().update(id, update).await?;
    Ok(())
}
