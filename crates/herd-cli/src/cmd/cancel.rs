//! `herd cancel`: stop a run from any terminal — through a running daemon, else one service
//! call here (the owning herd is asked through the store; if it does not act, the ladder runs
//! from here).

use std::path::Path;

use herd_engine::service::{CancelLevel, JobState, RunView};

use crate::cli::CancelArgs;

pub fn run(state_dir: &Path, a: CancelArgs) -> anyhow::Result<u8> {
    if let Some(daemon) = super::remote::connect(state_dir)? {
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
