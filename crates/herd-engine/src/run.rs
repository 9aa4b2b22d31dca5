//! One subagent run, start to close: persist it, start the agent under its guard, pump and
//! decode its output, enforce timeout / cancel / turn limit through the stop ladder, judge, record.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use herd_backends::{Backend, BackendKind, Decoder, Exit, RunSpec, Verdict};
use herd_core::{AgentEvent, Decoded, FailureReason, ResultInfo, Status, SubagentId, Usage};
use herd_store::{Meta, NewSubagent, Transcript, Update, now_ms};
use nix::sys::signal::Signal;
use serde_json::json;
use tokio::io::AsyncReadExt;
use tokio::sync::watch;
use tokio::time::{Instant as TInstant, sleep_until};

use crate::gate::calls::Calls;
use crate::gate::{Gate, HookEnv, HookEvent, POLICY_LAYERS_VAR, Permissions, granted_env};
use crate::lines::{LineSplitter, Piece};
use crate::supervisor::{Child, child_env};
use crate::workspace::{IsolatedSpec, WorkspaceReq};
use crate::{Engine, EngineError, guard::GuardMsg, procfs};

/// A task to run as one subagent.
#[derive(Debug, Clone)]
pub struct TaskRequest {
    pub name: Option<String>,
    pub backend: BackendKind,
    pub spec: RunSpec,
    pub cwd: PathBuf,
    /// Explicit `--env K=V` pairs, on top of the allowlist.
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    /// Cut the result text to this many bytes (the transcript keeps everything).
    pub max_output_bytes: Option<u64>,
    /// Rules, auto-approve, hooks and grants for the agent's tool calls.
    pub permissions: Permissions,
    /// Where the agent works: the directory as is (optionally locked) or an isolated worktree.
    pub workspace: WorkspaceReq,
    /// The plan run and step key this task is, to mark the step `blocked` while it waits.
    pub plan_step: Option<(String, String)>,
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

/// The commit of a run's last write (its end, audit entry, lock release).
pub(crate) type Ended = herd_store::Pending<Vec<herd_store::StoredEvent>>;

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopReason {
    Timeout,
    Cancelled,
    MaxTurns,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ladder {
    Idle,
    Graceful,
    Term,
    Killed,
}

/// Everything a finished run reports back, before it is judged.
#[derive(Debug, Default)]
struct Observed {
    result: Option<ResultInfo>,
    native_session_id: Option<String>,
    text: String,
    text_capped: bool,
    exit_code: Option<i32>,
    exit_signal: Option<i32>,
    leftovers: u32,
    lines_over_limit: u64,
}

/// A command backend's collected stdout is capped at this, whatever `--max-output-kb` says.
const TEXT_CAP: usize = 16 << 20;

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
        self.persist_run(id, req, None, false).await.map(drop)
    }

