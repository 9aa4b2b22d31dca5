//! `herd worker` and plans submitted to workers: submit a plan to the shared store's queue,
//! and serve that queue — claim ready steps, run each as a task here, renew leases, drain.
//!
//! A worker sleeps in `LISTEN herd_steps` (a thread of its own forwards notifications) and
//! wakes on a notification, a run's end, or its heartbeat, whichever comes first. Each step's
//! run is started by this process's guards, so a worker killed with `kill -9` leaves no agent
//! behind; its leases expire and another worker (any of them sweeps) re-queues its steps.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use herd_core::plan::Plan;
use herd_core::workspace::WorkspaceMode;
use herd_core::{Status, SubagentId};
use herd_store::{Claim, QueuedStep, Store};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

use super::api::{Caller, PlanSource, PlanSpec};
use super::worker_repo::{QueuedRepo, push_step};
use super::{ApiError, Service};
use crate::StopLevel;
use crate::workspace::remote::submission_repo;

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// This worker's id (`wrk_…` on `host`).
    pub id: String,
    pub host: String,
    /// Steps it runs at once.
    pub max_concurrent: usize,
    /// Labels it has (a step may require some).
    pub labels: Vec<String>,
    /// How long a lease lasts without renewal; renewed every third of it.
    pub lease: Duration,
    /// Exit once no step is ready for it and none of its own runs (`herd worker --drain`).
    pub exit_when_idle: bool,
    /// Where its clones of plans' repositories go (isolated steps work in them).
    pub clones: PathBuf,
}

/// What a worker did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct WorkerSummary {
    pub id: String,
    pub ran: usize,
    pub completed: usize,
    pub failed: usize,
    /// Steps whose lease it lost before it finished (their results were not recorded).
    pub lost: usize,
}

impl Service {
    /// Validate plan `spec` as `herd run` would, then store it for workers: returns its id.
    pub async fn submit_plan(&self, caller: &Caller, spec: PlanSpec) -> Result<String, ApiError> {
        let text = match &spec.source {
            PlanSource::Text { text, .. } => text.clone(),
            PlanSource::File(p) => {
                let path = caller.path(p, "plan")?;
                std::fs::read_to_string(&path)
                    .map_err(|e| ApiError::invalid(format!("plan {}: {e}", path.display())))?
            }
        };
        let loaded = self.load_plan(caller, &spec)?;
        let plan = &loaded.plan;
        let id = format!("pln_{}", SubagentId::generate());
        // Isolated steps work in the workers' clones of one repository, and merge there.
        let first_isolated = plan
            .steps
            .iter()
            .position(|s| s.workspace() == herd_core::workspace::WorkspaceMode::Isolated);
        let repo = match first_isolated {
            Some(i) => {
                let dir = loaded.requests[i].cwd.clone();
                let (url, into) = (plan.repo.clone(), spec.into.clone().or(plan.into.clone()));
                let pid = id.clone();
                let r = tokio::task::spawn_blocking(move || {
                    submission_repo(&dir, url.as_deref(), &pid, into.as_deref())
                })
                .await
                .map_err(|e| ApiError::internal(e.to_string()))?;
                Some(r.map_err(|e| ApiError::invalid(e.to_string()))?)
            }
            None => None,
        };
        let queued: Vec<QueuedStep> = plan
            .steps
            .iter()
            .map(|s| QueuedStep {
                retries: s.fields.retries.unwrap_or(0),
                labels: s.fields.labels.clone().unwrap_or_default(),
            })
            .collect();
        let session = self.engine.session_of(&crate::RunCaller::of(caller))?;
        let o = crate::plan::record::new_orchestration(
            &id,
            plan,
            &loaded.requests,
            session,
            loaded.source_file.clone(),
            self.engine.owner(),
        );
        self.engine.store().submit_orchestration(&o, &text, &queued, repo.as_ref())?;
        Ok(id)
    }

