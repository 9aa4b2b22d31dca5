//! One subagent run, start to close: persist it, prepare its workspace, start the agent under
//! the guard with its environment and tool settings, then hand it to [`state`] to the end.

mod output;
mod state;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use herd_backends::{BackendKind, RunSpec};
use herd_core::{AgentEvent, FailureReason, Status, SubagentId, Usage};
use herd_store::{NewSubagent, Update, now_ms};
use serde_json::json;
use tokio::sync::watch;

use crate::gate::calls::Calls;
use crate::gate::{Gate, HookEnv, HookEvent, POLICY_LAYERS_VAR, Permissions, granted_env};
use crate::sandbox::Decision;
use crate::supervisor::{Child, child_env};
use crate::workspace::WorkspaceReq;
use crate::{Engine, EngineError, procfs};
use state::RunState;

/// A task to run as one subagent.
#[derive(Debug, Clone)]
pub struct TaskRequest {
    pub name: Option<String>,
    pub backend: BackendKind,
    /// What the CLI is given; `spec.prompt` is the assembled prompt (context, then the task).
    pub spec: RunSpec,
    /// The task as the caller gave it (what `ps` shows and a resume replays).
    pub task_prompt: String,
    /// Context before the task (AGENTS.md, the agent's memory), assembled by [`Self::assemble`].
    pub context: Vec<herd_core::context::Part>,
    pub cwd: PathBuf,
    /// Explicit `--env K=V` pairs, on top of the allowlist.
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    /// Cut the result text to this many bytes (the transcript keeps everything).
    pub max_output_bytes: Option<u64>,
    /// Store at most this many bytes of the run's output (events, transcript, stderr log);
    /// past it output is dropped with an `output_limit` event.
    pub max_stored_bytes: u64,
    /// Rules, auto-approve, hooks and grants for the agent's tool calls.
    pub permissions: Permissions,
    /// Where the agent works: the directory as is (optionally locked) or an isolated worktree.
    pub workspace: WorkspaceReq,
    /// The plan run and step key this task is, to mark the step `blocked` while it waits.
    pub plan_step: Option<(String, String)>,
    /// Who asked for it: its depth, the policies above it, its session.
    pub caller: RunCaller,
}

impl TaskRequest {
    /// Put the prompt together: the request's context, then `extra` parts (dependencies'
    /// results, resumed history), then the task. Without any part the prompt is the task.
    pub fn assemble(&mut self, extra: Vec<herd_core::context::Part>) {
        let parts: Vec<_> = self.context.iter().cloned().chain(extra).collect();
        self.spec.prompt = if parts.is_empty() {
            self.task_prompt.clone()
        } else {
            herd_core::context::assemble(&parts, &self.task_prompt)
        };
    }
}

/// What a run keeps of its caller.
#[derive(Debug, Clone, Default)]
pub struct RunCaller {
    /// How deep in a chain of herds the caller runs; its runs are one deeper.
    pub depth: u32,
    pub max_depth: u32,
    /// The policies above the run's own (children narrow them).
    pub inherited: Arc<[herd_core::permission::Policy]>,
    /// The session its runs are recorded under (`None`: the engine's).
    pub session: Option<String>,
}

impl RunCaller {
    pub(crate) fn of(c: &crate::service::Caller) -> Self {
        Self {
            depth: c.depth,
            max_depth: c.max_depth,
            inherited: c.inherited.clone().into(),
            session: c.session.clone(),
        }
    }

    /// Refuse to start subagents from a caller already at the depth limit.
    pub fn check_depth(&self) -> Result<(), EngineError> {
        if self.depth >= self.max_depth {
            return Err(EngineError::DepthExceeded { depth: self.depth, max: self.max_depth });
        }
        Ok(())
    }
}

/// How hard a caller wants a run stopped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum StopLevel {
    #[default]
    None,
    /// The stop ladder: graceful, then SIGTERM, then SIGKILL.
    Graceful,
    /// Straight to SIGKILL.
    Force,
}