    /// [`create_run`](Self::create_run), with a plan step's change to `running` in the same
    /// write and, with `register_ahead` for an unlocked run, its registration as a user of its
    /// directory (which only an exclusive lock cares about). True if it was registered.
    pub(crate) async fn persist_run(
        &self,
        id: &SubagentId,
        req: &TaskRequest,
        step: Option<herd_store::StepChange>,
        register_ahead: bool,
    ) -> Result<bool, EngineError> {
        self.check_depth()?;
        req.permissions.validate(&req.spec).map_err(EngineError::InvalidPermissionConfig)?;
        if req.permissions.auto_approve.is_some()
            && !herd_core::permission::may_auto_approve(&self.inherited_policies)
        {
            return Err(EngineError::InvalidPermissionConfig(
                "INVALID_PERMISSION_CONFIG: auto-approve is not allowed here: a herd above this \
                 one asks a person about calls no rule decides, and a child can only narrow"
                    .into(),
            ));
        }
        let env_keys: Vec<&str> = req.env.iter().map(|(k, _)| k.as_str()).collect();
        let (owner_pid, owner_start_time) = self.owner();
        let auto = req.permissions.auto_approve.is_some();
        let subagent = NewSubagent {
            id: id.clone(),
            parent_session_id: self.session_id.clone(),
            name: req.name.clone().unwrap_or_else(|| req.backend.to_string()),
            cli: req.backend.to_string(),
            prompt: req.spec.prompt.clone(),
            model: req.spec.model.clone(),
            working_directory: req.cwd.display().to_string(),
            max_turns: req.spec.max_turns,
            timeout_ms: Some(req.timeout.as_millis() as u64),
            // The delegation contract. Explicit env values may be secrets: keys only.
            spec: json!({
                "cli": req.backend, "spec": req.spec, "cwd": req.cwd,
                "timeout_ms": req.timeout.as_millis() as u64,
                "max_output_bytes": req.max_output_bytes, "env_keys": env_keys,
            }),
            owner_pid,
            owner_start_time,
        };
        let audit = herd_store::NewAudit {
            event_type: "subagent_spawn",
            severity: if auto { "warn" } else { "info" },
            subagent_id: Some(id.to_string()),
            parent_session_id: Some(self.session_id.clone()),
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
        let (report, stored) = self.launch(id, req, stop, progress, None, false).await?;
        stored.committed().await?;
        Ok(report)
    }

    /// [`start_run`](Self::start_run) without waiting for the last write to commit: the caller
    /// gets the report at once and shows it only once `Ended` has committed. With `slots` (a
    /// plan's pool), the run holds a place from before its workspace is prepared (a lock it
    /// waits for, a worktree and its setup command) until its end is queued for the store, so
    /// the next run to get the place finds any lock this one held released. `registered`: an
    /// unlocked run already registered in its directory at [`persist_run`](Self::persist_run).
    pub(crate) async fn launch(
        &self,
        id: SubagentId,
        req: TaskRequest,
        stop: watch::Receiver<StopLevel>,
        progress: Option<watch::Sender<Progress>>,
        slots: Option<&crate::slots::Slots>,
        registered: bool,
    ) -> Result<(TaskReport, Ended), EngineError> {
        let backend = req.backend.backend();
        // Children carry their depth, so a herd they start knows where it stands.
        let gate = Arc::new(Gate::new(
            req.permissions.clone(),
            &self.inherited_policies,
            &req.spec,
            self.writer(),
            self.store.clone(),
            id.clone(),
            HookEnv {
                subagent_id: id.to_string(),
                subagent_name: req.name.clone().unwrap_or_else(|| req.backend.to_string()),
                session_id: self.session_id.clone(),
                tool: None,
            },
            req.cwd.clone(),
        ));
        let mut explicit = vec![
            ("HERD_DEPTH".to_owned(), (self.depth + 1).to_string()),
            (POLICY_LAYERS_VAR.to_owned(), gate.layers_json()),
        ];
        explicit.extend(req.env.iter().cloned());
        // Granted secrets reach the child only at spawn and only while their grant is valid.
        explicit.extend(granted_env(&req.permissions));
        // Values may be secrets (grants, --env): both copies are wiped when dropped, on every path.
        let explicit = Wiped(explicit);
        let env = Wiped(child_env(std::env::vars(), backend.env_prefixes(), &explicit.0));
        drop(explicit);
        // Auto-approve's time box bounds the whole run.
        let timeout = match &req.permissions.auto_approve {
            Some(a) => req.timeout.min(a.max_duration),
            None => req.timeout,
        };
        let mut run = RunState::new(self, &id, backend, &req, progress, Calls::new(gate))?;
        let started = Instant::now();
        let _slot = match slots {
            Some(pool) => match pool.acquire(&stop).await {
                Some(p) => Some(p),
                None => return run.finish(Status::Cancelled, None, started, &[]).await,
            },
            None => None,
        };
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

        let path_var = env.0.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.as_str());
        let override_bin = backend.program_override_var().and_then(|v| std::env::var(v).ok());
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
        let spawned = match backend.invocation(&spec, path_var, override_bin.as_deref()) {
            Ok(inv) => match self.keeper() {
                Ok(keeper) => Child::spawn(&keeper, id.as_str(), &inv, &req.cwd, &env.0)
                    .await
                    .map(|c| (c, inv))
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
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
        child.write_stdin(&backend.initial_stdin(&req.spec));
        if !backend.holds_stdin() {
            child.close_stdin();
        }
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

struct RunState<'e> {
    engine: &'e Engine,
    id: SubagentId,
    backend: &'static dyn Backend,
    decoder: Box<dyn Decoder>,
    transcript: Transcript,
    stderr_log: Option<std::fs::File>,
    max_output: Option<u64>,
    progress: Option<watch::Sender<Progress>>,
    /// Progress not yet published (published only after a flush: persisted before shown).
    pending: Progress,
    last_progress: Instant,
    obs: Observed,
    /// When the process started (ms since the epoch), as recorded in its row.
    started_at: Option<i64>,
    /// The queued write of the change to `running`, checked before the run's last write.
    running: Option<herd_store::Pending<Vec<herd_store::StoredEvent>>>,
    stop_reason: Option<StopReason>,
    /// The terminal event arrived before any stop began.
    result_before_stop: bool,
    ladder: Ladder,
    ladder_deadline: Option<TInstant>,
    calls: Calls,
    /// An isolated run: on success its work is committed and waits for the merge.
    merge_gate: Option<IsolatedSpec>,
}

impl<'e> RunState<'e> {
    fn new(
        engine: &'e Engine,
        id: &SubagentId,
        backend: &'static dyn Backend,
        req: &TaskRequest,
        progress: Option<watch::Sender<Progress>>,
        calls: Calls,
    ) -> Result<Self, EngineError> {
        let paths = engine.paths();
        Ok(Self {
            engine,
            id: id.clone(),
            backend,
            decoder: backend.decoder(),
            transcript: Transcript::open(paths, id)?,
            stderr_log: None,
            max_output: req.max_output_bytes,
            progress,
            pending: Progress::default(),
            last_progress: Instant::now(),
            obs: Observed::default(),
            started_at: None,
            running: None,
            stop_reason: None,
            result_before_stop: false,
            ladder: Ladder::Idle,
            ladder_deadline: None,
            calls,
            merge_gate: match &req.workspace {
                WorkspaceReq::Isolated(spec) => Some((**spec).clone()),
                WorkspaceReq::Shared { .. } => None,
            },
        })
    }

    /// Read the child to the end, stopping it when asked or when a limit is hit.
    async fn pump(
        &mut self,
        child: &mut Child,
        mut stop: watch::Receiver<StopLevel>,
        timeout: Duration,
        max_turns: Option<u32>,
    ) -> Result<(Status, Option<FailureReason>), EngineError> {
        let cfg = self.engine.config.clone();
        let Some((mut stdout, mut stderr)) = child.take_io() else {
            return Ok(self.judge());
        };
        let far = TInstant::now() + Duration::from_secs(86400 * 365);
        let timeout_at = TInstant::now().checked_add(timeout).unwrap_or(far).min(far);
        let mut out_split = LineSplitter::new(cfg.max_line_bytes);
        let mut err_split = LineSplitter::new(64 * 1024);
        let mut out_buf = vec![0u8; 64 * 1024];
        let mut err_buf = vec![0u8; 8 * 1024];
        let (mut out_done, mut err_done, mut exited) = (false, false, false);
        let mut exited_at: Option<TInstant> = None;
        // First check one period in: a run that ends sooner never asks the store.
        let mut poll = tokio::time::interval_at(TInstant::now() + cfg.cancel_poll, cfg.cancel_poll);
        let mut stop_open = true;
        while !(out_done && err_done && exited) {
            let ladder_at = self.ladder_deadline.unwrap_or(far);
            // Output still open 5 s after the agent exited: something kept our pipe; stop waiting.
            let leak_at = exited_at.map_or(far, |t| t + Duration::from_secs(5));
            tokio::select! {
                _ = sleep_until(leak_at), if exited_at.is_some() => {
                    let mut evs = Vec::new();
                    out_split.finish(|p| self.piece(p, &mut evs, cfg.max_line_bytes));
                    self.emit(child, evs).await?;
                    break;
                }
                n = stdout.read(&mut out_buf), if !out_done => {
                    let n = n.unwrap_or(0);
                    if n == 0 {
                        out_done = true;
                        let mut evs = Vec::new();
                        out_split.finish(|p| self.piece(p, &mut evs, cfg.max_line_bytes));
                        self.emit(child, evs).await?;
                    } else {
                        self.transcript.write(&out_buf[..n])?;
                        let mut evs = Vec::new();
                        out_split.push(&out_buf[..n], |p| self.piece(p, &mut evs, cfg.max_line_bytes));
                        self.transcript.flush()?;
                        self.emit(child, evs).await?;
                        if let Some(m) = max_turns
                            && self.decoder.turns() > m + 1
                        {
                            self.begin_stop(child, StopReason::MaxTurns).await?;
                        }
                    }
                }
                n = stderr.read(&mut err_buf), if !err_done => {
                    let n = n.unwrap_or(0);
                    let mut evs = Vec::new();
                    let mut line = |p: Piece<'_>| evs.push(Decoded::top(AgentEvent::Stderr {
                        line: match p {
                            Piece::Line(l) => String::from_utf8_lossy(l).into_owned(),
                            Piece::TooLong(n) => format!("[herd: a stderr line of {n} bytes was skipped]"),
                        },
                    }));
                    if n == 0 {
                        err_done = true;
                        err_split.finish(&mut line);
                    } else {
                        // Created on first use: most runs never write to stderr.
                        if self.stderr_log.is_none() {
                            self.stderr_log = std::fs::OpenOptions::new()
                                .create(true)
                                .append(true)
                                .open(self.engine.paths().stderr_log(&self.id))
                                .ok();
                        }
                        if let Some(f) = self.stderr_log.as_mut() {
                            let _ = std::io::Write::write_all(f, &err_buf[..n]);
                        }
                        err_split.push(&err_buf[..n], &mut line);
                    }
                    self.engine.writer().append(&self.id, evs).await?;
                }
                msg = child.next_msg(), if !exited => {
                    exited = true;
                    exited_at = Some(TInstant::now());
                    match msg {
                        Some(GuardMsg::Exited { code, signal, leftovers }) => {
                            self.obs.exit_code = code;
                            self.obs.exit_signal = signal;
                            self.obs.leftovers = leftovers;
                        }
                        _ => {
                            // The guard itself died: take the agent's group down ourselves.
                            procfs::signal_group(child.pid, Signal::SIGKILL);
                            self.obs.exit_signal = Some(Signal::SIGKILL as i32);
                        }
                    }
                }
                _ = sleep_until(timeout_at), if self.stop_reason.is_none() => {
                    self.begin_stop(child, StopReason::Timeout).await?;
                }
                _ = sleep_until(ladder_at), if self.ladder_deadline.is_some() => {
                    self.escalate(child).await?;
                }
                changed = stop.changed(), if stop_open => {
                    if changed.is_err() {
                        stop_open = false;
                        continue;
                    }
                    let level = *stop.borrow_and_update();
                    match level {
                        StopLevel::None => {}
                        StopLevel::Graceful => self.begin_stop(child, StopReason::Cancelled).await?,
                        StopLevel::Force => {
                            self.stop_reason.get_or_insert(StopReason::Cancelled);
                            self.kill(child, "cancelled (forced)").await?;
                        }
                    }
                }
                Some(done) = self.calls.decisions.join_next(), if !self.calls.decisions.is_empty() => {
                    if let Ok((request_id, answer)) = done
                        && let Some(bytes) = self.backend.permission_answer(&request_id, &answer)
                    {
                        child.write_stdin(&bytes);
                    }
                }
                _ = poll.tick(), if self.stop_reason.is_none() => {
                    let asked = self.engine.store().run_requests(self.id.as_str()).unwrap_or_default();
                    if let Some(reason) = asked.revoked {
                        self.calls.gate.revoke(&reason).await;
                    }
                    if asked.cancel {
                        self.begin_stop(child, StopReason::Cancelled).await?;
                    }
                }
            }
        }
        // `herd cancel --force` may kill the group before our next poll saw the request.
        if self.stop_reason.is_none()
            && self.obs.result.is_none()
            && self.obs.exit_signal.is_some()
            && (*stop.borrow() != StopLevel::None
                || self.engine.store().cancel_requested(&self.id).unwrap_or(false))
        {
            self.stop_reason = Some(StopReason::Cancelled);
        }
        Ok(self.judge())
    }