    /// Serve the queue until `drain` turns true and the steps under way have ended.
    pub async fn work(
        &self,
        caller: &Caller,
        opts: WorkerOptions,
        mut drain: watch::Receiver<bool>,
    ) -> Result<WorkerSummary, ApiError> {
        let lease_ms = opts.lease.as_millis() as i64;
        let beat = opts.lease / 3;
        self.engine.store().register_worker(
            &opts.id,
            &opts.host,
            &opts.labels,
            opts.max_concurrent as u32,
        )?;
        // Merges take a plan's merge lock on a connection of their own, held across git.
        let merge_store = Arc::new(Mutex::new(Store::open(self.engine.paths().clone())?));
        let mut merging: JoinSet<(String, Result<(), String>)> = JoinSet::new();
        let (mut merging_plans, mut merge_again) = (HashSet::new(), HashSet::new());
        let woken = Arc::new(Notify::new());
        let stop_listening = Arc::new(std::sync::atomic::AtomicBool::new(false));
        listen(self.engine.paths().clone(), Arc::clone(&woken), Arc::clone(&stop_listening))?;
        let mut plans: HashMap<String, Arc<Loaded>> = HashMap::new();
        let mut running: JoinSet<(Claim, Result<Outcome, String>)> = JoinSet::new();
        // The stop of each run, by step: a lost lease stops it.
        let mut stops: HashMap<(String, String), watch::Sender<StopLevel>> = HashMap::new();
        let mut summary = WorkerSummary { id: opts.id.clone(), ..Default::default() };
        let mut next_beat = tokio::time::Instant::now();
        let mut drain_now = false;
        // Ends of steps not yet recorded (the database was unreachable): tried again.
        let mut ends: Vec<(Claim, End)> = Vec::new();
        // While the database fails: when to try again (a worker outlives an outage; its
        // leases may expire meanwhile, and then its steps are another worker's).
        let mut retry_at: Option<tokio::time::Instant> = None;
        let trouble = |what: &str, e: &dyn std::fmt::Display| {
            eprintln!("herd worker: {what}: {e} (trying again in {}s)", RETRY.as_secs());
            Some(tokio::time::Instant::now() + RETRY)
        };
        loop {
            let draining = *drain.borrow() || drain_now;
            let mut failing = false;
            let mut kept = Vec::new();
            for (claim, end) in std::mem::take(&mut ends) {
                match self.record_end(&claim, &end, &mut summary) {
                    Ok(()) => {}
                    Err(e) => {
                        retry_at = trouble(&format!("recording step {}", claim.key), &e);
                        failing = true;
                        kept.push((claim, end));
                    }
                }
            }
            ends = kept;
            if tokio::time::Instant::now() >= next_beat {
                next_beat = tokio::time::Instant::now() + beat;
                let status = if draining { "draining" } else { "active" };
                match self.beat(&opts, running.len(), status, lease_ms) {
                    Ok((held, waiting)) => {
                        // A run whose lease was lost (this worker was cut off too long) stops.
                        stops.retain(|(o, k), tx| {
                            let kept = held.iter().any(|c| &c.orch == o && &c.key == k);
                            if !kept {
                                let _ = tx.send(StopLevel::Graceful);
                            }
                            kept
                        });
                        // Steps waiting for a merge whose merger died, or whose turn came
                        // while no worker was merging that plan.
                        for orch in waiting {
                            if let Ok(l) = self.loaded(caller, &mut plans, &orch, &opts) {
                                merge_again.insert(orch.clone());
                                spawn_merge(
                                    &mut merging,
                                    &mut merging_plans,
                                    &l,
                                    &merge_store,
                                    &orch,
                                );
                            }
                        }
                    }
                    Err(e) => {
                        retry_at = trouble("heartbeat", &e);
                        next_beat = tokio::time::Instant::now() + RETRY;
                        failing = true;
                    }
                }
            }
            while !draining && !failing && running.len() < opts.max_concurrent {
                let run_id = SubagentId::generate();
                let claim = match self.engine.store().claim_step(
                    &opts.id,
                    &opts.labels,
                    lease_ms,
                    run_id.as_str(),
                ) {
                    Ok(c) => c,
                    Err(e) => {
                        retry_at = trouble("claiming a step", &e);
                        break;
                    }
                };
                let Some(claim) = claim else {
                    if opts.exit_when_idle && running.is_empty() && ends.is_empty() {
                        drain_now = true;
                    }
                    break;
                };
                let loaded = match self.loaded(caller, &mut plans, &claim.orch, &opts) {
                    Ok(l) => l,
                    Err(e) => {
                        // A plan this worker cannot load fails its step (attempts count).
                        let why = format!("this worker cannot load plan {}: {e}", claim.orch);
                        ends.push((claim, End::Finish("failed".into(), Some(why))));
                        continue;
                    }
                };
                let (stop_tx, stop_rx) = watch::channel(StopLevel::None);
                stops.insert((claim.orch.clone(), claim.key.clone()), stop_tx);
                summary.ran += 1;
                let engine = Arc::clone(&self.engine);
                running.spawn(async move {
                    let out = run_claim(&engine, &loaded, &claim, run_id, stop_rx).await;
                    (claim, out)
                });
            }
            if (draining || drain_now)
                && running.is_empty()
                && merging.is_empty()
                && ends.is_empty()
            {
                break;
            }
            if !ends.is_empty() && retry_at.is_none() {
                // Recorded on the next turn, at once.
                continue;
            }
            tokio::select! {
                _ = woken.notified() => {}
                _ = tokio::time::sleep_until(retry_at.unwrap_or(next_beat)), if retry_at.is_some() => {
                    retry_at = None;
                }
                _ = tokio::time::sleep_until(next_beat) => {}
                changed = drain.changed(), if !draining => {
                    if changed.is_err() {
                        // The sender is gone: nothing can ask to drain any more; keep serving.
                        std::future::pending::<()>().await;
                    }
                }
                merged = merging.join_next(), if !merging.is_empty() => {
                    let Some(merged) = merged else { continue };
                    let (orch, out) = merged.map_err(|e| ApiError::internal(e.to_string()))?;
                    merging_plans.remove(&orch);
                    if let Err(e) = out {
                        eprintln!("herd worker: the merge gate of plan {orch}: {e}");
                    }
                    // Asked again while it ran: another step may have come to wait.
                    if merge_again.remove(&orch) && let Some(l) = plans.get(&orch) {
                        let l = Arc::clone(l);
                        spawn_merge(&mut merging, &mut merging_plans, &l, &merge_store, &orch);
                    }
                }
                joined = running.join_next(), if !running.is_empty() => {
                    let Some(joined) = joined else { continue };
                    let (claim, out) = joined.map_err(|e| ApiError::internal(e.to_string()))?;
                    stops.remove(&(claim.orch.clone(), claim.key.clone()));
                    // A plan with a repository: any step's end may let a waiting one merge.
                    if let Some(l) = plans.get(&claim.orch).filter(|l| l.repo.is_some()) {
                        let l = Arc::clone(l);
                        merge_again.insert(claim.orch.clone());
                        spawn_merge(&mut merging, &mut merging_plans, &l, &merge_store, &claim.orch);
                    }
                    let end = match out {
                        Ok(Outcome::Ended(s, r)) => {
                            let status = match s {
                                Status::Completed => "completed",
                                Status::Cancelled => "cancelled",
                                _ => "failed",
                            };
                            End::Finish(status.into(), r)
                        }
                        Ok(Outcome::AwaitMerge { branch, head }) => End::AwaitMerge { branch, head },
                        Err(e) => End::Finish("failed".into(), Some(e)),
                    };
                    ends.push((claim, end));
                }
            }
        }
        stop_listening.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = self.engine.store().heartbeat(&opts.id, 0, "stopped", lease_ms);
        Ok(summary)
    }

