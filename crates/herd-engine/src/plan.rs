//! Running a validated plan: the pure scheduler decides, this module acts — persists the plan
//! and its steps, starts subagents with their dependencies' results as context, rolls up cost.

use std::collections::HashMap;
use std::sync::Arc;

use herd_core::plan::Plan;
use herd_core::scheduler::{Action, Scheduler};
use herd_core::workspace::{WorkspaceMode, merge_order};
use herd_core::{Status, SubagentId, Usage};
use herd_store::StepChange;
use serde::Serialize;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use crate::workspace::{IsolatedSpec, WorkspaceReq};

pub(crate) mod contract;
mod isolation;
pub(crate) mod record;
mod request;
use crate::run::{Ahead, Ended};
use crate::slots::Slots;
use crate::{Engine, EngineError, StopLevel, TaskReport};
pub(crate) use isolation::attempt_spec;
use isolation::{Isolation, isolated_spec};
use request::{step_parts, step_request};

/// All dependencies' results together are capped at this many bytes in a step's prompt.
pub const DEFAULT_SUMMARY_CAP: usize = 16 * 1024;
/// Default pool bound.
pub const DEFAULT_MAX_CONCURRENT: usize = 5;
/// Default bound of the queue of ready steps waiting for a slot.
pub const DEFAULT_MAX_QUEUE: usize = 10_000;
/// Default number of children one parent may have running at once.
pub const DEFAULT_MAX_PER_PARENT: usize = 20;

/// How to run a plan.
#[derive(Debug)]
pub struct PlanOptions {
    /// Overrides `limits.max_concurrent`.
    pub max_concurrent: Option<usize>,
    pub source_file: Option<String>,
    pub summary_cap: usize,
    /// Each step's request, resolved like a task's (agent, context, limits, permissions); its
    /// prompt gets the dependencies' results when the step starts.
    pub requests: Vec<crate::TaskRequest>,
    /// The plan's id (`pln_…`), known to the caller before the plan ends; generated otherwise.
    pub id: Option<String>,
    /// Merge isolated steps into this branch (overrides the plan's `into`).
    pub into: Option<String>,
    /// A process pool shared with other work (the service's): each step's agent also takes one
    /// of its places, on top of the plan's own bound.
    pub pool: Option<Arc<tokio::sync::Semaphore>>,
    /// Other work may wait for a lock while holding a place in `pool` (the pool is shared with
    /// other callers): steps must then not register in their directory ahead of their place.
    pub pool_shared: bool,
    /// The project's `max_per_parent`, under the plan's own.
    pub max_per_parent: Option<u32>,
    /// Told once the plan and its steps are stored (dropped unsent if it fails before).
    pub stored: Option<tokio::sync::oneshot::Sender<()>>,
    /// A resumed plan (already stored, reopened): its steps that completed before.
    pub resume: Option<Resume>,
}

/// What an earlier run of a plan completed: those steps are not run again, their results feed
/// their dependents and their cost counts.
#[derive(Debug, Clone, Default)]
pub struct Resume {
    /// By step id.
    pub done: HashMap<String, PriorStep>,
    /// The attempts the other steps already made, by step id: their attempts now count on
    /// from there (an isolated attempt's worktree and branch are named by its number, and the
    /// earlier ones stay for a person).
    pub tried: HashMap<String, u32>,
}

/// A step completed by an earlier run of its plan.
#[derive(Debug, Clone, Default)]
pub struct PriorStep {
    pub subagent_id: String,
    pub result: String,
    pub cost_usd: f64,
    pub usage: Usage,
    pub attempts: u32,
}

/// What happened to one step.
#[derive(Debug, Clone, Serialize)]
pub struct StepOutcome {
    pub id: String,
    pub status: String,
    pub failure_reason: Option<String>,
    pub subagent_id: Option<String>,
    pub attempts: u32,
    pub cost_usd: Option<f64>,
    pub duration_ms: Option<u64>,
    pub usage: Usage,
    /// The files it declares it produces (`outputs`), where they are.
    pub outputs: Vec<std::path::PathBuf>,
}

