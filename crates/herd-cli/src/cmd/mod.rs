//! Command dispatch: each subcommand in its own module, all returning an exit code.
//! Commands that only read the store stay synchronous; `task` builds a runtime.

mod agents;
mod ask;
mod cancel;
mod doctor;
mod inspect;
mod mcp;
mod permissions;
mod plan;
mod select;
mod signals;
mod task;
mod worktrees;

use crate::cli::{Cli, Command};
use crate::state;

pub fn dispatch(cli: Cli) -> anyhow::Result<u8> {
    let paths = state::resolve(cli.state_dir.as_deref())?;
    match cli.command {
        Command::Task(args) => task::run(paths, *args),
        Command::Run(args) => plan::run(paths, args),
        Command::Ps(args) => inspect::ps(paths, args),
        Command::Show(args) => inspect::show(paths, args),
        Command::Logs(args) => inspect::logs(paths, args),
        Command::Cancel(args) => cancel::run(paths, args),
        Command::Doctor(args) => doctor::run(paths, args),
        Command::Agents(cmd) => agents::run(cmd),
        Command::Approve(args) => permissions::approve(paths, args),
        Command::Deny(args) => permissions::deny(paths, args),
        Command::Revoke(args) => permissions::revoke(paths, args),
        Command::Audit(args) => permissions::audit(paths, args),
        Command::Gc(args) => permissions::gc(paths, args),
        Command::Mcp(args) => mcp::run(paths, args),
        Command::Worktrees(cmd) => worktrees::run(paths, cmd),
    }
}

/// Open the store for a command that reads it, sweeping runs whose owner died first.
fn open_store(paths: herd_store::StatePaths) -> anyhow::Result<herd_store::Store> {
    let mut store = herd_store::Store::open(paths)?;
    herd_engine::sweep_orphans(&mut store)?;
    Ok(store)
}