/// Live figures for a progress display.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    pub turns: u32,
    pub usage: Usage,
    pub current_tool: Option<String>,
    pub events: u64,
}

/// The commit of a run's last write (its end, audit entry, lock release), and of its change to
/// `running` when that was still queued: a failed start write is reported, never skipped.
#[derive(Debug)]
pub(crate) struct Ended {
    running: Option<herd_store::Pending<Vec<herd_store::StoredEvent>>>,
    end: herd_store::Pending<Vec<herd_store::StoredEvent>>,
}

impl Ended {
    /// Wait until the end is stored (the writer takes writes in order, so the change to
    /// `running` is decided by then); the first failure of the two is returned.
    pub(crate) async fn committed(self) -> Result<(), EngineError> {
        let end = self.end.committed().await;
        if let Some(running) = self.running {
            running.committed().await?;
        }
        end?;
        Ok(())
    }
}

/// A plan's run, created ahead of its place: it holds a place in `slots` from before its
/// workspace is prepared (a lock it waits for, a worktree and its setup command) until its end
/// is queued for the store, so the next run to get the place finds any lock this one held
/// released.
pub(crate) struct Ahead<'a> {
    pub slots: &'a crate::slots::Slots,
    /// Its creation, queued by [`Engine::persist_run`]: waited for once the run has its place.
    pub created: herd_store::Created,
    /// Called once it is stored (the plan shows the step started).
    pub on_stored: Box<dyn FnOnce() + Send>,
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct TaskReport {
    pub id: SubagentId,
    pub status: Status,
    pub failure: Option<FailureReason>,
    pub native_session_id: Option<String>,
    pub result: Option<String>,
    pub result_truncated: bool,
    pub num_turns: Option<u32>,
    pub usage: Usage,
    pub cost_usd: Option<f64>,
    pub duration_ms: u64,
}

impl Engine {
    /// Run `req` as subagent `id` to the end. A failed run is an `Ok` report; `Err` means herd
    /// itself could not record it.
    pub async fn run(
        &self,
        id: SubagentId,
        req: TaskRequest,
        stop: watch::Receiver<StopLevel>,
        progress: Option<watch::Sender<Progress>>,
    ) -> Result<TaskReport, EngineError> {
        self.create_run(&id, &req).await?;
        self.start_run(id, req, stop, progress).await
    }

    /// Persist subagent `id` (status `pending`) with its contract, before any process exists.
    pub async fn create_run(&self, id: &SubagentId, req: &TaskRequest) -> Result<(), EngineError> {
        self.persist_run(id, req, None, false).await?.now().await?;
        Ok(())
    }