    /// Decode one piece of stdout into events.
    fn piece(&mut self, p: Piece<'_>, evs: &mut Vec<Decoded>, limit: usize) {
        match p {
            Piece::Line(l) => self.decoder.decode(l, evs),
            Piece::TooLong(bytes) => {
                self.obs.lines_over_limit += 1;
                evs.push(Decoded::top(AgentEvent::LineTooLong { bytes, limit: limit as u64 }));
            }
        }
    }

    /// Look at decoded events (result, session, text), then hand them to the writer.
    async fn emit(&mut self, child: &mut Child, evs: Vec<Decoded>) -> Result<(), EngineError> {
        if evs.is_empty() {
            return Ok(());
        }
        let mut tool = None;
        let mut got_result = false;
        self.calls.observe(&evs);
        for d in &evs {
            match &d.event {
                AgentEvent::Result(r) => {
                    if self.stop_reason.is_none() {
                        self.result_before_stop = true;
                    }
                    if r.native_session_id.is_some() {
                        self.obs.native_session_id = r.native_session_id.clone();
                    }
                    self.obs.result = Some(r.clone());
                    got_result = true;
                }
                AgentEvent::Init { native_session_id: Some(s), .. } => {
                    self.obs.native_session_id = Some(s.clone());
                }
                AgentEvent::ToolCall { name, .. } if d.parent_tool_use_id.is_none() => {
                    tool = Some(name.clone());
                }
                AgentEvent::Text { text } if self.backend.kind() == BackendKind::Command => {
                    if self.obs.text.len() + text.len() < TEXT_CAP {
                        if !self.obs.text.is_empty() {
                            self.obs.text.push('\n');
                        }
                        self.obs.text.push_str(text);
                    } else {
                        self.obs.text_capped = true;
                    }
                }
                _ => {}
            }
        }
        let n = evs.len() as u64;
        self.engine.writer().append(&self.id, evs).await?;
        self.pending.events += n;
        if tool.is_some() {
            self.pending.current_tool = tool;
        }
        // Shown only once stored: flush before publishing, at most every 100 ms.
        if self.progress.is_some() && self.last_progress.elapsed() >= Duration::from_millis(100) {
            self.engine.writer().flush().await?;
            self.pending.turns = self.decoder.turns();
            self.pending.usage = self.decoder.usage();
            if let Some(p) = &self.progress {
                p.send_replace(self.pending.clone());
            }
            self.last_progress = Instant::now();
        }
        // The terminal event arrived: end the input so the CLI exits (stdin held until result).
        if got_result && self.backend.holds_stdin() {
            child.close_stdin();
        }
        Ok(())
    }

