//! Client mode: with `herd serve` running on the state directory, the commands that start,
//! follow, answer and stop runs go through it (its pool, its streams); without, in-process.
//!
//! Each function here is one command's daemon path; the in-process path stays in the
//! command's own module, and both render with the same code (the daemon's answers are turned
//! back into the service's views).

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;

use anyhow::Context;
use herd_engine::service::{ApiError, Caller, PermissionRequestView, RunView};
use herd_server::pb::{self, agent_event::Event};
use herd_server::{Client, convert, request};
use tokio::sync::mpsc;

use crate::cli::{AttachArgs, LogsArgs, PsArgs, RunArgs, TaskArgs};

/// Set to `1` to ignore a running daemon (everything in this process).
pub const NO_DAEMON_VAR: &str = "HERD_NO_DAEMON";

/// A running daemon of this state directory, and the runtime its connection lives on.
pub struct Daemon {
    rt: tokio::runtime::Runtime,
    conn: Conn,
}

/// The connection to a daemon.
struct Conn {
    client: Client,
}

/// The daemon of `state_dir`, when one runs there and takes a connection.
pub fn connect(state_dir: &Path) -> anyhow::Result<Option<Daemon>> {
    if std::env::var(NO_DAEMON_VAR).is_ok_and(|v| v == "1") {
        return Ok(None);
    }
    if !herd_server::client::socket_path(state_dir).exists() {
        return Ok(None);
    }
    let rt = super::runtime()?;
    // A socket nobody answers on is a dead daemon's: in-process then.
    let Some(client) = rt.block_on(herd_server::client::running(state_dir)) else {
        return Ok(None);
    };
    Ok(Some(Daemon { rt, conn: Conn { client } }))
}

/// A gRPC status as the service error it stands for (its exit code with it).
fn api(s: herd_server::tonic::Status) -> anyhow::Error {
    anyhow::Error::new(convert::api_error(&s))
}

fn context(caller: &Caller) -> anyhow::Result<pb::CallerContext> {
    Ok(request::context(caller)?)
}

impl Conn {
    fn view(&self, info: pb::SubagentInfo) -> anyhow::Result<RunView> {
        Ok(convert::run_view(info)?)
    }

    async fn get(&mut self, id: &str) -> anyhow::Result<RunView> {
        let req = pb::GetSubagentRequest { subagent_id: id.into() };
        let info = self.client.get_subagent(req).await.map_err(api)?.into_inner();
        self.view(info)
    }
}

/// `herd task` through the daemon: spawn, then follow to the end (or return at once with
/// `--detach`); the report as in-process.
pub fn task(d: Daemon, args: TaskArgs) -> anyhow::Result<u8> {
    let (json_out, explain, detach) = (args.json, args.explain, args.detach);
    let explicit = args.permissions.asking.non_interactive;
    let mut spec = super::task::spec(args)?;
    // A detached run is answered later (herd approve, herd attach), whatever this terminal is.
    if detach {
        spec.non_interactive = explicit;
    }
    let caller = super::caller(format!("the terminal of herd pid {}", std::process::id()))?;
    let req = request::spawn_request(spec, context(&caller)?)?;
    let Daemon { rt, conn: mut d } = d;
    rt.block_on(async move {
        let spawned = d.client.spawn_subagent(req).await.map_err(api)?.into_inner();
        if explain {
            eprintln!("herd: cli {}: {}", spawned.cli, spawned.cli_reason);
        }
        let id = spawned.subagent_id;
        if detach {
            println!("{id}");
            return Ok(crate::exit::COMPLETED);
        }
        let live = std::io::stderr().is_terminal();
        let asks = live && std::io::stdin().is_terminal();
        follow(
            &mut d,
            &caller,
            &id,
            Follow { print: None, asks, messages: false, cancel_on_signal: true },
        )
        .await?;
        if live {
            eprint!("\r\x1b[2K");
        }
        let run = d.get(&id).await?;
        super::task::print_report(&run, json_out, live)?;
        Ok(super::task::exit_code(&run))
    })
}

/// `herd attach ID`: follow a run live, answer its permission requests, send it messages.
pub fn attach(state_dir: &Path, a: AttachArgs) -> anyhow::Result<u8> {
    let Some(d) = connect(state_dir)? else {
        return Err(ApiError::precondition(format!(
            "herd attach follows a run of herd serve, and none runs on {} (herd logs --follow {} \
             follows a run of this machine without it)",
            state_dir.display(),
            a.id
        ))
        .into());
    };
    let caller = super::caller(super::person())?;
    let Daemon { rt, conn: mut d } = d;
    rt.block_on(async move {
        let run = d.get(&a.id).await?;
        if std::io::stderr().is_terminal() {
            eprintln!(
                "herd: attached to {} ({}); y/n/a answers a permission request, any other line is \
                 sent to the agent; Ctrl-C detaches",
                run.id, run.status
            );
        }
        let f = Follow { print: Some(a.json), asks: true, messages: true, cancel_on_signal: false };
        follow(&mut d, &caller, &run.id, f).await?;
        let run = d.get(&run.id).await?;
        eprintln!("herd: {} {}", run.id, run.status);
        Ok(super::task::exit_code(&run))
    })
}

