//! `herd task`: one subagent in the foreground — the flags as a task spec, one spawn, live
//! progress on a terminal, the result (or one JSON object) on stdout, Ctrl-C to cancel.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use herd_core::permission::{AutoApproveConfig, GrantKind, GrantSpec, Secret, parse_grant_spec};
use herd_core::workspace::{LockMode, WorkspaceMode};
use herd_core::{BackendKind, FailureReason, Status, SubagentId};
use herd_engine::service::{
    Caller, Progress, RunState, RunView, Service, TaskSpec, WaitMode, WorkspaceSpec,
};
use tokio::sync::watch;

use super::ask::Scope;
use crate::cli::{PermissionArgs, TaskArgs};
use crate::{UsageError, exit, fmt};

pub fn run(state_dir: &Path, args: TaskArgs) -> anyhow::Result<u8> {
    if let Some(daemon) = super::remote::connect(state_dir)? {
        return super::remote::task(daemon, args);
    }
    if args.detach {
        return Err(UsageError(format!(
            "--detach leaves the task to herd serve, and none runs on {}; start one (herd serve) \
             or run the task in the foreground",
            state_dir.display()
        ))
        .into());
    }
    let json_out = args.json;
    let explain = args.explain;
    let spec = spec(args)?;
    let interactive = !spec.non_interactive;
    let svc = super::open_service(state_dir, "cli")?;
    let caller = super::caller(format!("the terminal of herd pid {}", std::process::id()))?;
    let rt = super::runtime()?;
    rt.block_on(async move {
        let out = foreground(&svc, &caller, spec, json_out, explain, interactive).await;
        svc.shutdown().await?;
        out
    })
}

/// Spawn, follow, and report one task.
async fn foreground(
    svc: &Service,
    caller: &Caller,
    spec: TaskSpec,
    json_out: bool,
    explain: bool,
    interactive: bool,
) -> anyhow::Result<u8> {
    let spawned = svc.spawn(caller, spec).await?;
    if explain {
        eprintln!("herd: cli {}: {}", spawned.cli, spawned.cli_reason);
        eprintln!("herd: permissions: {}", spawned.permission_route);
    }
    let id = spawned.id.clone();
    let signals = tokio::spawn(super::signals::cancel_on_signal(
        svc.clone(),
        id.to_string(),
        caller.clone(),
        None,
    ));
    let live = std::io::stderr().is_terminal();
    let paused = Arc::new(AtomicBool::new(false));
    let scope = Scope::Run(id.to_string());
    // A person at this terminal answers the run's permission requests; without one, each
    // call that waits is said on stderr (`herd approve` answers it from anywhere).
    let (asker, notifier) = if live && interactive && std::io::stdin().is_terminal() {
        (super::ask::spawn(svc, scope, caller.clone(), paused.clone(), None), None)
    } else {
        let (n, handle) = super::ask::notify(svc, scope);
        (handle, Some(n))
    };
    let display = live
        .then(|| tokio::spawn(show_progress(id.clone(), spawned.cli, spawned.progress, paused)));
    svc.wait(&[id.to_string()], WaitMode::All, Duration::MAX / 4).await?;
    signals.abort();
    asker.abort();
    if let Some(n) = notifier {
        n.poll(svc);
    }
    if let Some(d) = display {
        d.abort();
        let _ = d.await;
        eprint!("\r\x1b[2K");
    }
    let run = svc.run(id.as_str())?;
    print_report(&run, json_out, live)?;
    Ok(exit_code(&run))
}

/// The flags as a task spec; every problem is a usage error naming the flag.
pub(crate) fn spec(a: TaskArgs) -> anyhow::Result<TaskSpec> {
    let usage = |m: String| anyhow::Error::new(UsageError(m));
    let mode: WorkspaceMode = match a.workspace.as_deref() {
        Some(m) => m.parse().map_err(usage)?,
        None => WorkspaceMode::Shared,
    };
    if a.lock.is_some() && !matches!(mode, WorkspaceMode::Shared | WorkspaceMode::Locked) {
        return Err(usage("--lock is for --workspace locked".into()));
    }
    let workspace = WorkspaceSpec {
        mode,
        lock: a.lock.as_deref().map(|l| l.parse::<LockMode>()).transpose().map_err(usage)?,
        wait: a.wait,
        into: a.into,
        base: a.base,
        setup: a.setup,
        auto_commit: a.no_auto_commit.then_some(false),
    };
    let ask = a.permissions.ask.clone();
    let non_interactive = a.permissions.asking.nobody_answers(a.json);
    let (auto_approve, permission_timeout, grants) = permissions(a.permissions)?;
    Ok(TaskSpec {
        prompt: a.prompt,
        name: None,
        cli: a.cli,
        command: a.command,
        agent: a.agent,
        inputs: a.input.into_iter().collect(),
        model: a.model,
        tools: a.tools,
        allow: a.allow,
        deny: a.deny,
        ask,
        max_turns: a.max_turns,
        timeout: a.timeout,
        max_output_kb: a.max_output_kb,
        env: a.env,
        cwd: a.cwd,
        workspace,
        auto_approve,
        permission_timeout,
        non_interactive,
        grants,
        resume: a.resume,
    })
}