    async fn record_stop(&self, step: &str, why: &str) -> Result<(), EngineError> {
        let ev = AgentEvent::StopRequested { step: step.into(), why: why.into() };
        Ok(self.engine.writer().append(&self.id, vec![Decoded::top(ev)]).await?)
    }

    /// First rung of the ladder: the backend's interrupt message, else SIGINT to the group.
    async fn begin_stop(&mut self, child: &mut Child, why: StopReason) -> Result<(), EngineError> {
        self.stop_reason.get_or_insert(why);
        if self.ladder != Ladder::Idle {
            return Ok(());
        }
        let why = format!("{why:?}").to_lowercase();
        match self.backend.interrupt_message().filter(|_| child.stdin_open()) {
            Some(msg) => {
                child.write_stdin(&msg);
                self.record_stop("interrupt", &why).await?;
            }
            None => {
                child.signal(Signal::SIGINT);
                self.record_stop("sigint", &why).await?;
            }
        }
        self.ladder = Ladder::Graceful;
        self.ladder_deadline = Some(TInstant::now() + self.engine.config.graceful_stop);
        Ok(())
    }

    async fn escalate(&mut self, child: &mut Child) -> Result<(), EngineError> {
        match self.ladder {
            Ladder::Graceful => {
                // Closing stdin too: some CLIs only finish once their input ends.
                child.close_stdin();
                child.signal(Signal::SIGTERM);
                self.record_stop("sigterm", "graceful stop timed out").await?;
                self.ladder = Ladder::Term;
                self.ladder_deadline = Some(TInstant::now() + self.engine.config.term_grace);
            }
            Ladder::Term => self.kill(child, "SIGTERM grace period over").await?,
            Ladder::Idle | Ladder::Killed => self.ladder_deadline = None,
        }
        Ok(())
    }

