//! What the service answers about the record: runs, plans, events, pending requests, the audit
//! log, worktrees — and the calls that act on it from outside a run (answer, cancel, revoke).

use std::time::{Duration, Instant, SystemTime};

use herd_core::{Status, SubagentId};
use herd_store::{Answered, AuditFilter, NewAudit, Store, StoredEvent, now_ms};
use nix::sys::signal::Signal;
use serde::Serialize;
use serde_json::json;

use super::Service;
use super::api::{Answer, Caller, CancelLevel, WaitMode};
use super::error::ApiError;
use super::jobs::{Ended, JobState, MARGIN, Waited};
use super::views::{
    AuditEntry, PermissionRequestView, PlanEventView, PlanView, RunView, StepView, WorktreeView,
};
use crate::StopLevel;
use crate::procfs;
use crate::workspace::teardown::{self, Verdict};

/// Which runs to list.
#[derive(Debug, Clone, Copy)]
pub struct RunFilter {
    /// Finished ones too.
    pub all: bool,
    /// At most this many (0: no limit).
    pub limit: usize,
}

/// Which audit entries to read.
#[derive(Debug, Clone, Default)]
pub struct AuditQuery {
    /// One run's (id or unique prefix).
    pub run: Option<String>,
    /// At or after this time (ms since the epoch).
    pub since_ms: Option<i64>,
    /// At most this many (0: all).
    pub limit: usize,
}

/// What `gc` deleted (or would).
#[derive(Debug, Clone, Serialize)]
pub struct GcReport {
    pub dry_run: bool,
    pub audit_rows: usize,
    pub transcript_files: usize,
    pub transcript_bytes: u64,
}

/// What pruning did with one worktree.
#[derive(Debug, Clone, Serialize)]
pub struct Pruned {
    #[serde(flatten)]
    pub worktree: WorktreeView,
    /// `removed`, `would remove`, `kept`, or `error: …`.
    pub result: String,
    pub why: String,
}

/// How often the state of a run of another herd process is read while waiting on it.
const OTHER_PROCESS_POLL: Duration = Duration::from_millis(250);

impl Service {
    /// A run by id or unique prefix, with its worktree and the calls it waits on.
    pub fn run(&self, id: &str) -> Result<RunView, ApiError> {
        let store = self.engine.store();
        let sid = store.resolve(id.trim())?;
        view(&store, &sid)
    }

    /// How many tool calls of run `id` (a whole id, as events name it) were denied because
    /// nobody answered: one row by its key, for a reader announcing each step's end (a prefix
    /// is resolved by scanning every run).
    pub fn unanswered_denials(&self, id: &str) -> Result<u32, ApiError> {
        let sid: SubagentId =
            id.parse().map_err(|_| ApiError::not_found(format!("no run {id}")))?;
        Ok(self.engine.store().get(&sid)?.map_or(0, |r| r.unanswered))
    }

    /// Runs, newest first: the active ones, or every one with `all`.
    pub fn runs(&self, f: RunFilter) -> Result<Vec<RunView>, ApiError> {
        let store = self.engine.store();
        let limit = if f.limit == 0 { usize::MAX } else { f.limit };
        let paths = store.paths().clone();
        Ok(store
            .list(f.all, limit)?
            .into_iter()
            .map(|r| {
                let t = r.id.parse().map(|id| paths.transcript(&id)).unwrap_or_default();
                RunView::of(r, t)
            })
            .collect())
    }

    /// A plan run (id or unique prefix, `pln_…`) with its steps, each with its latest run's
    /// figures, and the worktrees of its isolated steps (the merge results).
    /// Plan `id`'s whole id, from itself or a unique prefix.
    pub(super) fn plan_id(&self, id: &str) -> Result<String, ApiError> {
        self.engine.store().resolve_plan(id.trim()).map_err(plan_error)
    }

    /// Whether plan `id` (its whole id) has ended: one row read, not its steps.
    pub(super) fn plan_ended(&self, id: &str) -> Result<bool, ApiError> {
        let o = self.engine.store().orchestration(id)?;
        let o = o.ok_or_else(|| ApiError::not_found(format!("no plan {id}")))?;
        Ok(super::views::plan_status_ended(&o.status))
    }