type Perms = (Option<AutoApproveConfig>, Option<Duration>, Vec<(GrantKind, Duration)>);

/// The permission flags: auto-approve limits, the ask timeout, grants (a secret's value from
/// this process's environment).
fn permissions(p: PermissionArgs) -> anyhow::Result<Perms> {
    let usage = |m: String| anyhow::Error::new(UsageError(m));
    let auto = p.auto_approve.then(|| {
        let mut c = AutoApproveConfig::default();
        if let Some(n) = p.tool_calls_per_minute {
            c.tool_calls_per_minute = n;
        }
        if let Some(n) = p.bash_per_minute {
            c.bash_per_minute = n;
        }
        if let Some(n) = p.writes_per_minute {
            c.writes_per_minute = n;
        }
        if let Some(n) = p.max_tool_calls {
            c.tool_calls_per_session = n;
        }
        if let Some(d) = p.max_duration {
            c.max_duration = d;
        }
        c.queue_on_rate_limit = p.queue_on_rate_limit;
        c
    });
    let mut grants = Vec::new();
    for g in &p.grant {
        match parse_grant_spec(g).map_err(|e| usage(format!("--grant {g:?}: {e}")))? {
            GrantSpec::Tool { name, ttl } => grants.push((GrantKind::Tool { name }, ttl)),
            GrantSpec::Secret { name, ttl } => {
                let value = std::env::var(&name).map_err(|_| {
                    usage(format!("--grant {g:?}: herd's environment has no variable {name}"))
                })?;
                grants.push((GrantKind::Secret { name, value: Secret::from(value) }, ttl));
            }
        }
    }
    Ok((auto, p.permission_timeout, grants))
}

async fn show_progress(
    id: SubagentId,
    cli: BackendKind,
    rx: watch::Receiver<Progress>,
    paused: Arc<AtomicBool>,
) {
    let started = std::time::Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let spinner = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
    for i in 0usize.. {
        tick.tick().await;
        if paused.load(Ordering::SeqCst) {
            continue;
        }
        let p = rx.borrow().clone();
        let mut line = format!(
            "{} {} {} · {:.1}s",
            spinner[i % spinner.len()],
            &id.as_str()[..12],
            cli,
            started.elapsed().as_secs_f64()
        );
        if p.turns > 0 {
            line.push_str(&format!(" · turn {}", p.turns));
        }
        if let Some(t) = &p.current_tool {
            line.push_str(&format!(" · {t}"));
        }
        let tokens = p.usage.input_tokens + p.usage.output_tokens;
        if tokens > 0 {
            line.push_str(&format!(" · {} tokens", fmt::count(tokens)));
        }
        eprint!("\r\x1b[2K{line}");
        let _ = std::io::stderr().flush();
    }
}

pub(crate) fn print_report(r: &RunView, json_out: bool, live: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if json_out {
        writeln!(out, "{}", serde_json::to_string(r)?)?;
    } else if let Some(text) = r.result.as_ref().filter(|t| !t.is_empty()) {
        writeln!(out, "{text}")?;
    }
    out.flush()?;
    if r.state != RunState::Completed || live {
        let reason = match (&r.failure_reason, r.unanswered_denials) {
            (Some(f), _) => format!(": {f}"),
            (None, 0) => String::new(),
            (None, n) => format!(": {n} tool call(s) denied because nobody answered"),
        };
        eprintln!(
            "herd: {} {}{reason} ({}, {})",
            r.id,
            r.state,
            r.duration_ms.map_or_else(|| "-".into(), fmt::duration_ms),
            fmt::cost(r.cost_usd)
        );
    }
    Ok(())
}

pub(crate) fn exit_code(r: &RunView) -> u8 {
    match (r.status, &r.failure) {
        (Status::Completed, _) if r.unanswered_denials > 0 => exit::DENIED,
        (Status::Completed, _) => exit::COMPLETED,
        (Status::Cancelled, _) => exit::CANCELLED,
        (_, Some(FailureReason::Timeout)) => exit::TIMEOUT,
        _ => exit::FAILED,
    }
}
