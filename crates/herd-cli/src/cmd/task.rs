//! `herd task`: run one subagent in the foreground — live progress on a terminal, the result
//! (or one JSON object) on stdout, Ctrl-C to cancel (twice to kill).

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use herd_backends::{BackendKind, RunSpec};
use herd_core::permission::{
    AutoApproveConfig, GrantKind, GrantSpec, Grants, Rule, Secret, parse_grant_spec,
};
use herd_core::workspace::{LockMode, WorkspaceMode};
use herd_core::{FailureReason, Status, SubagentId};
use herd_engine::gate::Permissions;
use herd_engine::workspace::{IsolatedSpec, IsolationPlan, WorkspaceReq};
use herd_engine::{
    Engine, EngineError, GuardCommand, Progress, StopLevel, TaskReport, TaskRequest,
};
use herd_store::StatePaths;
use serde_json::json;
use tokio::sync::watch;

use super::select;
use crate::cli::{PermissionArgs, TaskArgs};
use crate::{UsageError, exit, fmt};

pub fn run(paths: StatePaths, args: TaskArgs) -> anyhow::Result<u8> {
    let json_out = args.json;
    let Prepared { req, resume, isolate } = prepare(args)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(run_async(paths, req, json_out, resume, isolate))
}

/// A validated task: the request, and what needs the store or git before it runs.
pub(crate) struct Prepared {
    pub req: TaskRequest,
    pub resume: Option<Resume>,
    pub isolate: Option<Isolate>,
}

/// Turn task arguments into a request: the agent definition, the chosen CLI, the validated
/// flags. A resume is returned for [`apply_resume`] once the store is open. Shared with
/// `herd mcp`'s `task` tool.
pub(crate) fn prepare(mut args: TaskArgs) -> anyhow::Result<Prepared> {
    let resume = args.resume.clone().map(|id| Resume { id, cwd_given: args.cwd.is_some() });
    let root = crate::state::project_root()?;
    let agent = args.agent.as_deref().map(|n| select::find_agent(&root, n)).transpose()?;
    if agent.is_none() && !args.input.is_empty() {
        return Err(UsageError("--input needs --agent NAME".into()).into());
    }
    if resume.is_none() {
        let (cli, why) = select::choose_cli(args.cli, agent.as_ref(), &root)?;
        if args.explain {
            eprintln!("herd: cli {cli}: {why}");
        }
        args.cli = Some(cli);
    }
    let flags = select::Flags { timeout: args.timeout.is_some() };
    let inputs = std::mem::take(&mut args.input);
    let perm_args = std::mem::take(&mut args.permissions);
    let isolate = isolation(&args)?;
    let mut req = request(args)?;
    if let Some(f) = &agent {
        select::apply_agent(&mut req, f, &inputs, &root, &flags)?;
    }
    req.permissions = permissions(perm_args, &root)?;
    if let Some(f) = &agent {
        select::apply_agent_permissions(&mut req.permissions, f)?;
    }
    // Refused before anything is created: exit 2, INVALID_PERMISSION_CONFIG.
    req.permissions.validate(&req.spec).map_err(UsageError)?;
    Ok(Prepared { req, resume, isolate })
}

/// `--workspace isolated` and its options.
pub(crate) struct Isolate {
    into: Option<String>,
    base: Option<String>,
    setup: Option<String>,
    auto_commit: bool,
}