    pub fn plan(&self, id: &str) -> Result<PlanView, ApiError> {
        let id = self.plan_id(id)?;
        let store = self.engine.store();
        let o = store
            .orchestration(&id)?
            .ok_or_else(|| ApiError::not_found(format!("no plan {id}")))?;
        let tally = store.step_tally(&o.id)?;
        let declared = declared_outputs(store.orchestration_plan(&o.id)?.as_deref());
        let steps = store
            .steps_with_runs(&o.id)?
            .into_iter()
            .map(|(s, run)| {
                let base =
                    std::path::PathBuf::from(s.working_directory.clone().unwrap_or_default());
                let outputs = declared
                    .get(s.sequence as usize)
                    .map(|outs| outs.iter().map(|o| base.join(o)).collect())
                    .unwrap_or_default();
                StepView::of(s, run, outputs)
            })
            .collect();
        let worktrees: Vec<WorktreeView> = store
            .worktrees(true)?
            .into_iter()
            .filter(|w| w.run_id == o.id)
            .map(WorktreeView::from)
            .collect();
        let mut v = PlanView::of(o, tally);
        v.integration_branch = worktrees.iter().find_map(|w| w.integration_branch.clone());
        v.steps = Some(steps);
        v.worktrees = worktrees;
        Ok(v)
    }

    /// Plan runs, newest first: those that have not ended, or every one with `all` (without
    /// their steps; [`plan`](Self::plan) has them).
    pub fn plans(&self, f: RunFilter) -> Result<Vec<PlanView>, ApiError> {
        let store = self.engine.store();
        let limit = if f.limit == 0 { usize::MAX } else { f.limit };
        let rows = store.orchestrations(f.all, limit)?;
        rows.into_iter()
            .map(|o| {
                let tally = store.step_tally(&o.id)?;
                Ok(PlanView::of(o, tally))
            })
            .collect()
    }

    /// A plan's own events (its transitions and its steps') after sequence number `after`, at
    /// most `limit`, in order.
    pub fn plan_events(
        &self,
        id: &str,
        after: i64,
        limit: usize,
    ) -> Result<Vec<PlanEventView>, ApiError> {
        let id = self.plan_id(id)?;
        let store = self.engine.store();
        Ok(store
            .plan_events_after(&id, after, limit)?
            .into_iter()
            .map(|e| PlanEventView::of(&id, e))
            .collect())
    }

    /// The tool run `id`'s agent called last, while it matters (a live display).
    pub fn current_tool(&self, id: &str) -> Result<Option<String>, ApiError> {
        let store = self.engine.store();
        let sid = store.resolve(id.trim())?;
        Ok(store.last_tool_call(&sid)?)
    }

    /// A run's events after sequence number `after`, at most `limit`, in order.
    pub fn events(&self, id: &str, after: i64, limit: usize) -> Result<Vec<StoredEvent>, ApiError> {
        let store = self.engine.store();
        let sid = store.resolve(id.trim())?;
        Ok(store.events_after(&sid, after, limit)?)
    }

    /// Where a job stands: a run (id or unique prefix) or a plan (`pln_…`).
    pub fn status(&self, id: &str) -> Result<JobState, ApiError> {
        let id = id.trim();
        if let Some(job) = self.jobs.get(id)
            && let Some(ended) = job.ended()
            && let Ended::Error(e) = &*ended
        {
            return Ok(JobState::Error { id: id.to_owned(), error: e.clone() });
        }
        if id.starts_with("pln_") {
            let mut plan = self.plan(id)?;
            // A status is about the plan; its steps are one `plan` call away.
            plan.steps = None;
            return Ok(JobState::Plan(Box::new(plan)));
        }
        Ok(JobState::Task(Box::new(self.run(id)?)))
    }

    /// The ids of the jobs this process started, oldest first.
    pub fn job_ids(&self) -> Vec<String> {
        self.jobs.ids()
    }

    /// How many jobs of this process have not ended.
    pub fn running_jobs(&self) -> usize {
        self.jobs
            .ids()
            .iter()
            .filter(|id| self.jobs.get(id).is_some_and(|j| j.ended().is_none()))
            .count()
    }