/// How many of `plan`'s steps run at once: `max_concurrent` (a flag), else the plan's
/// `limits.max_concurrent`, else the default; 1-20, and at most `limits.max_per_parent`, else
/// `per_parent` (the project's config), else the default.
pub(crate) fn plan_bound(
    plan: &Plan,
    max_concurrent: Option<usize>,
    per_parent: Option<u32>,
) -> usize {
    let per_parent = plan.limits.max_per_parent.or(per_parent);
    max_concurrent
        .or(plan.limits.max_concurrent.map(|n| n as usize))
        .unwrap_or(DEFAULT_MAX_CONCURRENT)
        .clamp(1, 20)
        .min(per_parent.map_or(DEFAULT_MAX_PER_PARENT, |p| p.max(1) as usize))
}

/// How many pools' worth of steps are created ahead of a place. A run created ahead commits
/// with the writer's next batch (up to its 4 ms window), not in a commit of its own; it waits
/// for that commit (asking the writer to hurry) only if it gets a place first. With one pool
/// ahead, short runs got their place before their batch committed nearly every time (measured
/// with the dispatch benchmark: a commit per run again). With five, about 20 times in 2000
/// runs, each a stall of the whole pool while the writer finished a batch or a checkpoint;
/// with ten, never past the plan's start (and 3% faster); more gained nothing. A plan stopped
/// early records these runs as cancelled.
const AHEAD: usize = 10;

/// Steps that have ended, and of those the failed ones (counted as they settle, not by a walk
/// over every step on each turn of the loop).
#[derive(Debug, Default)]
struct Tally {
    done: usize,
    failed: usize,
}

impl Tally {
    /// Record `o`'s final status.
    fn settle(&mut self, o: &mut StepOutcome, status: String, reason: Option<String>) {
        let was_done = !matches!(o.status.as_str(), "pending" | "running");
        self.done += usize::from(!was_done);
        self.failed -= usize::from(o.status == "failed");
        self.failed += usize::from(status == "failed");
        o.status = status;
        o.failure_reason = reason;
    }
}

/// How a plan run ended.
#[derive(Debug, Clone, Serialize)]
pub struct PlanReport {
    pub id: String,
    pub status: String,
    pub steps: Vec<StepOutcome>,
    pub cost_usd: f64,
    pub usage: Usage,
    /// Where isolated steps were merged, when the plan has any.
    pub integration_branch: Option<String>,
    /// Things that went wrong without failing the plan (a worktree left behind).
    pub warnings: Vec<String>,
}

/// Live updates for a progress display.
#[derive(Debug, Clone)]
pub enum PlanUpdate {
    Started { step: String, subagent: SubagentId, attempt: u32 },
    Finished { step: String, status: String, reason: Option<String> },
    Counts { running: usize, queued: usize, done: usize, failed: usize, total: usize },
}

struct Done {
    step: usize,
    /// The report, and the commit of the run's last write (shown only once that is stored).
    report: Result<(TaskReport, Ended), EngineError>,
}

impl Engine {
    /// Run `plan` to the end. Every step ends `completed`, `failed` (with a reason such as
    /// `dependency_failed(x)`), or `cancelled`.
    pub async fn run_plan(
        self: &Arc<Self>,
        plan: &Plan,
        mut opts: PlanOptions,
        mut stop: watch::Receiver<StopLevel>,
        updates: Option<mpsc::UnboundedSender<PlanUpdate>>,
    ) -> Result<PlanReport, EngineError> {
        if let Some(r) = opts.requests.first() {
            r.caller.check_depth()?;
        }
        if opts.requests.len() != plan.steps.len() {
            return Err(EngineError::Task("a plan's requests do not match its steps".into()));
        }
        let plan_id = opts.id.clone().unwrap_or_else(|| format!("pln_{}", SubagentId::generate()));
        let bound = plan_bound(plan, opts.max_concurrent, opts.max_per_parent);
        let iso = self.plan_isolation(plan, &opts, &plan_id).await?;
        let w = self.writer();
        // A resumed plan is stored already (and reopened by its caller).
        if opts.resume.is_none() {
            let session = match opts.requests.first() {
                Some(r) => self.session_of(&r.caller)?,
                None => self.session_of(&crate::RunCaller::default())?,
            };
            let o = record::new_orchestration(
                &plan_id,
                plan,
                &opts.requests,
                session,
                opts.source_file.clone(),
                self.owner(),
            );
            w.create_orchestration(o).await?;
        }
        w.finish_orchestration(&plan_id, "running", herd_store::PlanTotals::default()).await?;
        if let Some(stored) = opts.stored.take() {
            let _ = stored.send(());
        }

        let mut running: JoinSet<Done> = JoinSet::new();
        // What the plan's runs obey: the caller's stop, or a stop asked for through the store.
        let (own_stop, _) = watch::channel(StopLevel::None);
        let outcome = self
            .drive(
                plan,
                &plan_id,
                &opts,
                bound,
                &mut running,
                (&mut stop, &own_stop),
                updates.as_ref(),
                iso.as_ref(),
            )
            .await;
        // On an error, stop what still runs before reporting it.
        running.shutdown().await;
        let mut outcome = outcome;
        if let Some((iso, _)) = &iso
            && let Some(w) = self.close_isolation(iso).await?
            && let Ok(r) = &mut outcome
        {
            r.warnings.push(w);
        }
        outcome
    }

