//! `herd cancel`: stop a run from any terminal, no daemon needed. The owning herd process is
//! asked through the store (it runs the stop ladder and records `cancelled`); if it does not
//! act, or with `--force`, the recorded process group is signalled after an identity check.

use std::time::{Duration, Instant};

use herd_engine::procfs;
use herd_store::StatePaths;
use nix::sys::signal::Signal;

use herd_engine::workspace::teardown;

use super::open_store;
use crate::UsageError;
use crate::cli::CancelArgs;

pub fn run(paths: StatePaths, a: CancelArgs) -> anyhow::Result<u8> {
    let mut store = open_store(paths)?;
    let id = store.resolve(&a.id)?;
    let code = stop(&mut store, &id, a.force)?;
    if a.cleanup_worktree {
        let row = store.get(&id)?.ok_or_else(|| UsageError(format!("no subagent {id}")))?;
        let dir = std::path::Path::new(&row.working_directory);
        // Only herd's own worktrees, and only once nothing runs there any more.
        if !row.status.is_terminal() {
            return Err(UsageError(format!(
                "{id} is still {}; not cleaning its worktree",
                row.status
            ))
            .into());
        }
        let wt = store.worktree_of(id.as_str())?.map(|w| std::path::PathBuf::from(w.path));
        let target = wt.as_deref().unwrap_or(dir);
        let w = teardown::cleanup(&store, target).map_err(|e| UsageError(e.to_string()))?;
        println!("{id}: uncommitted changes discarded in {} ({})", w.path, w.branch);
    }
    Ok(code)
}

fn stop(
    store: &mut herd_store::Store,
    id: &herd_core::SubagentId,
    force: bool,
) -> anyhow::Result<u8> {
    if !store.request_cancel(id)? {
        let r = store.get(id)?;
        let status = r.map_or_else(|| "gone".into(), |r| r.status.to_string());
        println!("{id} already ended ({status})");
        return Ok(0);
    }
    store.append_audit(&herd_store::NewAudit {
        event_type: "cancel_requested",
        severity: "warn",
        subagent_id: Some(id.to_string()),
        decided_by: Some(format!("herd cancel (pid {})", std::process::id())),
        details: Some(serde_json::json!({"force": force})),
        ..Default::default()
    })?;
    let signal_group = |sig: Signal| -> bool {
        let Ok(Some(r)) = store.get(id) else { return false };
        match (r.pid, r.pgid) {
            // Only with a recorded start time: a bare pid may have been reused by a stranger.
            (Some(pid), Some(pgid))
                if r.process_start_time.is_some()
                    && procfs::is_same_process(pid, r.process_start_time) =>
            {
                procfs::signal_group(pgid, sig)
            }
            _ => false,
        }
    };
    if force {
        signal_group(Signal::SIGKILL);
    }
    // The owner polls for the request; give it its graceful stop, then escalate ourselves.
    let start = Instant::now();
    let mut escalated = force;
    loop {
        let r = store.get(id)?;
        if r.as_ref().is_none_or(|r| r.status.is_terminal()) {
            let status = r.map_or_else(|| "gone".into(), |r| r.status.to_string());
            println!("{id} {status}");
            return Ok(0);
        }
        if !escalated && start.elapsed() > Duration::from_secs(8) {
            signal_group(Signal::SIGTERM);
            escalated = true;
        }
        if start.elapsed() > Duration::from_secs(20) {
            signal_group(Signal::SIGKILL);
            eprintln!("herd: {id} did not stop within 20s; its process group was killed");
            return Ok(1);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
