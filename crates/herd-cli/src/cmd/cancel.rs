//! `herd cancel`: stop a run from any terminal, no daemon needed — one service call (the
//! owning herd is asked through the store; if it does not act, the ladder is run from here).

use std::path::Path;

use herd_engine::service::{CancelLevel, JobState};

use crate::cli::CancelArgs;

pub fn run(state_dir: &Path, a: CancelArgs) -> anyhow::Result<u8> {
    let svc = super::open_service(state_dir, "cli")?;
    let caller = super::caller(super::person())?;
    let level = if a.force { CancelLevel::Force } else { CancelLevel::Graceful };
    let before = svc.run(&a.id)?;
    let rt = super::runtime()?;
    let state = rt.block_on(svc.cancel(&before.id, level, "herd cancel", &caller))?;
    let code = match &state {
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
    };
    if a.cleanup_worktree {
        let w = svc.cleanup_worktree(&before.id)?;
        println!("{}: uncommitted changes discarded in {} ({})", before.id, w.path, w.branch);
    }
    rt.block_on(svc.shutdown())?;
    Ok(code)
}
