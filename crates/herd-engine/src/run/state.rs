//! A started run's life: pump and decode the agent's output, enforce timeout / cancel / turn
//! limit through the stop ladder, judge the outcome, and record the end.

use std::time::{Duration, Instant};

use herd_backends::{Backend, BackendKind, Decoder, Exit, Verdict};
use herd_core::{AgentEvent, Decoded, FailureReason, ResultInfo, Status, SubagentId};
use herd_store::{Meta, Transcript, Update, now_ms};
use nix::sys::signal::Signal;
use serde_json::json;
use tokio::io::AsyncReadExt;
use tokio::sync::watch;
use tokio::time::{Instant as TInstant, sleep_until};

use super::output::{Budget, coalesce_stderr, coalesce_text};
use super::{Ended, Progress, StopLevel, TaskReport, TaskRequest};
use crate::gate::HookEvent;
use crate::gate::calls::Calls;
use crate::lines::{LineSplitter, Piece};
use crate::supervisor::Child;
use crate::workspace::refs::{self, Layout, Scope, Snapshot};
use crate::workspace::{IsolatedSpec, WorkspaceReq};
use crate::{Engine, EngineError, guard::GuardMsg, procfs};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopReason {
    Timeout,
    Cancelled,
    MaxTurns,
    /// The CLI did not finish its protocol's opening handshake in time (see `protocol_error`).
    ProtocolError,
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
const TEXT_CAP: usize = 4 << 20;

pub(super) struct RunState<'e> {
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
    /// Turns and tokens as last written to the run's row (so `herd ps` sees them live).
    persisted: (u32, herd_core::Usage),
    last_persisted: Option<Instant>,
    obs: Observed,
    /// When the process started (ms since the epoch), as recorded in its row.
    pub(super) started_at: Option<i64>,
    /// The queued write of the change to `running`, checked with the run's last write.
    pub(super) running: Option<herd_store::Pending<Vec<herd_store::StoredEvent>>>,
    stop_reason: Option<StopReason>,
    /// The terminal event arrived before any stop began.
    result_before_stop: bool,
    ladder: Ladder,
    ladder_deadline: Option<TInstant>,
    /// The CLI stays after its terminal event (an ACP agent serving until signalled): the
    /// ladder's SIGTERM ends it, and says so.
    lingering: bool,
    exits_at_eof: bool,
    /// When a CLI with an opening handshake must have finished it.
    handshake_deadline: Option<TInstant>,
    /// What the CLI still owed when its handshake timed out.
    protocol_error: Option<String>,
    pub(super) calls: Calls,
    /// An isolated run: on success its work is committed and waits for the merge.
    merge_gate: Option<IsolatedSpec>,
    /// What of its output is stored (bounded by `max_stored_output`).
    budget: Budget,
    /// Bytes of stderr kept in its log file.
    stderr_bytes: u64,
    /// A file beside the run (transcript, stderr log) stopped at the bound.
    files_cut: bool,
    /// The sandbox's placeholder directories, held until the agent is gone.
    pub(super) placeholders: Option<crate::sandbox::Placeholders>,
    /// The repository's refs before the agent started, compared when it has ended.
    refs: Option<Snapshot>,
    /// Follow-up messages for the agent (a CLI that takes them registers while it runs).
    pub(super) inputs: Option<tokio::sync::mpsc::Receiver<crate::inputs::Input>>,
    /// Follow-up messages accepted while the agent's turn is under way, each written at the end
    /// of the turn before it (claude drops a message that arrives while a permission request
    /// waits; between turns it takes one reliably). Its stdin closes once none is left.
    queued: std::collections::VecDeque<String>,
}