/// Check the workspace flags together: each names the mode it belongs to.
fn isolation(a: &TaskArgs) -> anyhow::Result<Option<Isolate>> {
    let usage = |m: &str| anyhow::Error::new(UsageError(m.to_owned()));
    let mode: WorkspaceMode = match (a.workspace.as_deref(), a.lock.is_some()) {
        (Some(m), _) => m.parse().map_err(|e: String| usage(&e))?,
        (None, true) => WorkspaceMode::Locked,
        (None, false) => WorkspaceMode::Shared,
    };
    if a.lock.is_some() && mode != WorkspaceMode::Locked {
        return Err(usage("--lock is for --workspace locked"));
    }
    let isolated_only =
        a.into.is_some() || a.base.is_some() || a.setup.is_some() || a.no_auto_commit;
    if isolated_only && mode != WorkspaceMode::Isolated {
        return Err(usage(
            "--into, --base, --setup and --no-auto-commit are for --workspace isolated",
        ));
    }
    if a.wait && mode == WorkspaceMode::Isolated {
        return Err(usage(
            "--wait is for a shared or locked workspace (an isolated one has its own)",
        ));
    }
    if a.resume.is_some() && mode == WorkspaceMode::Isolated {
        return Err(usage(
            "--resume continues in the earlier run's directory; it cannot be isolated",
        ));
    }
    Ok((mode == WorkspaceMode::Isolated).then(|| Isolate {
        into: a.into.clone(),
        base: a.base.clone(),
        setup: a.setup.clone(),
        auto_commit: !a.no_auto_commit,
    }))
}

const DEFAULT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// The project's config, then the flags: ask rules, auto-approve limits, the ask timeout, grants.
fn permissions(p: PermissionArgs, root: &std::path::Path) -> anyhow::Result<Permissions> {
    let usage = |m: String| anyhow::Error::new(UsageError(m));
    let cfg = herd_engine::config::load(root).map_err(|e| usage(e.to_string()))?;
    let mut perms = cfg.permissions().map_err(usage)?;
    for r in &p.ask {
        let rule = Rule::parse(r).map_err(|e| usage(format!("--ask {r:?}: {e}")))?;
        perms.policy.ask.push(rule);
    }
    if p.auto_approve {
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
        perms.auto_approve = Some(c);
    }
    if let Some(t) = p.permission_timeout {
        perms.ask_timeout = t;
    }
    let now = std::time::Instant::now();
    let mut grants = Grants::default();
    for g in &p.grant {
        match parse_grant_spec(g).map_err(|e| usage(format!("--grant {g:?}: {e}")))? {
            GrantSpec::Tool { name, ttl } => grants.add(GrantKind::Tool { name }, ttl, now),
            GrantSpec::Secret { name, ttl } => {
                let value = std::env::var(&name).map_err(|_| {
                    usage(format!("--grant {g:?}: herd's environment has no variable {name}"))
                })?;
                grants.add(GrantKind::Secret { name, value: Secret::from(value) }, ttl, now);
            }
        }
    }
    perms.grants = std::sync::Arc::new(std::sync::Mutex::new(grants));
    Ok(perms)
}

/// Validate the flags into a request; every problem is a usage error naming the flag.
fn request(a: TaskArgs) -> anyhow::Result<TaskRequest> {
    let usage = |m: String| anyhow::Error::new(UsageError(m));
    if a.prompt.trim().is_empty() {
        return Err(usage("the prompt is empty".into()));
    }
    match (a.cli.unwrap_or(BackendKind::Claude), a.command.is_empty()) {
        _ if a.resume.is_some() => {}
        (BackendKind::Command, true) => {
            return Err(usage(
                "--cli command needs a program after `--`: herd task PROMPT --cli command -- PROGRAM [ARGS…]"
                    .into(),
            ));
        }
        (BackendKind::Claude, false) => {
            return Err(usage(format!(
                "a program after `--` is only for --cli command (got `{}` with --cli claude)",
                a.command.join(" ")
            )));
        }
        _ => {}
    }
    let cwd = match &a.cwd {
        Some(d) => std::fs::canonicalize(d)
            .ok()
            .filter(|p| p.is_dir())
            .ok_or_else(|| usage(format!("--cwd {}: not an existing directory", d.display())))?,
        None => std::env::current_dir()?,
    };
    let tools = a
        .tools
        .map(|t| t.into_iter().map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect());
    Ok(TaskRequest {
        name: None,
        backend: a.cli.unwrap_or(BackendKind::Claude),
        spec: RunSpec {
            prompt: a.prompt,
            model: a.model,
            tools,
            allow: a.allow,
            deny: a.deny,
            max_turns: a.max_turns,
            append_system_prompt: None,
            resume: None,
            command: a.command,
            ask_first: Vec::new(),
            trust_project_settings: false,
        },
        cwd,
        env: a.env,
        timeout: a.timeout.unwrap_or(DEFAULT_TIMEOUT),
        max_output_bytes: a.max_output_kb.map(|kb| kb * 1024),
        permissions: Default::default(),
        workspace: WorkspaceReq::Shared {
            lock: match (a.workspace.as_deref(), a.lock.as_deref()) {
                (_, Some(l)) => Some(l.parse::<LockMode>().map_err(usage)?),
                (Some("locked"), None) => Some(LockMode::Exclusive),
                _ => None,
            },
            wait: a.wait,
        },
        plan_step: None,
    })
}