/// How to follow a run.
struct Follow {
    /// Print every event (`Some(json)`), else only prompts.
    print: Option<bool>,
    /// Ask about permission requests on stdin.
    asks: bool,
    /// Send other stdin lines as messages.
    messages: bool,
    /// Ctrl-C cancels the run (else it detaches).
    cancel_on_signal: bool,
}

/// Follow run `id` to its close (or Ctrl-C): its events from the daemon's stream.
async fn follow(d: &mut Conn, caller: &Caller, id: &str, f: Follow) -> anyhow::Result<()> {
    let req =
        pb::WatchSubagentRequest { subagent_id: id.into(), from_sequence: 1, with_json: true };
    let mut stream = d.client.watch_subagent(req).await.map_err(api)?.into_inner();
    let lines = (f.asks || f.messages).then(stdin_lines);
    let mut lines = lines.unwrap_or_else(|| mpsc::channel(1).1);
    let who = context(caller)?;
    let mut pending: Option<String> = None;
    let mut signals = Signals::new();
    let mut cancels = 0;
    loop {
        tokio::select! {
            next = stream.message() => {
                let Some(e) = next.map_err(api)? else { return Ok(()) };
                if let Some(json) = f.print {
                    let stored = convert::stored_event(&e)?;
                    let mut out = std::io::stdout().lock();
                    super::inspect::print_event(&mut out, &stored, json)?;
                    out.flush()?;
                }
                match &e.event {
                    Some(Event::PermissionRequested(p)) if f.asks => {
                        eprint!(
                            "\r\x1b[2Kherd: the agent wants to use {}: {}\n  allow? [y]es / [n]o / [a]lways for this call ({}, {}s) ",
                            p.tool,
                            crate::fmt::oneline(&p.input_preview, 300),
                            p.request_id,
                            p.timeout_ms / 1000
                        );
                        let _ = std::io::stderr().flush();
                        pending = Some(p.request_id.clone());
                    }
                    Some(Event::PermissionDecided(p)) if pending.as_deref() == Some(p.request_id.as_str()) => {
                        eprintln!("\r\x1b[2Kherd: {} {} by {}", p.tool, p.decision, p.by);
                        pending = None;
                    }
                    _ => {}
                }
            }
            Some(line) = lines.recv() => {
                let line = line.trim().to_owned();
                let answer = match line.to_ascii_lowercase().as_str() {
                    "y" | "yes" => Some((true, false)),
                    "a" | "always" => Some((true, true)),
                    "n" | "no" => Some((false, false)),
                    // Nothing typed at a prompt of `herd task`: no, as in-process.
                    "" if !f.messages => Some((false, false)),
                    _ => None,
                };
                if let (Some(request), Some((allow, always))) = (pending.clone(), answer) {
                    let reason = if allow { String::new() } else { "denied at the terminal".into() };
                    let a = pb::PermissionAnswer { request_id: request, allow, always, reason, caller: Some(who.clone()) };
                    if let Err(e) = d.client.answer_permission_request(a).await {
                        eprintln!("herd: {}", e.message());
                    }
                    pending = None;
                } else if pending.is_some() && !f.messages {
                    eprint!("  y, n or a? ");
                } else if f.messages && !line.is_empty() {
                    let input = pb::SubagentInput {
                        subagent_id: id.into(),
                        input: Some(pb::subagent_input::Input::Message(line)),
                        caller: Some(who.clone()),
                    };
                    match d.client.send_to_subagent(input).await {
                        Ok(_) => eprintln!("herd: sent (it reads it when its current turn ends)"),
                        Err(e) => eprintln!("herd: {}", e.message()),
                    }
                }
            }
            () = signals.next() => {
                if !f.cancel_on_signal {
                    return Ok(());
                }
                cancels += 1;
                if std::io::stderr().is_terminal() && cancels == 1 {
                    eprintln!("\r\x1b[2Kherd: stopping… (Ctrl-C again to kill)");
                }
                let req = pb::CancelSubagentRequest {
                    subagent_id: id.into(),
                    reason: "interrupted at the terminal".into(),
                    force: cancels > 1,
                    cleanup_worktree: false,
                    caller: Some(who.clone()),
                };
                let mut c = d.client.clone();
                // Not waited for: the stream shows the stop, and a second signal is heard.
                tokio::spawn(async move {
                    if let Err(e) = c.cancel_subagent(req).await {
                        eprintln!("herd: {}", e.message());
                    }
                });
            }
        }
    }
}

