//! `herd cancel`: stop a run or a plan from any terminal — a run through a running daemon, else
//! one service call here (the owning herd is asked through the store; if it does not act, the
//! ladder is run from here).

use std::path::Path;

use herd_engine::service::{Caller, CancelLevel, JobState, RunView, Service};

use crate::UsageError;
use crate::cli::CancelArgs;

pub fn run(state_dir: &Path, a: CancelArgs) -> anyhow::Result<u8> {
    if !super::plans::is_plan_id(&a.id)
        && let Some(daemon) = super::remote::connect(state_dir)?
    {
        let (before, after) = super::remote::cancel(daemon, &a.id, a.force, a.cleanup_worktree)?;
        let code = report(&before, &JobState::Task(Box::new(after.clone())));
        if a.cleanup_worktree {
            let path = after.worktree.as_ref().map_or(&after.cwd, |w| &w.path);
            println!("{}: uncommitted changes discarded in {path}", after.id);
        }
        return Ok(code);
    }
    let svc = super::open_service(state_dir, "cli")?;
    let caller = super::caller(super::person())?;
    let level = if a.force { CancelLevel::Force } else { CancelLevel::Graceful };
    if super::plans::is_plan_id(&a.id) {
        return plan(svc, &a, level, &caller);
    }
    let before = svc.run(&a.id)?;
    let rt = super::runtime()?;
    let state = rt.block_on(svc.cancel(&before.id, level, "herd cancel", &caller))?;
    let code = report(&before, &state);
    if a.cleanup_worktree {
        let w = svc.cleanup_worktree(&before.id)?;
        println!("{}: uncommitted changes discarded in {} ({})", before.id, w.path, w.branch);
    }
    rt.block_on(svc.shutdown())?;
    Ok(code)
}

/// Say how the run ended; its exit code (1: it did not stop).
fn report(before: &RunView, state: &JobState) -> u8 {
    match state {
        JobState::Task(r) if before.is_terminal() => {
            println!("{} already ended ({})", r.id, r.status);
            0
        }
        s if s.is_terminal() => {
            println!("{} {}", s.id(), s.status());
            0
        }
        s => {
            eprintln!(
                "herd: {} did not stop ({}); its process group was killed",
                s.id(),
                s.status()
            );
            1
        }
    }
}

/// `herd cancel PLAN`: the plan is asked to stop through the store (its owner stops starting
/// steps and stops the ones that run), and each running step's run too.
fn plan(svc: Service, a: &CancelArgs, level: CancelLevel, caller: &Caller) -> anyhow::Result<u8> {
    if a.cleanup_worktree {
        return Err(UsageError(
            "--cleanup-worktree is for one run; give a step's run id (herd show PLAN lists them)"
                .into(),
        )
        .into());
    }
    let before = svc.plan(&a.id)?;
    let rt = super::runtime()?;
    let state = rt.block_on(svc.cancel(&before.id, level, "herd cancel", caller))?;
    let code = match &state {
        s if before.is_terminal() => {
            println!("{} already ended ({})", s.id(), s.status());
            0
        }
        s if s.is_terminal() => {
            println!("{} {}", s.id(), s.status());
            0
        }
        s => {
            eprintln!("herd: {} is still {}; its steps were asked to stop", s.id(), s.status());
            1
        }
    };
    rt.block_on(svc.shutdown())?;
    Ok(code)
}