    /// Wait until any or all of `ids` have ended, at most `timeout`; their states either way.
    /// Jobs of this process wake the wait when they end; runs of other processes are read.
    pub async fn wait(
        &self,
        ids: &[String],
        mode: WaitMode,
        timeout: Duration,
    ) -> Result<Waited, ApiError> {
        if ids.is_empty() {
            return Err(ApiError::invalid("ids: give at least one run or plan id"));
        }
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.jobs.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let jobs = ids.iter().map(|id| self.status(id)).collect::<Result<Vec<_>, _>>()?;
            let done = jobs.iter().filter(|j| j.is_terminal()).count();
            let satisfied = match mode {
                WaitMode::All => done == jobs.len(),
                WaitMode::Any => done > 0,
            };
            if satisfied || tokio::time::Instant::now() >= deadline {
                return Ok(Waited { timed_out: !satisfied, done, jobs });
            }
            let foreign = jobs.iter().any(|j| !j.is_terminal() && self.jobs.get(j.id()).is_none());
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep(OTHER_PROCESS_POLL), if foreign => {}
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// Answer a tool call waiting for a person: the first answer wins (recorded and audited);
    /// a gate of this process waiting on it hears at once.
    pub async fn answer(
        &self,
        request: &str,
        a: Answer,
        caller: &Caller,
    ) -> Result<PermissionRequestView, ApiError> {
        // Ok(id): decided now; Err((id, run, why, stale)): refused (`stale`: still pending,
        // but its run has ended, its herd gone before expiring it).
        let decided = {
            let mut store = self.engine.store();
            let id = store.resolve_request(request.trim())?;
            let row = store
                .permission_request(&id)?
                .ok_or_else(|| ApiError::not_found(format!("no permission request {request}")))?;
            let run = row.subagent_id.clone();
            let ended = match run.parse::<SubagentId>() {
                Ok(r) => store.get(&r)?.is_none_or(|r| r.status.is_terminal()),
                Err(_) => true,
            };
            if row.status != "pending" {
                let why = match row.status.as_str() {
                    "cancelled" => "was cancelled: its run ended".to_owned(),
                    s => format!("was already decided ({s})"),
                };
                Err((id, run, why, false))
            } else if ended {
                Err((id, run, "belongs to a run that has ended".to_owned(), true))
            } else {
                match store.answer_request(
                    &id,
                    a.allow,
                    a.always,
                    a.reason.as_deref(),
                    &caller.who,
                )? {
                    Answered::Decided => Ok(id),
                    Answered::AlreadyDecided(s) => {
                        Err((id, run, format!("was already decided ({s})"), false))
                    }
                }
            }
        };
        let id = match decided {
            Ok(id) => id,
            Err((id, run, why, stale)) => {
                return Err(self.refuse(&id, &run, &a, caller, &why, stale).await);
            }
        };
        self.engine.answers().announce(&id);
        let row = self.engine.store().permission_request(&id)?;
        row.map(PermissionRequestView::from)
            .ok_or_else(|| ApiError::not_found(format!("no permission request {id}")))
    }

    /// A refused answer: audited (who tried, what), a `stale` request (its run ended without
    /// expiring it) closed as expired; the caller gets the error.
    async fn refuse(
        &self,
        id: &str,
        run: &str,
        a: &Answer,
        caller: &Caller,
        why: &str,
        stale: bool,
    ) -> ApiError {
        let refused = ApiError::precondition(format!("{id} {why}; nothing changed"));
        let writer = self.engine.writer();
        if stale
            && let Err(e) = writer.close_permission_request(id, "expired", "the run ended").await
        {
            return e.into();
        }
        let audited = writer
            .audit(NewAudit {
                event_type: "permission_answer_refused",
                severity: "warn",
                subagent_id: Some(run.to_owned()),
                decision: Some(if a.allow { "allow" } else { "deny" }),
                decided_by: Some(caller.who.clone()),
                details: Some(json!({"request": id, "reason": why})),
                ..Default::default()
            })
            .await;
        match audited {
            Ok(()) => refused,
            Err(e) => e.into(),
        }
    }

    /// Tool calls waiting for a person: of one run, or of every run.
    pub fn pending(&self, run: Option<&str>) -> Result<Vec<PermissionRequestView>, ApiError> {
        let store = self.engine.store();
        let run = run.map(|r| store.resolve(r.trim())).transpose()?;
        Ok(store
            .pending_requests(run.as_ref().map(SubagentId::as_str))?
            .into_iter()
            .map(PermissionRequestView::from)
            .collect())
    }

    /// Every tool call of run `run` (id or unique prefix) that went to a person, whatever
    /// became of it, oldest first.
    pub fn requests(&self, run: &str) -> Result<Vec<PermissionRequestView>, ApiError> {
        let store = self.engine.store();
        let id = store.resolve(run.trim())?;
        Ok(store.requests_of(id.as_str())?.into_iter().map(Into::into).collect())
    }

    /// Stop a run or a plan: the stop ladder (or a kill with `Force`); a queued run ends
    /// `cancelled` without starting. A run of another herd process is asked through the store
    /// and, if its owner does not act within the ladder's time, its process group is signalled
    /// (after an identity check) on the same ladder. Returns the state it ended in.
    pub async fn cancel(
        &self,
        id: &str,
        level: CancelLevel,
        reason: &str,
        caller: &Caller,
    ) -> Result<JobState, ApiError> {
        let id = id.trim();
        let key = if id.starts_with("pln_") { self.plan_id(id)? } else { self.run(id)?.id };
        let stop = match level {
            CancelLevel::Graceful => StopLevel::Graceful,
            CancelLevel::Force => StopLevel::Force,
        };
        if let Some(job) = self.jobs.get(&key) {
            if job.ended().is_none() {
                self.audit_cancel(&key, level, reason, caller).await?;
                job.stop.send_replace(stop);
                let mut done = job.done.clone();
                let _ = tokio::time::timeout(
                    self.stop_ladder() + MARGIN,
                    done.wait_for(Option::is_some),
                )
                .await;
            }
            return self.status(&key);
        }
        if key.starts_with("pln_") {
            return self.cancel_foreign_plan(&key, level, reason, caller).await;
        }
        let sid: SubagentId = key.parse().map_err(|e| ApiError::internal(format!("{e}")))?;
        if !self.engine.store().request_cancel(&sid)? {
            return self.status(&key);
        }
        self.audit_cancel(&key, level, reason, caller).await?;
        self.stop_foreign(&sid, level).await?;
        self.status(&key)
    }

    /// Stop a plan another herd process runs: the plan is recorded as cancelling (its owner
    /// polls for that, stops starting steps and stops what runs; a daemon that takes over
    /// orphaned plans reads the same record), and each running step's run is asked to stop
    /// through the store (with the ladder from here if its owner does not act). Returns once
    /// the plan has ended, or its owner is found dead and it is swept.
    async fn cancel_foreign_plan(
        &self,
        key: &str,
        level: CancelLevel,
        reason: &str,
        caller: &Caller,
    ) -> Result<JobState, ApiError> {
        if !self.engine.store().request_plan_cancel(key)? {
            return self.status(key);
        }
        self.audit_cancel(key, level, reason, caller).await?;
        let running: Vec<SubagentId> = {
            let store = self.engine.store();
            store
                .steps_with_runs(key)?
                .into_iter()
                .filter_map(|(_, run)| run.filter(|r| !r.status.is_terminal()))
                .filter_map(|r| r.id.parse().ok())
                .collect()
        };
        let mut stopping = tokio::task::JoinSet::new();
        for sid in running {
            if !self.engine.store().request_cancel(&sid)? {
                continue;
            }
            let svc = self.clone();
            stopping.spawn(async move { svc.stop_foreign(&sid, level).await });
        }
        while let Some(r) = stopping.join_next().await {
            r.map_err(|e| ApiError::internal(e.to_string()))??;
        }
        // Its owner records the end once its steps have stopped; a dead owner never will.
        let deadline = Instant::now() + self.stop_ladder() + MARGIN;
        loop {
            let plan = self.plan(key)?;
            if plan.is_terminal() {
                break;
            }
            let owner_alive = {
                let store = self.engine.store();
                store.orchestration(key)?.is_some_and(|o| {
                    o.owner_pid.is_some_and(|p| procfs::is_same_process(p, o.owner_start_time))
                })
            };
            if !owner_alive || Instant::now() > deadline {
                crate::sweep_orphans(&mut self.engine.store())?;
                break;
            }
            tokio::time::sleep(OTHER_PROCESS_POLL).await;
        }
        self.status(key)
    }

    async fn audit_cancel(
        &self,
        id: &str,
        level: CancelLevel,
        reason: &str,
        caller: &Caller,
    ) -> Result<(), ApiError> {
        Ok(self
            .engine
            .writer()
            .audit(NewAudit {
                event_type: "cancel_requested",
                severity: "warn",
                subagent_id: (!id.starts_with("pln_")).then(|| id.to_owned()),
                decided_by: Some(caller.who.clone()),
                details: Some(json!({"force": level == CancelLevel::Force, "reason": reason})),
                ..Default::default()
            })
            .await?)
    }

    /// The ladder from outside for a run another process owns: it polls for the request and
    /// stops its agent itself; if it does not within its graceful time (plus its poll and a
    /// margin), SIGTERM the group, then SIGKILL after the grace.
    async fn stop_foreign(&self, id: &SubagentId, level: CancelLevel) -> Result<(), ApiError> {
        let c = self.engine.config().clone();
        let signal_group = |sig: Signal| -> bool {
            let Ok(Some(r)) = self.engine.store().get(id) else { return false };
            match (r.pid, r.pgid) {
                // Only with a recorded start time: a bare pid may have been reused.
                (Some(pid), Some(pgid))
                    if r.process_start_time.is_some()
                        && procfs::is_same_process(pid, r.process_start_time) =>
                {
                    procfs::signal_group(pgid, sig)
                }
                _ => false,
            }
        };
        if level == CancelLevel::Force {
            signal_group(Signal::SIGKILL);
        }
        let start = Instant::now();
        let term_at = c.graceful_stop + c.cancel_poll + Duration::from_secs(1);
        let kill_at = term_at + c.term_grace;
        let mut termed = level == CancelLevel::Force;
        let mut killed = termed;
        loop {
            let ended = self.engine.store().get(id)?.is_none_or(|r| r.status.is_terminal());
            if ended {
                return Ok(());
            }
            let t = start.elapsed();
            if !termed && t > term_at {
                signal_group(Signal::SIGTERM);
                termed = true;
            }
            if !killed && t > kill_at {
                signal_group(Signal::SIGKILL);
                killed = true;
            }
            if t > kill_at + MARGIN {
                // Its owner is gone or stuck: the orphan sweep records what is left.
                crate::sweep_orphans(&mut self.engine.store())?;
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Switch a running run's auto-approve off: its next calls ask a person (audited).
    pub async fn revoke(
        &self,
        id: &str,
        reason: &str,
        caller: &Caller,
    ) -> Result<RunView, ApiError> {
        let reason = reason.trim();
        if reason.chars().count() < 10 {
            return Err(ApiError::invalid(format!(
                "reason {reason:?} is too short: say why in at least 10 characters (it is audited)"
            )));
        }
        let run = self.run(id)?;
        if !self.engine.store().revoke_auto_approve(&run.id, reason)? {
            return Err(ApiError::precondition(format!(
                "{} is not running ({}); nothing to revoke",
                run.id, run.status
            )));
        }
        self.engine
            .writer()
            .audit(NewAudit {
                event_type: "permission_revoke",
                severity: "warn",
                subagent_id: Some(run.id.clone()),
                decided_by: Some(caller.who.clone()),
                details: Some(json!({"reason": reason})),
                ..NewAudit::default()
            })
            .await?;
        self.run(&run.id)
    }

    /// Another user message for a running agent of this process, audited: written to its open
    /// stdin when its current turn ends (claude: a stream-json user message; it gets a turn of
    /// its own, and the run its result). Refused
    /// for a run that has ended or given its final result, a CLI that takes no messages, or a
    /// run another herd process owns (its stdin is there: send through `herd serve`).
    pub async fn send(
        &self,
        id: &str,
        message: &str,
        caller: &Caller,
    ) -> Result<RunView, ApiError> {
        if message.trim().is_empty() {
            return Err(ApiError::field("message", "message: empty; say something"));
        }
        let run = self.run(id)?;
        let sid: SubagentId = run.id.parse().map_err(|e| ApiError::internal(format!("{e}")))?;
        let refused = |why: String| {
            ApiError::precondition(format!("cannot send {} a message: {why}", run.id))
        };
        match self.engine.send_input(&sid, message.to_owned()).await {
            crate::Delivery::Accepted => {}
            crate::Delivery::Refused(why) => return Err(refused(why)),
            crate::Delivery::NotHere if run.is_terminal() => {
                return Err(refused(format!("it has ended ({})", run.status)));
            }
            crate::Delivery::NotHere => {
                let local = self.engine.store().get(&sid)?.and_then(|r| r.owner_pid)
                    == Some(std::process::id());
                return Err(refused(if local {
                    format!(
                        "it is {} and takes no messages ({} holds no open input)",
                        run.status, run.cli
                    )
                } else {
                    "it is run by another herd process, which holds its input; send \
                     through `herd serve` (the daemon) when it runs the task"
                        .to_owned()
                }));
            }
        }
        self.engine
            .writer()
            .audit(NewAudit {
                event_type: "message_sent",
                severity: "info",
                subagent_id: Some(run.id.clone()),
                decided_by: Some(caller.who.clone()),
                details: Some(json!({"bytes": message.len()})),
                ..NewAudit::default()
            })
            .await?;
        self.run(&run.id)
    }

    /// Audit log entries, oldest first.
    pub fn audit(&self, q: &AuditQuery) -> Result<Vec<AuditEntry>, ApiError> {
        let store = self.engine.store();
        let run = q.run.as_deref().map(|r| store.resolve(r.trim())).transpose()?;
        Ok(store.audit(&AuditFilter {
            subagent_id: run.map(|s| s.to_string()),
            since_ms: q.since_ms,
            limit: q.limit,
        })?)
    }

    /// Delete audit entries older than `audit_days` and transcripts of finished runs older
    /// than `transcript_days` (or say what would go, with `dry_run`).
    pub fn gc(
        &self,
        audit_days: u64,
        transcript_days: u64,
        dry_run: bool,
    ) -> Result<GcReport, ApiError> {
        let mut store = self.engine.store();
        let day = 86_400_000i64;
        let audit_rows = store.gc_audit(now_ms() - audit_days as i64 * day, dry_run)?;
        let cutoff = SystemTime::now() - Duration::from_secs(transcript_days * 86_400);
        let (mut files, mut bytes) = (0usize, 0u64);
        let dir = store.paths().transcripts();
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for entry in entries.flatten() {
                let path = entry.path();
                let Some(name) = path.file_name().and_then(|n| n.to_str()) else { continue };
                let Some(id) = name.split('.').next().and_then(|i| i.parse().ok()) else {
                    continue;
                };
                // Only finished runs; a file of a running (or unknown) run is left alone.
                let finished = store.get(&id)?.is_some_and(|r| r.status.is_terminal());
                let Ok(meta) = entry.metadata() else { continue };
                if finished && meta.modified().is_ok_and(|m| m < cutoff) {
                    files += 1;
                    bytes += meta.len();
                    if !dry_run {
                        std::fs::remove_file(&path).map_err(|e| {
                            ApiError::internal(format!("removing {}: {e}", path.display()))
                        })?;
                    }
                }
            }
        }
        Ok(GcReport { dry_run, audit_rows, transcript_files: files, transcript_bytes: bytes })
    }

    /// The worktrees herd created and has not removed (every one with `all`).
    pub fn worktrees(&self, all: bool) -> Result<Vec<WorktreeView>, ApiError> {
        Ok(self.engine.store().worktrees(all)?.into_iter().map(WorktreeView::from).collect())
    }

    /// Remove one worktree — refused while in use or dirty; an unmerged branch is kept.
    pub fn remove_worktree(&self, id: &str) -> Result<String, ApiError> {
        let store = self.engine.store();
        let id = if id.starts_with("wt_") { id.to_owned() } else { format!("wt_{id}") };
        let row = store.worktree(&id)?;
        match teardown::check(&store, &row, false).map_err(|e| ApiError::internal(e.to_string()))? {
            Verdict::Remove { delete_branch, why } => {
                teardown::remove(&store, &row, delete_branch)
                    .map_err(|e| ApiError::internal(e.to_string()))?;
                Ok(format!("removed {} ({why})", row.path))
            }
            Verdict::Refuse { why } => Err(ApiError::precondition(format!(
                "refusing to remove {} ({}): {why}",
                row.id, row.path
            ))),
        }
    }

    /// Remove every worktree whose branch is merged; say why each other one is kept.
    pub fn prune_worktrees(&self, dry_run: bool) -> Result<Vec<Pruned>, ApiError> {
        let store = self.engine.store();
        let mut out = Vec::new();
        for row in store.worktrees(false)? {
            // One worktree git cannot read must not stop the others being checked.
            let verdict = teardown::check(&store, &row, true)
                .unwrap_or_else(|e| Verdict::Refuse { why: format!("cannot check it: {e}") });
            let (result, why) = match verdict {
                Verdict::Remove { why, .. } if dry_run => ("would remove".to_owned(), why),
                Verdict::Remove { delete_branch, why } => {
                    match teardown::remove(&store, &row, delete_branch) {
                        Ok(()) => ("removed".to_owned(), why),
                        Err(e) => (format!("error: {e}"), why),
                    }
                }
                Verdict::Refuse { why } => ("kept".to_owned(), why),
            };
            out.push(Pruned { worktree: row.into(), result, why });
        }
        Ok(out)
    }

    /// Discard a finished run's uncommitted changes — only in a worktree herd created.
    pub fn cleanup_worktree(&self, id: &str) -> Result<WorktreeView, ApiError> {
        let run = self.run(id)?;
        if !run.is_terminal() {
            return Err(ApiError::precondition(format!(
                "{} is still {}; not cleaning its worktree",
                run.id, run.status
            )));
        }
        let store = self.engine.store();
        let target = run.worktree.as_ref().map_or(run.cwd.clone(), |w| w.path.clone());
        let w = teardown::cleanup(&store, std::path::Path::new(&target))
            .map_err(|e| ApiError::precondition(e.to_string()))?;
        Ok(w.into())
    }

    /// The SQLite library's version (`herd doctor`).
    pub fn store_version() -> &'static str {
        Store::sqlite_version()
    }
}

/// A plan id that resolves to nothing, or to several plans.
fn plan_error(e: herd_store::StoreError) -> ApiError {
    match e {
        herd_store::StoreError::NotFound(p) => {
            ApiError::not_found(format!("no plan matches {p:?}"))
        }
        other => other.into(),
    }
}

/// What each step of a stored plan (its JSON text) declares it produces, by step position.
fn declared_outputs(plan: Option<&str>) -> Vec<Vec<String>> {
    let Some(v) = plan.and_then(|p| serde_json::from_str::<serde_json::Value>(p).ok()) else {
        return Vec::new();
    };
    v["steps"]
        .as_array()
        .map(|steps| {
            steps
                .iter()
                .map(|s| {
                    s["fields"]["outputs"]
                        .as_array()
                        .map(|o| o.iter().filter_map(|p| p.as_str().map(str::to_owned)).collect())
                        .unwrap_or_default()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// One run's view: its row, its worktree, and its pending requests while it is active.
fn view(store: &Store, id: &SubagentId) -> Result<RunView, ApiError> {
    let row = store.get(id)?.ok_or_else(|| ApiError::not_found(format!("no run {id}")))?;
    let status = row.status;
    let mut v = RunView::of(row, store.paths().transcript(id));
    v.worktree = store.worktree_of(id.as_str())?.map(WorktreeView::from);
    if !status.is_terminal() && status != Status::Pending {
        v.pending_permissions =
            store.pending_requests(Some(id.as_str()))?.into_iter().map(Into::into).collect();
    }
    Ok(v)
}