    /// [`create_run`](Self::create_run), with a plan step's change to `running` in the same
    /// write and, with `register_ahead` for an unlocked run, its registration as a user of its
    /// directory (which only an exclusive lock cares about). Queued, not waited for.
    pub(crate) async fn persist_run(
        &self,
        id: &SubagentId,
        req: &TaskRequest,
        step: Option<herd_store::StepChange>,
        register_ahead: bool,
    ) -> Result<herd_store::Created, EngineError> {
        req.caller.check_depth()?;
        req.permissions.validate(&req.spec).map_err(EngineError::InvalidPermissionConfig)?;
        if req.permissions.auto_approve.is_some()
            && !herd_core::permission::may_auto_approve(&req.caller.inherited)
        {
            return Err(EngineError::InvalidPermissionConfig(
                "auto-approve is not allowed here (INVALID_PERMISSION_CONFIG): a herd above this \
                 one (or the server's policy) asks a person about calls no rule decides, and a request can only \
                 narrow that"
                    .into(),
            ));
        }
        let env_keys: Vec<&str> = req.env.iter().map(|(k, _)| k.as_str()).collect();
        let (owner_pid, owner_start_time) = self.owner();
        let auto = req.permissions.auto_approve.is_some();
        let session = self.session_of(&req.caller)?;
        let subagent = NewSubagent {
            id: id.clone(),
            parent_session_id: session.clone(),
            name: req.name.clone().unwrap_or_else(|| req.backend.to_string()),
            cli: req.backend.to_string(),
            prompt: req.task_prompt.clone(),
            model: req.spec.model.clone(),
            working_directory: req.cwd.display().to_string(),
            max_turns: req.spec.max_turns,
            timeout_ms: Some(req.timeout.as_millis() as u64),
            // The delegation contract. Explicit env values may be secrets: keys only.
            spec: json!({
                "cli": req.backend, "spec": req.spec, "cwd": req.cwd,
                "timeout_ms": req.timeout.as_millis() as u64,
                "max_output_bytes": req.max_output_bytes, "env_keys": env_keys,
                "sandbox": req.permissions.confine.decide().record(
                    req.permissions.confine.effective_mode().unwrap_or_default()),
                "trust_project_settings": req.permissions.confine.trust_project_settings,
                "plan": req.plan_step.as_ref().map(|(plan, step)| json!({"id": plan, "step": step})),
            }),
            owner_pid,
            owner_start_time,
        };
        let audit = herd_store::NewAudit {
            event_type: "subagent_spawn",
            severity: if auto { "warn" } else { "info" },
            subagent_id: Some(id.to_string()),
            parent_session_id: Some(session),
            details: Some(req.permissions.summary(&req.spec)),
            ..Default::default()
        };
        let unlocked_in = match &req.workspace {
            WorkspaceReq::Shared { lock: None, .. } if register_ahead => {
                Some((crate::workspace::lock_key(&req.cwd), procfs::is_same_process as _))
            }
            _ => None,
        };
        Ok(self.writer().create_run(subagent, auto, audit, step, unlocked_in).await?)
    }

    /// Run a subagent persisted by [`create_run`](Self::create_run); returns once its end is
    /// stored.
    pub async fn start_run(
        &self,
        id: SubagentId,
        req: TaskRequest,
        stop: watch::Receiver<StopLevel>,
        progress: Option<watch::Sender<Progress>>,
    ) -> Result<TaskReport, EngineError> {
        let (report, stored) = self.launch(id, req, stop, progress, None).await?;
        stored.committed().await?;
        Ok(report)
    }