    /// Record how claimed step `c` ended (only while this worker still holds it).
    fn record_end(
        &self,
        c: &Claim,
        end: &End,
        summary: &mut WorkerSummary,
    ) -> Result<(), ApiError> {
        let store = self.engine.store();
        let (held, done) = match end {
            End::AwaitMerge { branch, head } => (store.await_merge(c, branch, head)?, true),
            End::Finish(status, reason) => {
                (store.finish_claim(c, status, reason.as_deref())?, status == "completed")
            }
        };
        match (held, done) {
            (false, _) => summary.lost += 1,
            (true, true) => summary.completed += 1,
            (true, false) => summary.failed += 1,
        }
        Ok(())
    }

    /// The heartbeat: this worker's row, its leases renewed (the claims it still holds), the
    /// expired leases of others taken back, and the plans with a step waiting for its merge.
    fn beat(
        &self,
        opts: &WorkerOptions,
        running: usize,
        status: &str,
        lease_ms: i64,
    ) -> Result<(Vec<Claim>, Vec<String>), ApiError> {
        let store = self.engine.store();
        let held = store.heartbeat(&opts.id, running as u32, status, lease_ms)?;
        store.requeue_expired()?;
        Ok((held, store.plans_awaiting_merge()?))
    }

    /// A plan submitted to workers, as stored: the plan, then its steps in order.
    pub fn queued_plan(
        &self,
        id: &str,
    ) -> Result<(herd_store::OrchestrationRow, Vec<herd_store::StepRow>), ApiError> {
        let store = self.engine.store();
        let o =
            store.orchestration(id)?.ok_or_else(|| ApiError::not_found(format!("no plan {id}")))?;
        let steps = store.steps(id)?;
        Ok((o, steps))
    }

