//! Command dispatch: each subcommand in its own module, each one service call plus rendering.
//! Commands that wait on runs build a runtime; the rest read the service synchronously.

mod agents;
mod ask;
mod cancel;
mod doctor;
mod inspect;
mod mcp;
mod permissions;
mod plan;
mod plans;
mod remote;
mod serve;
mod signals;
mod task;
mod worker;
mod worktrees;

use std::path::{Path, PathBuf};

use anyhow::Context;
use herd_engine::service::{Caller, Service, ServiceOptions};

use crate::cli::{Cli, Command};
use crate::state;

pub fn dispatch(cli: Cli) -> anyhow::Result<u8> {
    if let Command::Completions { shell } = cli.command {
        return Ok(completions(shell));
    }
    let state_dir = state::resolve(cli.state_dir.as_deref())?;
    if let Some(s) = &cli.store {
        let b = herd_engine::service::StoreBackend::parse(s)
            .map_err(|e| anyhow::anyhow!("--store: {e}"))?;
        let _ = STORE.set(b);
    }
    match cli.command {
        Command::Task(args) => task::run(&state_dir, *args),
        Command::Run(args) => plan::run(&state_dir, args),
        Command::Ps(args) => inspect::ps(&state_dir, args),
        Command::Plans(args) => plans::list(&state_dir, args),
        Command::Show(args) => inspect::show(&state_dir, args),
        Command::Logs(args) => inspect::logs(&state_dir, args),
        Command::Cancel(args) => cancel::run(&state_dir, args),
        Command::Doctor(args) => doctor::run(&state_dir, args),
        Command::Agents(cmd) => agents::run(cmd),
        Command::Approve(args) => permissions::approve(&state_dir, args),
        Command::Deny(args) => permissions::deny(&state_dir, args),
        Command::Revoke(args) => permissions::revoke(&state_dir, args),
        Command::Audit(args) => permissions::audit(&state_dir, args),
        Command::Gc(args) => permissions::gc(&state_dir, args),
        Command::Mcp(args) => mcp::run(&state_dir, args),
        Command::Worktrees(cmd) => worktrees::run(&state_dir, cmd),
        Command::Serve(args) => serve::run(&state_dir, args),
        Command::Web(args) => serve::web(&state_dir, args),
        Command::Attach(args) => remote::attach(&state_dir, args),
        Command::Worker(args) => worker::work(&state_dir, args),
        Command::Workers(args) => worker::list(&state_dir, args),
        Command::Completions { .. } => unreachable!("answered before the state dir is resolved"),
    }
}

/// `herd completions SHELL`: the script on stdout.
pub fn completions(shell: clap_complete::Shell) -> u8 {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    clap_complete::generate(shell, &mut cmd, "herd", &mut std::io::stdout());
    crate::exit::COMPLETED
}

/// `--store` / `HERD_STORE_URL`, when given: it overrides the config's `store:`.
static STORE: std::sync::OnceLock<herd_engine::service::StoreBackend> = std::sync::OnceLock::new();

/// The service of `state_dir` as the project's config sets it up, for a command of `surface`.
fn open_service(state_dir: &Path, surface: &str) -> anyhow::Result<Service> {
    Ok(Service::open(state_dir, service_options(&state::project_root()?, surface)?)?)
}

/// The options `project_root`'s config sets for a command of `surface`, the database given by
/// `--store` (or `HERD_STORE_URL`) over the config's `store:`. Every command that opens a
/// service takes them from here: one that did not (`herd serve`) served another database.
fn service_options(project_root: &Path, surface: &str) -> anyhow::Result<ServiceOptions> {
    let mut opts = ServiceOptions::for_project(project_root, surface)?;
    if let Some(b) = STORE.get() {
        opts.store = b.clone();
    }
    Ok(opts)
}

/// This process as a caller: the project, the current directory, the depth and policies a
/// parent herd set in the environment.
fn caller(who: String) -> anyhow::Result<Caller> {
    let cwd: PathBuf = std::env::current_dir().context("cannot read the current directory")?;
    Ok(Caller::from_env(&state::project_root()?, &cwd, who)?)
}

/// Who answers or cancels from this terminal, as recorded.
fn person() -> String {
    let user = std::env::var("USER").unwrap_or_else(|_| "someone".into());
    format!("{user} via herd pid {}", std::process::id())
}

/// A multi-threaded runtime of two workers for the commands that wait on runs.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}
