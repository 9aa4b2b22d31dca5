//! `herd plans`, and `herd show` / `herd logs` of a plan (`pln_…`): plans listed, one plan with
//! every step (its run, duration, cost, reason) and its merges, and its events with its steps'.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use herd_engine::service::{PlanEventView, Service, StepView, StoredEvent};
use serde::Serialize;

use crate::cli::PlansArgs;
use crate::{board, fmt, tables};

/// An id that names a plan rather than a run.
pub fn is_plan_id(id: &str) -> bool {
    id.trim().to_ascii_lowercase().starts_with("pln_")
}

pub fn list(state_dir: &Path, a: PlansArgs) -> anyhow::Result<u8> {
    let svc = super::open_service(state_dir, "cli")?;
    let plans = svc.plans(a.rows.into())?;
    let mut out = std::io::stdout().lock();
    if a.json {
        writeln!(out, "{}", serde_json::to_string(&plans)?)?;
        return Ok(0);
    }
    if plans.is_empty() {
        let hint = if a.rows.all { "" } else { " running (--all shows finished ones)" };
        writeln!(out, "no plans{hint}")?;
        return Ok(0);
    }
    write!(out, "{}", tables::plans(&plans))?;
    Ok(0)
}

/// One plan: what it is, every step with its whole run id, the merges of its isolated steps.
pub fn show(svc: &Service, id: &str, json: bool) -> anyhow::Result<u8> {
    let p = svc.plan(id)?;
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", serde_json::to_string(&p)?)?;
        return Ok(0);
    }
    write!(out, "{}", tables::plan(&p))?;
    Ok(0)
}

/// One entry of a plan's log: the plan's own event, or one of a step's run's.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Entry {
    Plan(PlanEventView),
    Step(StepEvent),
}

/// A step's run's event, with the step it belongs to.
#[derive(Debug, Serialize)]
struct StepEvent {
    step: String,
    #[serde(flatten)]
    event: StoredEvent,
}

impl Entry {
    fn ts(&self) -> i64 {
        match self {
            Entry::Plan(e) => e.ts,
            Entry::Step(e) => e.event.ts,
        }
    }
}

/// The plan's events and each of its runs' (every attempt's), in the order they were stored.
fn entries(svc: &Service, id: &str) -> anyhow::Result<Vec<Entry>> {
    let plan_events = svc.plan_events(id, 0, usize::MAX)?;
    let mut runs: Vec<(String, String)> = plan_events
        .iter()
        .filter_map(|e| Some((e.step.clone()?, e.subagent_id.clone()?)))
        .collect();
    runs.dedup();
    let mut all: Vec<Entry> = plan_events.into_iter().map(Entry::Plan).collect();
    for (step, run) in runs {
        let mut after = 0;
        loop {
            let batch = svc.events(&run, after, 1000)?;
            let n = batch.len();
            for e in batch {
                after = e.seq;
                all.push(Entry::Step(StepEvent { step: step.clone(), event: e }));
            }
            if n < 1000 {
                break;
            }
        }
    }
    // Stable: each source keeps its own order within a millisecond.
    all.sort_by_key(Entry::ts);
    Ok(all)
}

/// The STEP column of a plan's log (`(plan)` for the plan's own events).
const STEP_W: usize = 12;

/// One entry of the log; `steps`, the plan's as read, say how its steps ended.
fn print(out: &mut impl Write, e: &Entry, steps: &[StepView], json: bool) -> anyhow::Result<()> {
    if json {
        writeln!(out, "{}", serde_json::to_string(e)?)?;
        return Ok(());
    }
    match e {
        Entry::Plan(p) => {
            let line = board::announce(p, steps).unwrap_or_else(|| format!("herd: {}", p.kind));
            writeln!(
                out,
                "{} {:<STEP_W$} {}",
                &fmt::time(p.ts)[11..],
                "(plan)",
                line.trim_start_matches("herd: ")
            )?;
        }
        Entry::Step(s) => {
            let indent = if s.event.parent_tool_use_id.is_some() { "    " } else { "" };
            writeln!(
                out,
                "{} {:<STEP_W$} {indent}{:<16} {}",
                &fmt::time(s.event.ts)[11..],
                board::cut(&s.step, STEP_W),
                s.event.event.kind(),
                fmt::event_summary(&s.event.event)
            )?;
        }
    }
    Ok(())
}

/// `herd logs PLAN`: everything so far, or followed until the plan ends (JSON lines then).
pub fn logs(svc: &Service, id: &str, follow: bool, json: bool) -> anyhow::Result<u8> {
    let plan = svc.plan(id)?;
    let id = plan.id;
    if !follow {
        let steps = plan.steps.unwrap_or_default();
        let all = entries(svc, &id)?;
        let mut out = std::io::stdout().lock();
        if json {
            writeln!(out, "{}", serde_json::to_string(&all)?)?;
        } else {
            for e in &all {
                print(&mut out, e, &steps, false)?;
            }
        }
        return Ok(0);
    }
    // Followed: what is new in each read, until the plan has ended and all is printed.
    let mut seen_plan = 0i64;
    // Each run seen so far: its step, and its last event printed.
    let mut runs: std::collections::BTreeMap<String, (String, i64)> = Default::default();
    loop {
        let ended = svc.status(&id)?.is_terminal();
        let steps = svc.plan(&id)?.steps.unwrap_or_default();
        let plan_events = svc.plan_events(&id, seen_plan, usize::MAX)?;
        for e in &plan_events {
            seen_plan = e.seq;
            if let (Some(step), Some(run)) = (&e.step, &e.subagent_id) {
                runs.entry(run.clone()).or_insert_with(|| (step.clone(), 0));
            }
        }
        let mut fresh: Vec<Entry> = plan_events.into_iter().map(Entry::Plan).collect();
        for (run, (step, after)) in runs.iter_mut() {
            for e in svc.events(run, *after, 1000)? {
                *after = e.seq;
                fresh.push(Entry::Step(StepEvent { step: step.clone(), event: e }));
            }
        }
        fresh.sort_by_key(Entry::ts);
        let mut out = std::io::stdout().lock();
        for e in &fresh {
            print(&mut out, e, &steps, json)?;
        }
        out.flush()?;
        if ended && fresh.is_empty() {
            return Ok(0);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}