    /// Where queued plan `id`'s isolated steps are merged: its repository and integration
    /// branch, when it has isolated steps.
    pub fn queued_repo(&self, id: &str) -> Result<Option<herd_store::PlanRepo>, ApiError> {
        Ok(self.engine.store().plan_repo(id)?)
    }

    /// The workers registered in this service's store.
    pub fn workers(&self) -> Result<Vec<herd_store::WorkerRow>, ApiError> {
        Ok(self.engine.store().workers()?)
    }

    /// Whether this service's store is shared through PostgreSQL (plans then go to workers).
    pub fn store_is_shared(&self) -> bool {
        self.engine.store().is_postgres()
    }

    /// Queued plan `orch` as this worker runs it, loaded on first use.
    fn loaded(
        &self,
        caller: &Caller,
        plans: &mut HashMap<String, Arc<Loaded>>,
        orch: &str,
        opts: &WorkerOptions,
    ) -> Result<Arc<Loaded>, ApiError> {
        if let Some(l) = plans.get(orch) {
            return Ok(Arc::clone(l));
        }
        let l = Arc::new(self.load_queued(caller, orch, opts)?);
        plans.insert(orch.to_owned(), Arc::clone(&l));
        Ok(l)
    }

    /// A queued plan, loaded again in this worker's project from the text it was submitted as.
    fn load_queued(
        &self,
        caller: &Caller,
        orch: &str,
        opts: &WorkerOptions,
    ) -> Result<Loaded, ApiError> {
        let text = self
            .engine
            .store()
            .plan_text(orch)?
            .ok_or_else(|| ApiError::not_found(format!("plan {orch} has no stored text")))?;
        let spec = PlanSpec {
            source: PlanSource::Text { name: orch.to_owned(), text },
            max_concurrent: None,
            into: None,
            // A worker has nobody to ask: calls no rule decides are refused.
            non_interactive: true,
        };
        let l = self.load_plan(caller, &spec)?;
        let repo = self
            .engine
            .store()
            .plan_repo(orch)?
            .map(|r| QueuedRepo::new(r, opts.clones.clone(), &l.plan));
        Ok(Loaded { plan: l.plan, requests: l.requests, repo })
    }
}

/// A queued plan as this worker runs it.
struct Loaded {
    plan: Plan,
    requests: Vec<crate::TaskRequest>,
    /// Its repository, when it has isolated steps.
    repo: Option<QueuedRepo>,
}