/// SIGINT and SIGTERM, as a stream of wake-ups (never, if they cannot be caught).
struct Signals(Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>);

impl Signals {
    fn new() -> Self {
        use tokio::signal::unix::{SignalKind, signal};
        Self(signal(SignalKind::interrupt()).ok().zip(signal(SignalKind::terminate()).ok()))
    }

    async fn next(&mut self) {
        match self.0.as_mut() {
            Some((int, term)) => {
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                }
            }
            None => std::future::pending().await,
        }
    }
}

/// Lines typed on stdin, from a thread of their own.
fn stdin_lines() -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel(4);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.blocking_send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// `herd run PLAN` through the daemon: the plan's text (relative paths resolve against this
/// directory), its events as they happen, its view at the end.
pub fn plan(d: Daemon, a: RunArgs) -> anyhow::Result<u8> {
    let caller = super::caller(format!("the terminal of herd pid {}", std::process::id()))?;
    let ctx = context(&caller)?;
    // A detached plan is answered later (herd approve, herd attach), whatever this terminal is.
    let non_interactive =
        if a.detach { a.asking.non_interactive } else { a.asking.nobody_answers(a.json) };
    let start = match (&a.resume, &a.plan) {
        (Some(id), _) => Start::Resume(pb::ResumeOrchestrationRequest {
            orchestration_id: id.clone(),
            max_concurrent: a.max_concurrent.unwrap_or(0),
            caller: Some(ctx),
            non_interactive,
        }),
        (None, plan) => {
            let plan = plan.clone().unwrap_or_default();
            let text = std::fs::read_to_string(&plan)
                .with_context(|| format!("cannot read plan {}", plan.display()))
                .map_err(|e| ApiError::invalid(format!("{e:#}")))?;
            Start::Create(pb::OrchestrationPlan {
                plan_text: text,
                name: plan.display().to_string(),
                max_concurrent: a.max_concurrent.unwrap_or(0),
                into: a.into.clone().unwrap_or_default(),
                caller: Some(ctx),
                non_interactive,
                ..Default::default()
            })
        }
    };
    let Daemon { rt, conn: mut d } = d;
    rt.block_on(async move {
        let started = match start {
            Start::Create(create) => d.client.create_orchestration(create).await,
            Start::Resume(resume) => d.client.resume_orchestration(resume).await,
        };
        let started = started.map_err(api)?.into_inner();
        let id = started.orchestration_id;
        if a.detach {
            println!("{id}");
            return Ok(crate::exit::COMPLETED);
        }
        eprintln!("herd: plan {} ({} steps) runs in herd serve as {id}", started.name, started.steps);
        let req = pb::WatchOrchestrationRequest { orchestration_id: id.clone(), from_sequence: 1, include_agent_events: false };
        let mut stream = d.client.watch_orchestration(req).await.map_err(api)?.into_inner();
        let mut signals = Signals::new();
        loop {
            tokio::select! {
                next = stream.message() => {
                    let Some(e) = next.map_err(api)? else { break };
                    if let Some(line) = plan_line(&e) {
                        eprintln!("herd: {line}");
                    }
                }
                () = signals.next() => {
                    eprintln!("herd: stopping plan {id}…");
                    let req = pb::CancelOrchestrationRequest { orchestration_id: id.clone(), reason: "interrupted at the terminal".into(), force: false, caller: None };
                    let mut c = d.client.clone();
                    tokio::spawn(async move { let _ = c.cancel_orchestration(req).await; });
                }
            }
        }
        let plan = d.client.get_orchestration(pb::GetOrchestrationRequest { orchestration_id: id }).await.map_err(api)?.into_inner();
        if a.json {
            println!("{}", serde_json::json!({
                "id": plan.id, "name": plan.name, "status": plan.status, "cost_usd": plan.cost_usd,
                "steps": plan.steps.iter().map(|s| serde_json::json!({
                    "id": s.id, "status": s.status, "failure_reason": s.failure_reason, "subagent_id": s.subagent_id,
                })).collect::<Vec<_>>(),
            }));
        } else {
            for s in &plan.steps {
                let why = if s.failure_reason.is_empty() { String::new() } else { format!(" ({})", s.failure_reason) };
                println!("{:<20} {:<10} {}{why}", s.id, s.status, s.subagent_id);
            }
        }
        eprintln!("herd: plan {} {} ({})", plan.id, plan.status, crate::fmt::cost(Some(plan.cost_usd)));
        Ok(if plan.status == "completed" { crate::exit::COMPLETED } else { crate::exit::FAILED })
    })
}