impl<'e> RunState<'e> {
    pub(super) fn new(
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
            decoder: backend.decoder(&req.spec, &req.cwd),
            transcript: Transcript::open(paths, id)?,
            stderr_log: None,
            max_output: req.max_output_bytes,
            progress,
            pending: Progress::default(),
            last_progress: Instant::now(),
            persisted: (0, herd_core::Usage::default()),
            last_persisted: None,
            obs: Observed::default(),
            started_at: None,
            running: None,
            stop_reason: None,
            result_before_stop: false,
            ladder: Ladder::Idle,
            ladder_deadline: None,
            lingering: false,
            exits_at_eof: backend.exits_at_eof(&req.spec),
            handshake_deadline: None,
            protocol_error: None,
            calls,
            merge_gate: match &req.workspace {
                WorkspaceReq::Isolated(spec) => Some((**spec).clone()),
                WorkspaceReq::Shared { .. } => None,
            },
            placeholders: None,
            refs: None,
            budget: Budget::new(req.max_stored_bytes),
            stderr_bytes: 0,
            files_cut: false,
            inputs: None,
            queued: std::collections::VecDeque::new(),
        })
    }

    /// Write what the CLI gets first: the backend's initial bytes, then what its protocol opens
    /// with (ACP `initialize`); a CLI with a handshake must finish it within the engine's
    /// `handshake_timeout`.
    pub(super) fn start_stdin(&mut self, child: &mut Child, spec: &herd_backends::RunSpec) {
        child.write_stdin(&self.backend.initial_stdin(spec));
        let opening = self.decoder.take_stdin();
        if !opening.is_empty() {
            child.write_stdin(&opening);
        }
        if self.decoder.handshake_pending().is_some() {
            self.handshake_deadline = Some(TInstant::now() + self.engine.config.handshake_timeout);
        }
    }

    /// Record the refs and HEADs of the repository the run works in, before its agent starts:
    /// its own branch (an isolated run's, or the one checked out where a shared run starts) is
    /// its to move. `confined`: other worktrees' HEADs are read-only to the agent.
    pub(super) async fn snapshot_refs(
        &mut self,
        layout: Layout,
        req: &TaskRequest,
        confined: bool,
    ) -> Result<(), String> {
        let heads = |b: &str| format!("refs/heads/{b}");
        let scope = match &req.workspace {
            WorkspaceReq::Isolated(spec) => Scope {
                own_branch: Some(heads(&spec.branch)),
                integration: Some(heads(&spec.integration_branch)),
                foreign_heads_writable: !confined,
            },
            WorkspaceReq::Shared { .. } => {
                Scope { foreign_heads_writable: !confined, ..Scope::default() }
            }
        };
        let snap = tokio::task::spawn_blocking(move || Snapshot::take(layout, scope))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("cannot record the repository's refs before the agent: {e}"))?;
        self.refs = Some(snap);
        Ok(())
    }

    /// After the agent: the refs and HEADs it changed outside its own branch are put back
    /// (what they pointed to kept under `refs/herd/escaped/<id>/`), recorded and audited, and
    /// the run fails `ref_escape`.
    async fn check_refs(
        &mut self,
        status: Status,
        failure: Option<FailureReason>,
    ) -> Result<(Status, Option<FailureReason>, Option<AgentEvent>), EngineError> {
        let Some(snap) = self.refs.take() else { return Ok((status, failure, None)) };
        let id = self.id.to_string();
        let found = tokio::task::spawn_blocking(move || {
            let now = snap.observe()?;
            let mut changed = refs::changes(&snap, &now);
            refs::restore(&snap, &id, &mut changed);
            Ok::<_, crate::workspace::GitError>(changed)
        })
        .await
        .map_err(|e| EngineError::Task(e.to_string()))?;
        let changes = match found {
            Ok(c) if c.is_empty() => return Ok((status, failure, None)),
            Ok(c) => c,
            Err(e) => {
                let message = format!("cannot compare the repository's refs after the agent: {e}");
                return Ok((Status::Failed, Some(FailureReason::Workspace { message }), None));
            }
        };
        let names: Vec<String> = changes.iter().map(|c| c.name.clone()).collect();
        self.engine
            .writer()
            .audit(herd_store::NewAudit {
                event_type: "ref_escape",
                severity: "error",
                subagent_id: Some(self.id.to_string()),
                parent_session_id: Some(self.calls.gate.names().session_id.clone()),
                details: Some(json!({"changes": changes})),
                ..Default::default()
            })
            .await?;
        let ev = AgentEvent::RefEscape { changes };
        Ok((Status::Failed, Some(FailureReason::RefEscape { refs: names }), Some(ev)))
    }

    /// Read the child to the end, stopping it when asked or when a limit is hit.
    pub(super) async fn pump(
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
        // Under 64 KiB: freeing a chunk that big makes glibc consolidate its free lists, and a
        // plan frees one per run.
        let mut out_buf = vec![0u8; 32 * 1024];
        let mut err_buf = vec![0u8; 8 * 1024];
        let (mut out_done, mut err_done, mut exited) = (false, false, false);
        let mut exited_at: Option<TInstant> = None;
        // First check one period in: a run that ends sooner never asks the store.
        let mut poll = tokio::time::interval_at(TInstant::now() + cfg.cancel_poll, cfg.cancel_poll);
        let mut stop_open = true;
        let mut inputs = self.inputs.take();
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
                        if self.budget.file_room(self.transcript.bytes(), n) {
                            self.transcript.write(&out_buf[..n])?;
                        } else {
                            self.files_cut = true;
                        }
                        let mut evs = Vec::new();
                        out_split.push(&out_buf[..n], |p| self.piece(p, &mut evs, cfg.max_line_bytes));
                        self.transcript.flush()?;
                        // A CLI that stops itself at the limit gets one turn of slack (herd's
                        // count is a backstop); for the others herd's count is the limit. The
                        // stop goes out as soon as the lines are decoded (a fast tool would
                        // otherwise have the next request sent while they are stored) and is
                        // recorded after them.
                        let slack = u32::from(self.backend.enforces_max_turns());
                        let stopped = match max_turns {
                            Some(m) if self.decoder.turns() > m.saturating_add(slack) => {
                                // What the lines ask of a two-way protocol still goes first.
                                self.answer_protocol(child);
                                self.send_stop(child, StopReason::MaxTurns)
                            }
                            _ => None,
                        };
                        self.emit(child, evs).await?;
                        if let Some((step, why)) = stopped {
                            self.record_stop(step, &why).await?;
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
                        if !self.budget.file_room(self.stderr_bytes, n) {
                            self.files_cut = true;
                        } else if let Some(f) = self.stderr_log.as_mut() {
                            let _ = std::io::Write::write_all(f, &err_buf[..n]);
                            self.stderr_bytes += n as u64;
                        }
                        err_split.push(&err_buf[..n], &mut line);
                    }
                    let evs = self.budget.keep(coalesce_stderr(evs));
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
                _ = sleep_until(self.handshake_deadline.unwrap_or(far)), if self.handshake_deadline.is_some() => {
                    self.handshake_deadline = None;
                    if let Some(owed) = self.decoder.handshake_pending() {
                        let secs = self.engine.config.handshake_timeout.as_secs_f64();
                        self.protocol_error = Some(format!(
                            "the agent did not send {owed} within {secs:.0}s"
                        ));
                        self.begin_stop(child, StopReason::ProtocolError).await?;
                    }
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
                    // A request the CLI withdrew meanwhile (a cancel answered it) gets no answer.
                    if let Ok((req, answer)) = done
                        && self.decoder.answered(&req.request_id)
                        && let Some(bytes) = self.backend.answer_permission(&req, &answer)
                    {
                        child.write_stdin(&bytes);
                    }
                }
                Some(input) = crate::inputs::next(&mut inputs), if inputs.is_some() => {
                    let accepted = self.follow_up(child, &input.text);
                    let _ = input.reply.send(accepted);
                }
                _ = poll.tick(), if self.stop_reason.is_none() => {
                    // Figures held back by the rate limit reach the row even when the stream
                    // goes quiet (an agent waiting for a person says nothing more).
                    self.persist_live(Update::default()).await?;
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
                // A program's result is its output: a line skipped is a result cut.
                if self.backend.kind() == BackendKind::Command {
                    self.obs.text_capped = true;
                }
                evs.push(Decoded::top(AgentEvent::LineTooLong { bytes, limit: limit as u64 }));
            }
        }
    }

    /// Look at decoded events (result, session, text), then hand them to the writer.
    async fn emit(&mut self, child: &mut Child, evs: Vec<Decoded>) -> Result<(), EngineError> {
        // A two-way protocol answers what it just read (ACP: the next step of the session),
        // even a line that made no event (the answer to `session/set_mode`).
        self.answer_protocol(child);
        if evs.is_empty() {
            return Ok(());
        }
        let mut tool = None;
        let mut got_result = false;
        let mut live = Update::default();
        self.calls.observe(&evs, self.backend);
        for d in &evs {
            match &d.event {
                // What the stream says of the session, on the row at once (`herd ps`, `show`).
                AgentEvent::Init { native_session_id, model, .. } => {
                    if let Some(s) = native_session_id {
                        self.obs.native_session_id = Some(s.clone());
                        live.native_session_id = Some(s.clone());
                    }
                    live.model.clone_from(model);
                }
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
                AgentEvent::ToolCall { name, .. } if d.parent_tool_use_id.is_none() => {
                    tool = Some(name.clone());
                }
                AgentEvent::Text { text } if self.backend.kind() == BackendKind::Command => {
                    // Keep what fits; past the cap the result says it was cut.
                    let sep = usize::from(!self.obs.text.is_empty());
                    let room = TEXT_CAP.saturating_sub(self.obs.text.len() + sep);
                    if text.len() > room {
                        self.obs.text_capped = true;
                    }
                    if room > 0 {
                        if sep == 1 {
                            self.obs.text.push('\n');
                        }
                        self.obs.text.push_str(herd_core::truncate_str(text, room));
                    }
                }
                _ => {}
            }
        }
        let evs = match self.backend.kind() {
            BackendKind::Command => coalesce_text(evs),
            _ => evs,
        };
        let evs = self.budget.keep(evs);
        let n = evs.len() as u64;
        self.engine.writer().append(&self.id, evs).await?;
        self.pending.events += n;
        self.persist_live(live).await?;
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
        // The terminal event of a turn: the next queued message, else end the input so the CLI
        // exits (stdin held until then).
        if got_result && self.backend.holds_stdin() {
            match self.queued.pop_front().filter(|_| self.stop_reason.is_none()) {
                Some(text) => self.write_follow_up(child, text).await?,
                None => {
                    child.close_stdin();
                    // One that stays anyway is ended by the ladder's SIGTERM after a grace period.
                    if !self.exits_at_eof && self.ladder == Ladder::Idle {
                        self.lingering = true;
                        self.ladder = Ladder::Graceful;
                        self.ladder_deadline =
                            Some(TInstant::now() + self.engine.config.graceful_stop);
                    }
                }
            }
        }
        Ok(())
    }

    /// Write what the decoder has for the CLI's stdin; a finished handshake stops its clock.
    fn answer_protocol(&mut self, child: &mut Child) {
        let reply = self.decoder.take_stdin();
        if !reply.is_empty() && child.stdin_open() {
            child.write_stdin(&reply);
        }
        if self.handshake_deadline.is_some() && self.decoder.handshake_pending().is_none() {
            self.handshake_deadline = None;
        }
    }

    /// Put what the stream said so far on the run's row (queued, after its events): the
    /// session and model when they are said, turns and tokens when they changed, at most twice
    /// a second. The end of the run writes the final figures.
    async fn persist_live(&mut self, mut u: Update) -> Result<(), EngineError> {
        const EVERY: Duration = Duration::from_millis(500);
        let figures = (self.decoder.turns(), self.decoder.usage());
        let due = self.last_persisted.is_none_or(|t| t.elapsed() >= EVERY);
        if figures != self.persisted && (due || u.native_session_id.is_some()) {
            u.num_turns = Some(figures.0);
            u.usage = Some(figures.1);
            self.persisted = figures;
            self.last_persisted = Some(Instant::now());
        }
        let empty = u.native_session_id.is_none() && u.model.is_none() && u.num_turns.is_none();
        if !empty {
            // Not waited for: the run goes on while it commits.
            drop(self.engine.writer().queue_update(&self.id, u).await?);
        }
        Ok(())
    }

    /// Accept another user message for the agent, written when its current turn ends; refused
    /// once the run is stopping or its input is closed (its last turn has ended).
    fn follow_up(&mut self, child: &Child, text: &str) -> Result<(), String> {
        /// Messages that may wait for their turn at once.
        const MAX_QUEUED: usize = 16;
        if self.stop_reason.is_some() {
            return Err("it is stopping".into());
        }
        if !child.stdin_open() {
            return Err("it has given its final result and its input is closed".into());
        }
        if self.backend.follow_up(text).is_none() {
            return Err(format!("{} takes no messages while it runs", self.backend.kind()));
        }
        if self.queued.len() >= MAX_QUEUED {
            return Err(format!("{MAX_QUEUED} messages already wait for its next turns"));
        }
        self.queued.push_back(text.to_owned());
        Ok(())
    }

    /// Write a follow-up message to the agent, recorded as a `user_text` event.
    async fn write_follow_up(
        &mut self,
        child: &mut Child,
        text: String,
    ) -> Result<(), EngineError> {
        if let Some(bytes) = self.backend.follow_up(&text) {
            child.write_stdin(&bytes);
        }
        let ev = AgentEvent::UserText { text };
        Ok(self.engine.writer().append(&self.id, vec![Decoded::top(ev)]).await?)
    }

    async fn record_stop(&self, step: &str, why: &str) -> Result<(), EngineError> {
        let ev = AgentEvent::StopRequested { step: step.into(), why: why.into() };
        Ok(self.engine.writer().append(&self.id, vec![Decoded::top(ev)]).await?)
    }

    /// First rung of the ladder: the protocol's own stop (ACP `session/cancel`), else the
    /// backend's interrupt message, else SIGINT to the group.
    async fn begin_stop(&mut self, child: &mut Child, why: StopReason) -> Result<(), EngineError> {
        match self.send_stop(child, why) {
            Some((step, why)) => self.record_stop(step, &why).await,
            None => Ok(()),
        }
    }

    /// The first rung itself, unrecorded: the step taken and why, or None when the ladder had
    /// already started.
    fn send_stop(&mut self, child: &mut Child, why: StopReason) -> Option<(&'static str, String)> {
        self.stop_reason.get_or_insert(why);
        if self.ladder != Ladder::Idle {
            return None;
        }
        let why = format!("{why:?}").to_lowercase();
        let cancel = if child.stdin_open() { self.decoder.interrupt() } else { Vec::new() };
        let step = if !cancel.is_empty() {
            child.write_stdin(&cancel);
            "session/cancel"
        } else {
            match self.backend.interrupt_message().filter(|_| child.stdin_open()) {
                Some(msg) => {
                    child.write_stdin(&msg);
                    "interrupt"
                }
                None => {
                    child.signal(Signal::SIGINT);
                    "sigint"
                }
            }
        };
        self.ladder = Ladder::Graceful;
        self.ladder_deadline = Some(TInstant::now() + self.engine.config.graceful_stop);
        Some((step, why))
    }

    async fn escalate(&mut self, child: &mut Child) -> Result<(), EngineError> {
        match self.ladder {
            Ladder::Graceful => {
                // Closing stdin too: some CLIs only finish once their input ends.
                child.close_stdin();
                child.signal(Signal::SIGTERM);
                let why = if self.lingering {
                    "the agent stays after its result (it serves until signalled)"
                } else {
                    "graceful stop timed out"
                };
                self.record_stop("sigterm", why).await?;
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
            Some(StopReason::ProtocolError) => {
                let message = self.protocol_error.clone().unwrap_or_default();
                (Status::Failed, Some(FailureReason::ProtocolError { message }))
            }
            // Ended before its handshake was done: it never spoke its protocol.
            None if self.obs.result.is_none() && self.decoder.handshake_pending().is_some() => {
                let owed = self.decoder.handshake_pending().unwrap_or_default();
                let message = format!("the agent ended before it sent {owed}");
                (Status::Failed, Some(FailureReason::ProtocolError { message }))
            }
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
    pub(super) async fn finish(
        mut self,
        status: Status,
        failure: Option<FailureReason>,
        started: Instant,
        argv: &[String],
    ) -> Result<(TaskReport, Ended), EngineError> {
        let obs = std::mem::take(&mut self.obs);
        self.calls.close().await;
        let mut events = Vec::new();
        // The agent is gone: its placeholders go (before anything is committed), and what it
        // did to refs outside its own branch is undone before the merge gate sees its work.
        drop(self.placeholders.take());
        let (status, failure, escape) = self.check_refs(status, failure).await?;
        events.extend(escape);
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
        // Not waited for: the run's place is free once its end is queued; whoever shows the end
        // waits for both writes (a short run's start and end often share one commit).
        let ended = Ended { running: self.running.take(), end: ended };
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
                output_dropped_events: self.budget.dropped_events,
                output_dropped_bytes: self.budget.dropped_bytes,
                files_cut: self.files_cut,
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