/// How long a worker waits before it tries the database again after a failure.
const RETRY: Duration = Duration::from_secs(1);

/// A claimed step's end, to record.
enum End {
    /// `completed`, `failed` or `cancelled`, and why it failed.
    Finish(String, Option<String>),
    /// Its branch was pushed: it waits for its merge.
    AwaitMerge { branch: String, head: String },
}

/// How a claimed step's run ended here.
enum Outcome {
    /// With this status, and why it failed.
    Ended(Status, Option<String>),
    /// Its agent finished and its branch was pushed: it waits for its merge.
    AwaitMerge { branch: String, head: String },
}

/// Run plan `orch`'s merge gate on a task of its own, unless one runs already (it is then
/// asked again when that one ends, through `merge_again`).
fn spawn_merge(
    merging: &mut JoinSet<(String, Result<(), String>)>,
    merging_plans: &mut HashSet<String>,
    loaded: &Arc<Loaded>,
    store: &Arc<Mutex<Store>>,
    orch: &str,
) {
    if loaded.repo.is_none() || !merging_plans.insert(orch.to_owned()) {
        return;
    }
    let (loaded, store, orch) = (Arc::clone(loaded), Arc::clone(store), orch.to_owned());
    merging.spawn(async move {
        let out = match &loaded.repo {
            Some(r) => r.merge_waiting(store, &orch).await,
            None => Ok(()),
        };
        (orch, out)
    });
}

/// Run claimed step `c` as run `id`: how it ended; an isolated step's branch is pushed.
async fn run_claim(
    engine: &Arc<crate::Engine>,
    loaded: &Loaded,
    c: &Claim,
    id: SubagentId,
    stop: watch::Receiver<StopLevel>,
) -> Result<Outcome, String> {
    let step = loaded
        .plan
        .steps
        .iter()
        .position(|s| s.id == c.key)
        .ok_or_else(|| format!("step {} is not in the plan as this worker loads it", c.key))?;
    let results: HashMap<String, String> =
        engine.store().step_results(&c.orch).map_err(|e| e.to_string())?.into_iter().collect();
    let mut req =
        crate::plan::queued_step_request(&loaded.plan, step, &loaded.requests[step], &results);
    let isolated = loaded.plan.steps[step].workspace() == WorkspaceMode::Isolated;
    if isolated {
        let repo = loaded.repo.as_ref().ok_or_else(|| {
            format!("step {} is isolated, and plan {} names no repository", c.key, c.orch)
        })?;
        repo.isolate(&loaded.plan, &c.orch, step, c.attempt, &mut req).await?;
    }
    engine.create_run(&id, &req).await.map_err(|e| e.to_string())?;
    if !engine.store().claimed_run(c, id.as_str()).map_err(|e| e.to_string())? {
        return Err("lease_lost".into());
    }
    let pushed = isolated.then(|| req.clone());
    let report = engine.start_run(id, req, stop, None).await.map_err(|e| e.to_string())?;
    match (report.status, pushed) {
        (Status::WaitingForMerge, Some(req)) => {
            let (branch, head) = push_step(&req).await?;
            Ok(Outcome::AwaitMerge { branch, head })
        }
        (status, _) => Ok(Outcome::Ended(status, report.failure.map(|f| f.to_string()))),
    }
}

/// A thread listening for `NOTIFY herd_steps` on a connection of its own, waking the worker.
fn listen(
    paths: herd_store::StatePaths,
    woken: Arc<Notify>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> Result<(), ApiError> {
    let store = Store::open(paths)?;
    store.listen_steps()?;
    std::thread::Builder::new()
        .name("herd-worker-listen".into())
        .spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if store.wait_notification(Duration::from_millis(500)) {
                    woken.notify_one();
                }
            }
        })
        .map_err(|e| ApiError::internal(format!("cannot start the listener: {e}")))?;
    Ok(())
}