    async fn kill(&mut self, child: &mut Child, why: &str) -> Result<(), EngineError> {
        if self.ladder != Ladder::Killed {
            child.kill();
            self.record_stop("sigkill", why).await?;
            self.ladder = Ladder::Killed;
        }
        self.ladder_deadline = None;
        Ok(())
    }

    /// The SubagentStop hooks (before the run's last write, so what they report is the run's).
    async fn stop_hooks(&self, status: Status, failure: Option<&FailureReason>) {
        let gate = &self.calls.gate;
        if !gate.has_hooks(HookEvent::SubagentStop) {
            return;
        }
        let payload = json!({
            "hook_event_name": "SubagentStop", "subagent_id": self.id.as_str(),
            "status": status.to_string(), "failure_reason": failure.map(ToString::to_string),
        });
        gate.fire(HookEvent::SubagentStop, &gate.names().subagent_name, payload).await;
    }

    /// The end of the run, for the audit log.
    fn end_audit(&self, status: Status, failure: Option<&FailureReason>) -> herd_store::NewAudit {
        let (event_type, severity) = match (status, failure) {
            (Status::Completed, _) => ("subagent_complete", "info"),
            (Status::Cancelled, _) => ("subagent_cancel", "warn"),
            (_, Some(FailureReason::Timeout)) => ("subagent_timeout", "error"),
            _ => ("subagent_fail", "warn"),
        };
        let reason = failure.map(ToString::to_string);
        herd_store::NewAudit {
            event_type,
            severity,
            subagent_id: Some(self.id.to_string()),
            parent_session_id: Some(self.calls.gate.names().session_id.clone()),
            details: Some(json!({"status": status.to_string(), "failure_reason": reason})),
            ..Default::default()
        }
    }