    /// [`start_run`](Self::start_run) without waiting for the last write to commit: the caller
    /// gets the report at once and shows it only once `Ended` has committed. `ahead`: a plan's
    /// run, created ahead of its place in the plan's pool (see [`Ahead`]).
    pub(crate) async fn launch(
        &self,
        id: SubagentId,
        req: TaskRequest,
        stop: watch::Receiver<StopLevel>,
        progress: Option<watch::Sender<Progress>>,
        ahead: Option<Ahead<'_>>,
    ) -> Result<(TaskReport, Ended), EngineError> {
        let session = self.session_of(&req.caller)?;
        let backend = herd_backends::backend(req.backend);
        // Children carry their depth, so a herd they start knows where it stands.
        let gate = Arc::new(Gate::new(
            req.permissions.clone(),
            &req.caller.inherited,
            &req.spec,
            self.writer(),
            self.store.clone(),
            id.clone(),
            HookEnv {
                subagent_id: id.to_string(),
                subagent_name: req.name.clone().unwrap_or_else(|| req.backend.to_string()),
                session_id: session,
                tool: None,
            },
            req.cwd.clone(),
            self.answers.clone(),
        ));
        let mut explicit = vec![
            (crate::service::DEPTH_VAR.to_owned(), (req.caller.depth + 1).to_string()),
            (POLICY_LAYERS_VAR.to_owned(), gate.layers_json()),
        ];
        // What the CLI needs set (gemini: a trusted workspace, no self re-spawn), under `--env`.
        explicit
            .extend(backend.fixed_env(&req.spec).iter().map(|(k, v)| ((*k).into(), (*v).into())));
        explicit.extend(req.env.iter().cloned());
        // Granted secrets reach the child only at spawn and only while their grant is valid.
        explicit.extend(granted_env(&req.permissions));
        // Values may be secrets (grants, --env): both copies are wiped when dropped, on every path.
        let explicit = Wiped(explicit);
        let prefixes = backend.env_prefixes(&req.spec);
        let env = Wiped(child_env(std::env::vars(), prefixes, &explicit.0));
        drop(explicit);
        // Auto-approve's time box bounds the whole run.
        let timeout = match &req.permissions.auto_approve {
            Some(a) => req.timeout.min(a.max_duration),
            None => req.timeout,
        };
        let mut run = RunState::new(self, &id, backend, &req, progress, Calls::new(gate))?;
        let (_slot, registered) = match ahead {
            Some(ahead) => {
                let Some(place) = ahead.slots.acquire(&stop).await else {
                    return run.finish(Status::Cancelled, None, Instant::now(), &[]).await;
                };
                // Not before its row is stored (the writer is told not to wait for company).
                let registered = ahead.created.now().await?;
                (ahead.on_stored)();
                (Some(place), registered)
            }
            None => (None, false),
        };
        // A run's duration starts with its place: time queued for one is not its own.
        let started = Instant::now();
        match self.prepare_workspace(&id, &req, &stop, registered).await {
            Ok(None) => {}
            Ok(Some((status, failure))) => return run.finish(status, failure, started, &[]).await,
            Err(e) => {
                // Leave a terminal record rather than a `pending` row, then report herd's error.
                let failure = FailureReason::Workspace { message: format!("herd error: {e}") };
                let _ = run.finish(Status::Failed, Some(failure), started, &[]).await;
                return Err(e);
            }
        }

        let override_bin =
            backend.program_override_var(&req.spec).and_then(|v| std::env::var(v).ok());
        // Tools granted for now are offered beside the run's own (the gate checks the grant at
        // each call); then what the CLI must always ask about, of the tools the run has.
        let mut spec = req.spec.clone();
        if let Some(tools) = spec.tools.as_mut() {
            for g in req.permissions.granted_tools() {
                if !tools.iter().any(|t| t.eq_ignore_ascii_case(&g)) {
                    tools.push(backend.tool_name(&g));
                }
            }
        }
        let tools: Vec<String> = match &spec.tools {
            Some(t) => t.clone(),
            None => backend.builtin_tools().iter().map(|t| (*t).to_owned()).collect(),
        };
        spec.ask_first = run.calls.gate.ask_first(&tools);
        spec.trust_project_settings = req.permissions.confine.trust_project_settings;
        // The sandbox, and the repository's refs as they are before the agent starts.
        let decision = req.permissions.confine.decide();
        let layout = crate::workspace::refs::Layout::of(&req.cwd);
        if let Some(l) = layout.clone() {
            match run.snapshot_refs(l, &req, matches!(decision, Decision::Confine(_))).await {
                Ok(()) => {}
                Err(message) => {
                    let failure = FailureReason::Workspace { message };
                    return run.finish(Status::Failed, Some(failure), started, &[]).await;
                }
            }
        }
        let home = env.0.iter().find(|(k, _)| k == "HOME").map(|(_, v)| PathBuf::from(v));
        let roots = crate::protected::Roots {
            cwd: req.cwd.canonicalize().unwrap_or_else(|_| req.cwd.clone()),
            worktree: match &req.workspace {
                WorkspaceReq::Isolated(spec) => Some(spec.path.clone()),
                WorkspaceReq::Shared { .. } => None,
            },
            git: layout.as_ref(),
            state_dir: self.paths().root.clone(),
            protect: &req.permissions.confine.protect,
            user_config: crate::protected::user_config(),
        };
        run.calls.gate.protect(crate::protected::Protected::new(&roots, home.as_deref()));
        if let Decision::Unconfined { reason, warn } = &decision {
            if *warn {
                crate::sandbox::warn_once(reason);
            }
            let ev = AgentEvent::Unconfined { reason: reason.clone() };
            self.writer().append(&id, vec![herd_core::Decoded::top(ev)]).await?;
        }
        // What the CLI reads for this run (gemini's policy), kept beside its transcript.
        let mut files = Vec::new();
        for f in backend.run_files(&spec) {
            let path = self.paths().transcripts().join(format!("{id}.{}", f.name));
            match std::fs::write(&path, &f.contents) {
                Ok(()) => files.push((f.name, path)),
                Err(e) => {
                    let message = format!("cannot write {}: {e}", path.display());
                    let failure = FailureReason::SpawnError { message };
                    return run.finish(Status::Failed, Some(failure), started, &[]).await;
                }
            }
        }
        let paths: Vec<PathBuf> = files.iter().map(|(_, p)| p.clone()).collect();
        let launch = herd_backends::Launch {
            env: &env.0,
            override_bin: override_bin.as_deref(),
            confined: matches!(decision, Decision::Confine(_)),
            files: &files,
        };
        let spawned = match backend.invocation(&spec, &launch) {
            Ok(inv) => match self.confined(&decision, inv.clone(), &req, &env.0, layout, &paths) {
                Ok((run_inv, holders)) => {
                    let sandboxed = holders.is_some();
                    run.placeholders = holders;
                    match self.keeper() {
                        Ok(keeper) => Child::spawn(
                            &keeper,
                            id.as_str(),
                            &run_inv,
                            &req.cwd,
                            &env.0,
                            sandboxed,
                        )
                        .await
                        .map(|c| (c, inv))
                        .map_err(|e| e.to_string()),
                        Err(e) => Err(e.to_string()),
                    }
                }
                Err(e) => Err(e),
            },
            Err(e) => Err(e.to_string()),
        };
        // The child has its environment: herd's copy (grants included) is wiped.
        drop(env);
        let (mut child, inv) = match spawned {
            Ok(c) => c,
            Err(message) => {
                let failure = FailureReason::SpawnError { message };
                return run.finish(Status::Failed, Some(failure), started, &[]).await;
            }
        };
        let argv: Vec<String> = std::iter::once(inv.program.display().to_string())
            .chain(inv.args.iter().cloned())
            .collect();
        run.started_at = Some(now_ms());
        // Not waited for here: the run goes on while it commits; `finish` checks it.
        run.running = Some(
            self.writer()
                .queue_update(
                    &id,
                    Update {
                        status: Some(Status::Running),
                        pid: Some(child.pid),
                        pgid: Some(child.pid),
                        process_start_time: child.start_time,
                        started_at: run.started_at,
                        events: vec![AgentEvent::SubagentStarted {
                            pid: child.pid,
                            pgid: child.pid,
                            argv: argv.clone(),
                        }],
                        ..Update::default()
                    },
                )
                .await?,
        );
        run.calls.fire(
            HookEvent::SubagentStart,
            json!({"hook_event_name": "SubagentStart", "subagent_id": id.as_str(), "argv": argv}),
        );
        run.start_stdin(&mut child, &req.spec);
        if !backend.holds_stdin() {
            child.close_stdin();
        }
        // A CLI that answers follow-up messages takes them while it runs.
        let _takes_messages =
            (backend.holds_stdin() && backend.follow_up("").is_some()).then(|| {
                let (registration, rx) = self.inputs.register(id.as_str());
                run.inputs = Some(rx);
                registration
            });
        match run.pump(&mut child, stop, timeout, req.spec.max_turns).await {
            Ok((status, failure)) => run.finish(status, failure, started, &argv).await,
            Err(e) => {
                // herd itself failed (store, transcript): stop the agent and, if the store still
                // takes writes, leave a terminal record rather than a `running` row.
                child.kill();
                child.wait_exit().await;
                let failure = FailureReason::AgentError { message: format!("herd error: {e}") };
                let _ = run.finish(Status::Failed, Some(failure), started, &argv).await;
                Err(e)
            }
        }
    }
}

/// Environment pairs (they may hold granted secrets) overwritten before their memory is freed.
struct Wiped(Vec<(String, String)>);

impl Drop for Wiped {
    fn drop(&mut self) {
        use zeroize::Zeroize;
        for (k, v) in self.0.iter_mut() {
            k.zeroize();
            v.zeroize();
        }
    }
}