    #[allow(clippy::too_many_arguments)]
    async fn drive(
        self: &Arc<Self>,
        plan: &Plan,
        plan_id: &str,
        opts: &PlanOptions,
        bound: usize,
        running: &mut JoinSet<Done>,
        (stop, own_stop): (&mut watch::Receiver<StopLevel>, &watch::Sender<StopLevel>),
        updates: Option<&mpsc::UnboundedSender<PlanUpdate>>,
        iso: Option<&Isolation>,
    ) -> Result<PlanReport, EngineError> {
        let plan_id = plan_id.to_owned();
        let isolated: Vec<bool> =
            plan.steps.iter().map(|s| s.workspace() == WorkspaceMode::Isolated).collect();
        // The merge gate: isolated steps merge in plan order (dependencies first), each once
        // every isolated step before it has merged or failed.
        let merge_seq: Vec<usize> =
            merge_order(&plan.steps.iter().map(|s| s.deps.clone()).collect::<Vec<_>>())
                .into_iter()
                .filter(|&i| isolated[i])
                .collect();
        let mut cursor = 0usize;
        let mut specs: Vec<Option<IsolatedSpec>> = vec![None; plan.steps.len()];
        let mut awaiting: Vec<Option<(SubagentId, String)>> = vec![None; plan.steps.len()];
        let mut resolved = vec![false; plan.steps.len()];
        let n = plan.steps.len();
        let mut results: HashMap<usize, String> = HashMap::new();
        let deps: Vec<Vec<usize>> = plan.steps.iter().map(|s| s.deps.clone()).collect();
        let retries: Vec<u32> = plan.steps.iter().map(|s| s.fields.retries.unwrap_or(0)).collect();
        // The pool bounds agent processes (`slots`); the scheduler runs up to `AHEAD` times as
        // many steps again ahead of them, so a step's records are written (in the writer's
        // batches, see `AHEAD`) while others' agents run, not while a slot stands empty. Not
        // with a budget: a step starts only once the cost of those before it is known.
        let slots = Arc::new(Slots::new(bound, opts.pool.clone()));
        let ahead = if plan.limits.budget_usd.is_some() { 0 } else { bound * AHEAD };
        let mut sched = Scheduler::new(&deps, &retries, bound + ahead);
        // Unlocked steps register in their directory as they are created (one write, ahead of
        // their place) only where no one can wait for a lock while holding a place this plan
        // needs: no step here takes a lock, and the pool is the plan's own.
        let register_ahead =
            !opts.pool_shared && plan.steps.iter().all(|s| s.workspace() != WorkspaceMode::Locked);
        let mut outcomes: Vec<StepOutcome> = plan
            .steps
            .iter()
            .zip(&opts.requests)
            .map(|(s, req)| StepOutcome {
                id: s.id.clone(),
                status: "pending".into(),
                failure_reason: None,
                subagent_id: None,
                attempts: 0,
                cost_usd: None,
                duration_ms: None,
                usage: Usage::default(),
                outputs: s.fields.outputs.iter().flatten().map(|o| req.cwd.join(o)).collect(),
            })
            .collect();
        let (mut cost, mut usage) = (0.0f64, Usage::default());
        let mut cancelled = false;
        let mut tally = Tally::default();
        // Step changes queued on the writer, each with what to show once it is committed.
        let mut commits: JoinSet<Result<Option<PlanUpdate>, EngineError>> = JoinSet::new();
        let send = |u: PlanUpdate| {
            if let Some(tx) = updates {
                let _ = tx.send(u);
            }
        };
        let mut actions = sched.start();
        let mut stop_open = true;
        let poll = self.config().cancel_poll;
        let mut cancel_poll = tokio::time::interval_at(tokio::time::Instant::now() + poll, poll);
        cancel_poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            for action in std::mem::take(&mut actions) {
                match action {
                    Action::Start { step, attempt } => {
                        let s = &plan.steps[step];
                        // Completed by an earlier run of this plan: done without running.
                        if let Some(prior) = opts.resume.as_ref().and_then(|r| r.done.get(&s.id)) {
                            results.insert(step, prior.result.clone());
                            cost += prior.cost_usd;
                            usage.add(&prior.usage);
                            let o = &mut outcomes[step];
                            o.subagent_id = Some(prior.subagent_id.clone());
                            o.attempts = prior.attempts;
                            o.cost_usd = Some(prior.cost_usd);
                            o.usage = prior.usage;
                            tally.settle(o, "completed".into(), None);
                            resolved[step] = true;
                            actions.extend(sched.on_finished(step, true));
                            continue;
                        }
                        let tried = opts.resume.as_ref().and_then(|r| r.tried.get(&s.id));
                        let attempt = attempt + tried.copied().unwrap_or(0);
                        let parts = step_parts(plan, step, &results, opts.summary_cap);
                        let mut req = step_request(s, &opts.requests[step], parts);
                        req.plan_step = Some((plan_id.clone(), s.id.clone()));
                        if let Some((iso, bases)) = iso.filter(|_| isolated[step]) {
                            let spec =
                                isolated_spec(iso, bases, plan, step, attempt, &isolated, &req)?;
                            req.cwd = iso.cwd_in(&spec, &req.cwd);
                            req.workspace = WorkspaceReq::Isolated(Box::new(spec.clone()));
                            specs[step] = Some(spec);
                        }
                        let id = SubagentId::generate();
                        outcomes[step].attempts = attempt;
                        outcomes[step].subagent_id = Some(id.to_string());
                        let change = StepChange {
                            subagent: Some(id.to_string()),
                            attempt: Some(attempt),
                            ..StepChange::new(&plan_id, &s.id, "running", None)
                        };
                        let started = updates.cloned().map(|tx| {
                            (
                                tx,
                                PlanUpdate::Started {
                                    step: s.id.clone(),
                                    subagent: id.clone(),
                                    attempt,
                                },
                            )
                        });
                        let engine = Arc::clone(self);
                        let stop = own_stop.subscribe();
                        let slots = slots.clone();
                        // Persisting the run is the task's first act (queued, not waited for),
                        // so the loop goes on to the next step at once; the step is shown
                        // started once it is stored.
                        running.spawn(async move {
                            let created =
                                engine.persist_run(&id, &req, Some(change), register_ahead).await;
                            let report = match created {
                                Ok(created) => {
                                    let on_stored = Box::new(move || {
                                        if let Some((tx, u)) = started {
                                            let _ = tx.send(u);
                                        }
                                    });
                                    let ahead = Ahead { slots: &slots, created, on_stored };
                                    engine.launch(id, req, stop, None, Some(ahead)).await
                                }
                                Err(e) => Err(e),
                            };
                            Done { step, report }
                        });
                    }
                    Action::DependencyFailed { step, cause } => {
                        let reason = format!("dependency_failed({})", plan.steps[cause].id);
                        let key = &plan.steps[step].id;
                        let change = StepChange::new(&plan_id, key, "failed", Some(reason.clone()));
                        let shown = PlanUpdate::Finished {
                            step: key.clone(),
                            status: "failed".into(),
                            reason: Some(reason.clone()),
                        };
                        self.queue_step(&mut commits, change, Some(shown)).await?;
                        tally.settle(&mut outcomes[step], "failed".into(), Some(reason));
                        resolved[step] = true;
                    }
                    Action::Skip { step } => {
                        let why = if cancelled { "cancelled" } else { "budget_exhausted" };
                        let key = &plan.steps[step].id;
                        let change = StepChange::new(&plan_id, key, "cancelled", Some(why.into()));
                        self.queue_step(&mut commits, change, None).await?;
                        tally.settle(&mut outcomes[step], "cancelled".into(), Some(why.into()));
                        resolved[step] = true;
                    }
                    Action::Finished { .. } => {}
                }
            }
            // Merge what waits, in order, as far as the order allows.
            while let Some((iso_plan, _)) = iso
                && let Some(&s) = merge_seq.get(cursor)
            {
                if let Some((id, result)) = awaiting[s].take() {
                    let spec = specs[s].as_ref().ok_or_else(|| {
                        EngineError::Task(format!("step {} has no worktree", plan.steps[s].id))
                    })?;
                    let (status, failure) = self.merge_and_close(&id, spec, iso_plan).await?;
                    let ok = status == Status::Completed;
                    if ok {
                        results.insert(s, result);
                    }
                    actions.extend(if ok {
                        sched.on_finished(s, true)
                    } else {
                        sched.on_failed_final(s)
                    });
                    let (key, status) = (plan.steps[s].id.clone(), status.to_string());
                    let reason = failure.as_ref().map(ToString::to_string);
                    self.writer()
                        .set_step(StepChange::new(&plan_id, &key, &status, reason.clone()))
                        .await?;
                    tally.settle(&mut outcomes[s], status.clone(), reason.clone());
                    send(PlanUpdate::Finished { step: key, status, reason });
                    resolved[s] = true;
                } else if !resolved[s] {
                    break;
                }
                cursor += 1;
            }
            if !actions.is_empty() {
                continue;
            }
            // Running: agents alive; queued: ready steps and those started ahead of a slot.
            let alive = slots.alive();
            send(PlanUpdate::Counts {
                running: alive,
                queued: sched.queued() + sched.running().saturating_sub(alive),
                done: tally.done,
                failed: tally.failed,
                total: n,
            });
            if running.is_empty() && commits.is_empty() {
                break;
            }
            tokio::select! {
                // A step's change is shown once it is stored.
                Some(committed) = commits.join_next(), if !commits.is_empty() => {
                    let shown = committed.map_err(|e| EngineError::Task(e.to_string()))??;
                    if let Some(u) = shown {
                        send(u);
                    }
                }
                joined = running.join_next(), if !running.is_empty() => {
                    let Some(joined) = joined else { continue };
                    let Done { step, report } = match joined {
                        Ok(d) => d,
                        Err(e) => return Err(EngineError::Task(e.to_string())),
                    };
                    let (report, ended) = report?;
                    // The step's own change below is queued after the run's end, so it is shown
                    // only once both are stored; this watches the run's end for errors.
                    commits.spawn(async move {
                        ended.committed().await?;
                        Ok(None)
                    });
                    let key = plan.steps[step].id.clone();
                    let ok = report.status == Status::Completed;
                    cost += report.cost_usd.unwrap_or(0.0);
                    usage.add(&report.usage);
                    let o = &mut outcomes[step];
                    if let Some(c) = report.cost_usd {
                        o.cost_usd = Some(o.cost_usd.unwrap_or(0.0) + c);
                    }
                    o.duration_ms = Some(report.duration_ms);
                    o.usage.add(&report.usage);
                    if ok {
                        results.insert(step, report.result.clone().unwrap_or_default());
                    }
                    // A spent budget starts nothing more: stop starting before the scheduler
                    // hands this step's place (or a retry) to another.
                    let spent = match plan.limits.budget_usd {
                        Some(budget) if cost >= budget => sched.stop_starting(),
                        _ => Vec::new(),
                    };
                    // An isolated success waits for its turn to merge (above); it is neither
                    // done for the scheduler nor retried until then.
                    actions = if report.status == Status::WaitingForMerge {
                        let result = report.result.clone().unwrap_or_default();
                        awaiting[step] = Some((report.id.clone(), result));
                        Vec::new()
                    } else if report.status == Status::Cancelled {
                        // The whole plan is being stopped (the run saw it first): skip what is
                        // pending before this step's failure could cascade as dependency_failed.
                        let mut a = Vec::new();
                        if !cancelled && *own_stop.borrow() != StopLevel::None {
                            cancelled = true;
                            a = sched.stop_starting();
                        }
                        a.extend(sched.on_failed_final(step));
                        a
                    } else {
                        sched.on_finished(step, ok)
                    };
                    let retrying = actions
                        .iter()
                        .any(|a| matches!(a, Action::Start { step: s, .. } if *s == step));
                    if !retrying && report.status != Status::WaitingForMerge {
                        resolved[step] = true;
                        let status = report.status.to_string();
                        let reason = report.failure.as_ref().map(ToString::to_string);
                        let change = StepChange::new(&plan_id, &key, &status, reason.clone());
                        tally.settle(o, status.clone(), reason.clone());
                        let shown = PlanUpdate::Finished { step: key, status, reason };
                        self.queue_step(&mut commits, change, Some(shown)).await?;
                    }
                    actions.extend(spent);
                }
                changed = stop.changed(), if stop_open => {
                    stop_open = changed.is_ok();
                    let level = if changed.is_err() { StopLevel::Graceful } else { *stop.borrow() };
                    if level > *own_stop.borrow() {
                        own_stop.send_replace(level);
                    }
                    if !cancelled && level != StopLevel::None {
                        cancelled = true;
                        actions = sched.stop_starting();
                    }
                }
                // `herd cancel PLAN` from another process: recorded in the store.
                _ = cancel_poll.tick(), if !cancelled => {
                    if self.store().plan_cancel_requested(&plan_id).unwrap_or(false) {
                        cancelled = true;
                        own_stop.send_replace(StopLevel::Graceful);
                        actions = sched.stop_starting();
                    }
                }
            }
        }
        let all_ok = outcomes.iter().all(|o| o.status == "completed");
        let status = if all_ok {
            "completed"
        } else if cancelled {
            "cancelled"
        } else {
            "failed"
        };
        let totals = herd_store::PlanTotals {
            cost_usd: cost,
            usage,
            completed_steps: outcomes.iter().filter(|o| o.status == "completed").count(),
            failed_steps: outcomes.iter().filter(|o| o.status == "failed").count(),
        };
        self.writer().finish_orchestration(&plan_id, status, totals).await?;
        Ok(PlanReport {
            id: plan_id,
            status: status.into(),
            steps: outcomes,
            cost_usd: cost,
            usage,
            integration_branch: iso.map(|(i, _)| i.integration_branch.clone()),
            warnings: Vec::new(),
        })
    }

    /// Queue a step's change without waiting for its commit; `shown` is sent once it is stored.
    async fn queue_step(
        &self,
        commits: &mut JoinSet<Result<Option<PlanUpdate>, EngineError>>,
        change: StepChange,
        shown: Option<PlanUpdate>,
    ) -> Result<(), EngineError> {
        let pending = self.writer().queue_set_step(change).await?;
        commits.spawn(async move {
            pending.committed().await?;
            Ok(shown)
        });
        Ok(())
    }
}

/// Step `step` of `plan` as a worker runs it (a plan served through the store's queue): its
/// request, with its dependencies' results (by key, as stored) as context.
pub(crate) fn queued_step_request(
    plan: &Plan,
    step: usize,
    base: &crate::TaskRequest,
    results_by_key: &HashMap<String, String>,
) -> crate::TaskRequest {
    let results: HashMap<usize, String> = plan
        .steps
        .iter()
        .enumerate()
        .filter_map(|(i, s)| Some((i, results_by_key.get(&s.id)?.clone())))
        .collect();
    let parts = step_parts(plan, step, &results, DEFAULT_SUMMARY_CAP);
    step_request(&plan.steps[step], base, parts)
}