/// `--resume`: which run to continue.
#[derive(Debug)]
pub(crate) struct Resume {
    pub id: String,
    pub cwd_given: bool,
}

/// Messages replayed when a run cannot be resumed natively.
const REPLAY_MESSAGES: usize = 20;

/// Turn `req` into a continuation of an earlier run: the same cli (and command), its cwd, and
/// either the CLI's own session or the last messages replayed as an untrusted context block.
pub(crate) fn apply_resume(
    engine: &Engine,
    req: &mut TaskRequest,
    r: &Resume,
) -> anyhow::Result<()> {
    let store = engine.store();
    let id = store.resolve(&r.id)?;
    let row = store.get(&id)?.ok_or_else(|| UsageError(format!("no subagent {}", r.id)))?;
    if !row.status.is_terminal() {
        return Err(UsageError(format!(
            "{id} is still {}; resume a finished subagent",
            row.status
        ))
        .into());
    }
    req.backend = row.cli.parse().map_err(UsageError)?;
    if !r.cwd_given {
        req.cwd = row.working_directory.clone().into();
    }
    if req.spec.command.is_empty() {
        req.spec.command =
            serde_json::from_value(row.spec["spec"]["command"].clone()).unwrap_or_default();
    }
    if req.backend == BackendKind::Claude
        && let Some(native) = &row.native_session_id
    {
        req.spec.resume = Some(native.clone());
        return Ok(());
    }
    let mut messages = vec![format!("user: {}", row.prompt)];
    let mut after = 0;
    loop {
        let batch = store.events_after(&id, after, 1000)?;
        let Some(last) = batch.last() else { break };
        after = last.seq;
        for e in batch.iter().filter(|e| e.parent_tool_use_id.is_none()) {
            use herd_core::AgentEvent as E;
            match &e.event {
                E::Text { text } => messages.push(format!("assistant: {text}")),
                E::UserText { text } => messages.push(format!("user: {text}")),
                E::ToolCall { name, input, .. } => {
                    messages.push(format!("assistant called {name}: {input}"))
                }
                E::ToolResult { content, .. } => messages.push(format!("tool result: {content}")),
                _ => {}
            }
        }
    }
    let start = messages.len().saturating_sub(REPLAY_MESSAGES);
    let part = herd_core::context::Part {
        source: format!("history:{id}"),
        trusted: false,
        content: messages[start..].join("\n"),
    };
    req.spec.prompt = herd_core::context::assemble(&[part], &req.spec.prompt);
    Ok(())
}