/// A new plan, or an ended one taken up again.
enum Start {
    Create(pb::OrchestrationPlan),
    Resume(pb::ResumeOrchestrationRequest),
}

/// One line for a person about a plan event (none for the plan's bookkeeping).
fn plan_line(e: &pb::OrchestrationEvent) -> Option<String> {
    use pb::orchestration_event::Event as E;
    Some(match e.event.as_ref()? {
        E::StepStarted(s) => format!("{} started ({})", s.step_id, s.subagent_id),
        E::StepCompleted(s) => format!("{} completed", s.step_id),
        E::StepFailed(s) => format!("{} failed: {}", s.step_id, s.reason),
        E::StepOther(s) => format!("{} {}", s.step_id, s.kind.trim_start_matches("step_")),
        _ => return None,
    })
}

/// `herd ps` through the daemon.
pub fn ps(mut d: Daemon, a: &PsArgs) -> anyhow::Result<Vec<RunView>> {
    // `--limit 0` means all: page through them.
    let limit = if a.rows.limit == 0 { usize::MAX } else { a.rows.limit };
    let mut rows = Vec::new();
    let mut page_token = String::new();
    while rows.len() < limit {
        let req = pb::ListSubagentsRequest {
            all: a.rows.all,
            page_size: u32::try_from(limit - rows.len()).unwrap_or(u32::MAX).min(1000),
            page_token: std::mem::take(&mut page_token),
            ..Default::default()
        };
        let list = d.rt.block_on(d.conn.client.list_subagents(req)).map_err(api)?.into_inner();
        for i in list.subagents {
            rows.push(d.conn.view(i)?);
        }
        if list.next_page_token.is_empty() {
            break;
        }
        page_token = list.next_page_token;
    }
    Ok(rows)
}

/// `herd logs --follow` through the daemon: its stream instead of polling.
pub fn logs_follow(d: Daemon, a: &LogsArgs) -> anyhow::Result<u8> {
    let Daemon { rt, conn: mut d } = d;
    rt.block_on(async move {
        let req = pb::WatchSubagentRequest {
            subagent_id: a.id.clone(),
            from_sequence: 1,
            with_json: true,
        };
        let mut stream = d.client.watch_subagent(req).await.map_err(api)?.into_inner();
        while let Some(e) = stream.message().await.map_err(api)? {
            let stored = convert::stored_event(&e)?;
            let mut out = std::io::stdout().lock();
            super::inspect::print_event(&mut out, &stored, a.json)?;
            out.flush()?;
        }
        Ok(0)
    })
}

/// `herd approve` / `herd deny` through the daemon.
pub fn answer(
    mut d: Daemon,
    id: &str,
    allow: bool,
    always: bool,
    reason: Option<String>,
) -> anyhow::Result<PermissionRequestView> {
    let caller = super::caller(super::person())?;
    let a = pb::PermissionAnswer {
        request_id: id.into(),
        allow,
        always,
        reason: reason.unwrap_or_default(),
        caller: Some(context(&caller)?),
    };
    let r = d.rt.block_on(d.conn.client.answer_permission_request(a)).map_err(api)?.into_inner();
    Ok(convert::permission_view(r))
}

/// The requests waiting for a person, through the daemon.
pub fn pending(mut d: Daemon) -> anyhow::Result<Vec<PermissionRequestView>> {
    let req = pb::ListPermissionRequestsRequest::default();
    let r = d.rt.block_on(d.conn.client.list_permission_requests(req)).map_err(api)?.into_inner();
    Ok(r.requests.into_iter().map(convert::permission_view).collect())
}

/// `herd cancel` through the daemon: its state before and after.
pub fn cancel(
    d: Daemon,
    id: &str,
    force: bool,
    cleanup: bool,
) -> anyhow::Result<(RunView, RunView)> {
    let caller = super::caller(super::person())?;
    let Daemon { rt, conn: mut d } = d;
    rt.block_on(async move {
        let before = d.get(id).await?;
        let req = pb::CancelSubagentRequest {
            subagent_id: before.id.clone(),
            reason: "herd cancel".into(),
            force,
            cleanup_worktree: cleanup,
            caller: Some(context(&caller)?),
        };
        let r = d.client.cancel_subagent(req).await.map_err(api)?.into_inner();
        let after = d.view(r.subagent.unwrap_or_default())?;
        Ok((before, after))
    })
}
