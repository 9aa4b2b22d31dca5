//! `herd mcp`: herd as an MCP server on stdio, the engine in-process on the same store as the
//! CLI. Stdout carries only the protocol; the tools are in `tools`, their jobs in `jobs`.

mod jobs;
mod log;
mod tools;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use herd_engine::{Engine, GuardCommand};
use herd_store::StatePaths;
use rmcp::ServiceExt;
use tokio::signal::unix::{SignalKind, signal};

use crate::cli::McpArgs;

pub fn run(paths: StatePaths, a: McpArgs) -> anyhow::Result<u8> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let code = rt.block_on(serve(paths, a));
    // A blocking stdin read may still be parked on a thread: do not wait for it.
    rt.shutdown_timeout(Duration::from_millis(500));
    code
}

async fn serve(paths: StatePaths, a: McpArgs) -> anyhow::Result<u8> {
    let log = Arc::new(log::Log::open(&paths));
    let guard = GuardCommand::current_exe().context("cannot find the herd executable")?;
    let engine = match Engine::open(paths.clone(), guard, "mcp") {
        Ok(e) => Arc::new(e),
        Err(e) => {
            log.line(format_args!("cannot open the store: {e}"));
            return Err(e.into());
        }
    };
    log.line(format_args!(
        "herd mcp {} started: state {}, at most {} tasks at once, {} queued",
        env!("CARGO_PKG_VERSION"),
        paths.root.display(),
        a.max_concurrent,
        a.max_queue
    ));
    let jobs = Arc::new(jobs::Jobs::new(
        engine,
        a.max_concurrent as usize,
        a.max_queue as usize,
        Arc::clone(&log),
    ));
    let server = tools::Server::new(Arc::clone(&jobs), Arc::clone(&log));
    let service = match server.serve(rmcp::transport::stdio_pipes()).await {
        Ok(s) => s,
        Err(e) => {
            log.line(format_args!("the MCP session did not start: {e}"));
            jobs.shutdown().await;
            return Err(anyhow::anyhow!("the MCP session did not start: {e}"));
        }
    };
    let ct = service.cancellation_token();
    let signals = tokio::spawn(async move {
        let (Ok(mut term), Ok(mut int)) =
            (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
        else {
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        ct.cancel();
    });
    let reason = service.waiting().await;
    signals.abort();
    log.line(format_args!("the MCP session ended: {reason:?}"));
    // No daemon: what this server started does not outlive it.
    jobs.shutdown().await;
    log.line(format_args!("stopped"));
    Ok(crate::exit::COMPLETED)
}
