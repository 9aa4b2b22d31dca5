//! `herd mcp`: herd as an MCP server on stdio — a translator over the engine service, on the
//! same store as the CLI. Stdout carries only the protocol; the tools are in `tools`.

mod framing;
mod log;
mod render;
mod tools;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use herd_engine::config::McpConfig;
use herd_engine::service::{Caller, Service};
use rmcp::ServiceExt;
use tokio::signal::unix::{SignalKind, signal};

use crate::UsageError;
use crate::cli::McpArgs;

pub fn run(state_dir: &Path, a: McpArgs) -> anyhow::Result<u8> {
    let root = crate::state::project_root()?;
    let mut opts = super::service_options(&root, "mcp")?;
    if let Some(n) = a.max_concurrent {
        opts.max_concurrent = n as usize;
    }
    if let Some(n) = a.max_queue {
        opts.max_queue = n as usize;
    }
    opts.shared = true;
    let caller = server_caller(&root, &a)?;
    let rt = super::runtime()?;
    let log = Arc::new(log::Log::open(state_dir));
    let svc = match Service::open(state_dir, opts.clone()) {
        Ok(s) => s,
        Err(e) => {
            log.line(format_args!("cannot open the store: {e}"));
            return Err(e.into());
        }
    };
    log.line(format_args!(
        "herd mcp {} started: state {}, at most {} tasks at once, {} queued",
        env!("CARGO_PKG_VERSION"),
        state_dir.display(),
        opts.max_concurrent,
        opts.max_queue
    ));
    let code = rt.block_on(serve(svc, caller, log));
    // A blocking stdin read may still be parked on a thread: do not wait for it.
    rt.shutdown_timeout(Duration::from_millis(500));
    code
}

/// The clients' caller: this process's depth and inherited policies, with the server's own
/// policy above every request (a client only narrows it), and the directories it may use.
fn server_caller(root: &Path, a: &McpArgs) -> anyhow::Result<Caller> {
    let cwd = std::env::current_dir()?;
    let mut caller = super::caller(format!("mcp client (herd mcp pid {})", std::process::id()))?;
    let cfg = herd_engine::config::load(root).map_err(|e| UsageError(e.to_string()))?;
    let flags = McpConfig {
        tools: a.tools.clone(),
        allow: a.allow.clone(),
        deny: a.deny.clone(),
        ask: a.ask.clone(),
        auto_approve: a.auto_approve,
        roots: Vec::new(),
    };
    caller.inherited.push(cfg.mcp_policy(&flags).map_err(UsageError)?);
    let mut roots = vec![root.to_path_buf()];
    roots.extend(cfg.mcp.roots.iter().map(|r| root.join(r)));
    roots.extend(a.roots.iter().map(|r| cwd.join(r)));
    caller.roots = Some(roots);
    Ok(caller)
}

async fn serve(svc: Service, caller: Caller, log: Arc<log::Log>) -> anyhow::Result<u8> {
    let server = tools::Server::new(svc.clone(), caller, Arc::clone(&log));
    // A line that is not JSON is answered with a parse error before the service sees it.
    let io = framing::framed(tokio::io::stdin(), tokio::io::stdout());
    let service = match server.serve(io).await {
        Ok(s) => s,
        Err(e) => {
            log.line(format_args!("the MCP session did not start: {e}"));
            svc.shutdown().await?;
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
    let open = svc.running_jobs();
    if open > 0 {
        log.line(format_args!("shutdown: stopping {open} job(s)"));
    }
    if let Err(e) = svc.shutdown().await {
        log.line(format_args!("shutdown: {e}"));
    }
    log.line(format_args!("stopped"));
    Ok(crate::exit::COMPLETED)
}