    /// Success is an event, not an exit code: our own stop reasons first, then the backend.
    fn judge(&self) -> (Status, Option<FailureReason>) {
        // The agent's own terminal event came before any stop: it decides.
        let stop = if self.result_before_stop { None } else { self.stop_reason };
        match stop {
            Some(StopReason::Cancelled) => (Status::Cancelled, None),
            Some(StopReason::Timeout) => (Status::Failed, Some(FailureReason::Timeout)),
            Some(StopReason::MaxTurns) => (Status::Failed, Some(FailureReason::MaxTurns)),
            None => {
                let exit = match (self.obs.exit_code, self.obs.exit_signal) {
                    (Some(c), _) => Exit::Code(c),
                    (None, Some(s)) => Exit::Signal(s),
                    (None, None) => Exit::Signal(Signal::SIGKILL as i32),
                };
                match self.backend.verdict(self.obs.result.as_ref(), exit) {
                    Verdict::Completed => (Status::Completed, None),
                    Verdict::Failed(r) => (Status::Failed, Some(r)),
                }
            }
        }
    }

    /// Record the end: row, closing events, meta file.
    async fn finish(
        mut self,
        status: Status,
        failure: Option<FailureReason>,
        started: Instant,
        argv: &[String],
    ) -> Result<(TaskReport, Ended), EngineError> {
        let obs = std::mem::take(&mut self.obs);
        self.calls.close().await;
        // A failed write of the change to running is reported, but after the end is recorded:
        // the run's row, audit entry and lock release must not be skipped for it.
        let running_failed = match self.running.take() {
            Some(running) => running.committed().await.err(),
            None => None,
        };
        let mut events = Vec::new();
        let (status, failure, waiting) = match &self.merge_gate {
            Some(spec) => self.engine.merge_gate(spec, status, failure).await?,
            None => (status, failure, None),
        };
        if obs.leftovers > 0 {
            events.push(AgentEvent::LeftoversKilled { count: obs.leftovers });
        }
        let full = match (&obs.result, self.backend.kind()) {
            (Some(r), _) => r.text.clone(),
            (None, BackendKind::Command) => Some(obs.text.clone()),
            (None, _) => None,
        };
        let mut truncated = obs.text_capped;
        let result = full.map(|text| match self.max_output {
            Some(limit) if text.len() as u64 > limit => {
                truncated = true;
                events.push(AgentEvent::OutputTruncated {
                    limit_bytes: limit,
                    total_bytes: text.len() as u64,
                });
                format!(
                    "{}\n[herd: output truncated to {limit} of {} bytes; the full output is in {}]",
                    herd_core::truncate_str(&text, limit as usize),
                    text.len(),
                    self.transcript.path().display()
                )
            }
            _ => text,
        });
        let status_ev = match (status, &failure) {
            (Status::WaitingForMerge, _) => {
                waiting.clone().unwrap_or(AgentEvent::SubagentCompleted)
            }
            (Status::Completed, _) => AgentEvent::SubagentCompleted,
            (Status::Cancelled, _) => AgentEvent::SubagentCancelled { reason: "cancelled".into() },
            (_, f) => AgentEvent::SubagentFailed {
                reason: f.as_ref().map(ToString::to_string).unwrap_or_default(),
            },
        };
        events.push(status_ev);
        let close_reason = failure.as_ref().map_or(status.to_string(), |f| f.code().to_owned());
        // A run waiting for its merge is closed by the merge, not here.
        let closing = status != Status::WaitingForMerge;
        if closing {
            events.push(AgentEvent::SubagentClosed {
                final_status: status.to_string(),
                close_reason: close_reason.clone(),
            });
        }
        let r = obs.result.as_ref();
        let usage = r.map_or(self.decoder.usage(), |r| r.usage);
        let num_turns = r.and_then(|r| r.num_turns).or(Some(self.decoder.turns()));
        let now = now_ms();
        self.stop_hooks(status, failure.as_ref()).await;
        let audit = self.end_audit(status, failure.as_ref());
        let update = Update {
            status: Some(status),
            failure: failure.clone(),
            exit_code: obs.exit_code,
            exit_signal: obs.exit_signal,
            native_session_id: obs.native_session_id.clone(),
            result: result.clone(),
            result_truncated: Some(truncated),
            num_turns,
            usage: Some(usage),
            cost_usd: r.and_then(|r| r.cost_usd),
            completed_at: Some(now),
            closed_at: closing.then_some(now),
            close_reason: closing.then(|| close_reason.clone()),
            events,
            ..Update::default()
        };
        // One write: the row, its requests closed, the audit entry, its locks released (the
        // process is gone: whatever lock it held is free).
        let ended = self.engine.writer().finish_run(&self.id, update, audit).await?;
        if let Some(e) = running_failed {
            return Err(e.into());
        }
        self.transcript.flush()?;
        // The summary beside the transcript; a run that printed nothing has neither (its row
        // holds the same), so short command steps cost no files.
        if self.transcript.bytes() > 0 || self.stderr_log.is_some() {
            Meta {
                id: self.id.to_string(),
                cli: self.backend.kind().to_string(),
                argv: argv.to_vec(),
                started_at: self.started_at,
                ended_at: now,
                status: status.to_string(),
                exit_reason: failure.as_ref().map(ToString::to_string),
                exit_code: obs.exit_code,
                exit_signal: obs.exit_signal,
                turns: num_turns,
                transcript_bytes: self.transcript.bytes(),
                lines_over_limit: obs.lines_over_limit,
            }
            .write(self.engine.paths(), &self.id)?;
        }
        let report = TaskReport {
            id: self.id.clone(),
            status,
            failure,
            native_session_id: obs.native_session_id,
            result,
            result_truncated: truncated,
            num_turns,
            usage,
            cost_usd: r.and_then(|r| r.cost_usd),
            duration_ms: started.elapsed().as_millis() as u64,
        };
        Ok((report, ended))
    }
}