async fn run_async(
    paths: StatePaths,
    mut req: TaskRequest,
    json_out: bool,
    resume: Option<Resume>,
    isolate: Option<Isolate>,
) -> anyhow::Result<u8> {
    let guard = GuardCommand::current_exe().context("cannot find the herd executable")?;
    let engine = Engine::open(paths, guard, "cli")?;
    if let Some(r) = &resume {
        apply_resume(&engine, &mut req, r)?;
    }
    let id = SubagentId::generate();
    let iso = match &isolate {
        Some(i) => Some(isolate_request(&engine, &id, &mut req, i).await?),
        None => None,
    };
    let (stop_tx, stop_rx) = watch::channel(StopLevel::None);
    tokio::spawn(super::signals::forward(stop_tx));
    let live = std::io::stderr().is_terminal();
    let paused = Arc::new(AtomicBool::new(false));
    // A person at this terminal answers the run's permission requests.
    let asker = (live && std::io::stdin().is_terminal()).then(|| {
        let events = engine.writer().subscribe();
        super::ask::spawn(engine.paths().clone(), id.clone(), events, paused.clone())
    });
    let (prog_tx, prog_rx) = watch::channel(Progress::default());
    let display =
        live.then(|| tokio::spawn(show_progress(id.clone(), req.backend, prog_rx, paused)));
    let mut report = engine.run(id, req, stop_rx, Some(prog_tx)).await;
    if let Some(a) = asker {
        a.abort();
    }
    if let Some(d) = display {
        d.abort();
        let _ = d.await;
        eprint!("\r\x1b[2K");
    }
    if let Some((plan, spec)) = &iso {
        if let Ok(r) = &mut report
            && r.status == Status::WaitingForMerge
        {
            let (status, failure) = engine.merge_and_close(&r.id, spec, plan).await?;
            r.status = status;
            r.failure = failure;
        }
        if let Some(w) = engine.close_isolation(plan).await? {
            eprintln!("herd: {w}");
        }
    }
    engine.shutdown().await?;
    let report = report.map_err(|e| match e {
        EngineError::InvalidPermissionConfig(m) => anyhow::Error::new(UsageError(m)),
        e => e.into(),
    })?;
    let ws = iso.as_ref().map(|(p, s)| (p.integration_branch.as_str(), s));
    print_report(&report, json_out, live, ws)?;
    Ok(exit_code(&report))
}

/// Put an isolated task in its own worktree: `herd/<id>/task` from `--base` (or HEAD),
/// merged into `--into` or `herd/<id>/integration`.
pub(crate) async fn isolate_request(
    engine: &Engine,
    id: &SubagentId,
    req: &mut TaskRequest,
    i: &Isolate,
) -> anyhow::Result<(IsolationPlan, IsolatedSpec)> {
    let plan = engine.open_isolation(&req.cwd, id.as_str(), None, i.into.as_deref()).await?;
    let base = match &i.base {
        Some(b) => match plan.resolve_base(b) {
            Ok(c) => (c, b.clone()),
            Err(e) => {
                let _ = engine.close_isolation(&plan).await?;
                return Err(UsageError(format!("--base {b}: {e}")).into());
            }
        },
        None => (plan.base.clone(), "HEAD".into()),
    };
    let spec =
        plan.spec("task", base, i.setup.clone(), i.auto_commit, &req.spec.prompt, req.timeout);
    req.cwd = plan.cwd_in(&spec, &req.cwd);
    req.workspace = WorkspaceReq::Isolated(Box::new(spec.clone()));
    Ok((plan, spec))
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

fn print_report(
    r: &TaskReport,
    json_out: bool,
    live: bool,
    ws: Option<(&str, &IsolatedSpec)>,
) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if json_out {
        let mut v = json!({
            "id": r.id,
            "status": r.status,
            "failure_reason": r.failure.as_ref().map(ToString::to_string),
            "native_session_id": r.native_session_id,
            "result": r.result,
            "num_turns": r.num_turns,
            "usage": {"input_tokens": r.usage.input_tokens, "output_tokens": r.usage.output_tokens},
            "cost_usd": r.cost_usd,
            "duration_ms": r.duration_ms,
        });
        if let Some((into, spec)) = ws {
            v["integration_branch"] = json!(into);
            v["branch"] = json!(spec.branch);
            v["worktree"] = json!(spec.path);
        }
        writeln!(out, "{v}")?;
    } else if let Some(text) = r.result.as_ref().filter(|t| !t.is_empty()) {
        writeln!(out, "{text}")?;
    }
    out.flush()?;
    if r.status != Status::Completed || live {
        let reason = r.failure.as_ref().map(|f| format!(": {f}")).unwrap_or_default();
        eprintln!(
            "herd: {} {}{reason} ({}, {})",
            r.id,
            r.status,
            fmt::duration_ms(r.duration_ms as i64),
            fmt::cost(r.cost_usd)
        );
    }
    Ok(())
}

fn exit_code(r: &TaskReport) -> u8 {
    match (r.status, &r.failure) {
        (Status::Completed, _) => exit::COMPLETED,
        (Status::Cancelled, _) => exit::CANCELLED,
        (_, Some(FailureReason::Timeout)) => exit::TIMEOUT,
        _ => exit::FAILED,
    }
}
