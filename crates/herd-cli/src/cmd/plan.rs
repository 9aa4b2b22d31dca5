//! `herd run PLAN`: one service call validates (exit 2 on any problem, nothing started) and
//! starts it; a live block of running steps on a terminal, plain lines when piped, a table or
//! JSON at the end.

use std::collections::{HashMap, HashSet};
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use herd_engine::service::{Caller, PlanOutline, PlanSource, PlanSpec, PlanView, Service};
use serde_json::json;
use tokio::sync::watch;

use super::ask::{Prompt, Scope};
use super::signals::Stopping;
use crate::cli::RunArgs;
use crate::{board, exit};

pub fn run(state_dir: &Path, a: RunArgs) -> anyhow::Result<u8> {
    if !a.dry_run
        && let Some(daemon) = super::remote::connect(state_dir)?
    {
        return super::remote::plan(daemon, a);
    }
    if a.detach {
        return Err(crate::UsageError(format!(
            "--detach leaves the plan to herd serve, and none runs on {}; start one (herd serve) \
             or run the plan in the foreground",
            state_dir.display()
        ))
        .into());
    }
    // Without a file, `--resume` names the plan (clap requires one of the two).
    let spec = PlanSpec {
        source: PlanSource::File(a.plan.clone().unwrap_or_default()),
        max_concurrent: a.max_concurrent.map(|n| n as usize),
        into: a.into.clone(),
        non_interactive: a.asking.nobody_answers(a.json),
    };
    let mut opts = super::service_options(&crate::state::project_root()?, "cli")?;
    // A person's own plan: the flag, else the project's config, bounds it; without either
    // the plan's own limits do (the pool is this command's alone).
    match a.max_concurrent {
        Some(n) => opts.max_concurrent = n as usize,
        None if !opts.configured_max_concurrent => opts.max_concurrent = 20,
        None => {}
    }
    let svc = Service::open(state_dir, opts)?;
    let caller = super::caller(format!("the terminal of herd pid {}", std::process::id()))?;
    if a.dry_run {
        let outline = svc.check_plan(&caller, &spec)?;
        return dry_run(&outline, a.json);
    }
    if svc.store_is_shared() && a.resume.is_none() {
        return super::worker::submit_and_watch(&svc, &caller, spec, a.json);
    }
    let rt = super::runtime()?;
    // On a worker, not on this thread: the plan loop and its runs wake each other on every
    // step, and a wake-up within the pool's threads is cheaper than one across to this one.
    let run = rt.spawn(async move {
        let out = run_async(&svc, &caller, spec, a.resume, a.json).await;
        svc.shutdown().await?;
        out
    });
    rt.block_on(run).context("the plan's task failed")?
}

fn dry_run(o: &PlanOutline, json_out: bool) -> anyhow::Result<u8> {
    let mut out = std::io::stdout().lock();
    if json_out {
        let ids: Vec<Vec<&str>> =
            o.layers.iter().map(|l| l.iter().map(|s| s.id.as_str()).collect()).collect();
        writeln!(out, "{}", json!({"name": o.name, "steps": o.steps, "layers": ids}))?;
        return Ok(exit::COMPLETED);
    }
    writeln!(out, "plan {}: {} steps in {} layers (valid)", o.name, o.steps, o.layers.len())?;
    for (n, layer) in o.layers.iter().enumerate() {
        let names: Vec<String> = layer
            .iter()
            .map(|s| {
                let ws = match s.workspace {
                    herd_core::workspace::WorkspaceMode::Shared => String::new(),
                    m => format!(", {m:?}").to_lowercase(),
                };
                format!("{} ({}{ws})", s.id, s.cli)
            })
            .collect();
        writeln!(out, "  layer {}: {}", n + 1, names.join(", "))?;
    }
    Ok(exit::COMPLETED)
}

async fn run_async(
    svc: &Service,
    caller: &Caller,
    spec: PlanSpec,
    resume: Option<String>,
    json_out: bool,
) -> anyhow::Result<u8> {
    let interactive = !spec.non_interactive;
    let started = match resume {
        Some(id) => svc.resume_plan(caller, &id, spec.max_concurrent, !interactive).await?,
        None => svc.run_plan(caller, spec).await?,
    };
    // What the plan does is read from the record (the same counts and order every reader
    // sees), not from the in-process updates.
    drop(started.updates);
    let live = std::io::stderr().is_terminal();
    let stopping: Stopping = Arc::default();
    let signals = tokio::spawn(super::signals::cancel_on_signal(
        svc.clone(),
        started.id.clone(),
        caller.clone(),
        live.then(|| stopping.clone()),
    ));
    let paused = Arc::new(AtomicBool::new(false));
    let prompt = Arc::new(Prompt::default());
    // A person at this terminal answers the steps' calls, one at a time, at a prompt the
    // display shows under the steps.
    let asker = (live && interactive && std::io::stdin().is_terminal()).then(|| {
        let scope = Scope::Plan(started.id.clone());
        super::ask::spawn(svc, scope, caller.clone(), paused.clone(), Some(prompt.clone()))
    });
    let (done_tx, done) = watch::channel(false);
    let display = tokio::spawn(show(
        svc.clone(),
        started.id.clone(),
        Display { live, announce_waits: asker.is_none(), paused, stopping, prompt },
        done,
    ));
    let report = svc.plan_report(&started.id).await;
    done_tx.send_replace(true);
    let _ = display.await;
    signals.abort();
    if let Some(a) = asker {
        a.abort();
    }
    let report = report?;
    for w in &report.warnings {
        eprintln!("herd: {w}");
    }
    let view = svc.plan(&report.id)?;
    print(&view, json_out)?;
    let denials = view.steps.iter().flatten().any(|s| s.unanswered_denials > 0);
    Ok(match report.status.as_str() {
        "completed" if denials => exit::DENIED,
        "completed" => exit::COMPLETED,
        "cancelled" => exit::CANCELLED,
        _ => exit::FAILED,
    })
}

/// How the plan is shown.
struct Display {
    /// On a terminal: a redrawn block under the announcements.
    live: bool,
    /// Say which calls wait for a person (nobody is prompted here).
    announce_waits: bool,
    /// A prompt is on the screen: leave it alone.
    paused: Arc<AtomicBool>,
    stopping: Stopping,
    /// The question to the person, drawn under the steps.
    prompt: Arc<Prompt>,
}

/// How often the record is read for what the plan did.
const FRAME: Duration = Duration::from_millis(200);

/// Progress: each transition announced once, in the order it was stored, with its run; on a
/// terminal a block of the active steps under them, redrawn. Ends once `done` and drained.
async fn show(svc: Service, id: String, d: Display, mut done: watch::Receiver<bool>) {
    let mut err = std::io::BufWriter::new(std::io::stderr());
    let mut after = 0i64;
    let mut drawn = 0usize;
    let mut told = HashSet::new();
    // Each step's latest run, as its events said.
    let mut runs: HashMap<String, String> = HashMap::new();
    let mut tick = tokio::time::interval(FRAME);
    for frame in 0usize.. {
        let finished = *done.borrow();
        if !finished {
            tokio::select! {
                _ = tick.tick() => {}
                _ = done.changed() => {}
            }
        }
        let finished = finished || *done.borrow();
        if d.live && d.paused.load(Ordering::SeqCst) && !finished {
            continue;
        }
        // Read before the events: a step that completed after this read had its calls'
        // fates recorded before it completed. Only the live block needs the whole plan: read
        // five times a second, every step and run of it made 2000 `/bin/true` steps ~20%
        // slower (benches/dispatch.rs). Without it, a completed step's run alone is read.
        let plan = if d.live { svc.plan(&id).ok() } else { None };
        let mut lines = Vec::new();
        while let Ok(batch) = svc.plan_events(&id, after, 500) {
            for e in &batch {
                after = e.seq;
                // A step's end may not name its run: its start (read before) did.
                if let (Some(step), Some(run)) = (&e.step, &e.subagent_id) {
                    runs.insert(step.clone(), run.clone());
                }
                lines.extend(match &plan {
                    Some(p) => board::announce(e, p.steps.as_deref().unwrap_or_default()),
                    None => board::announce_with(e, || {
                        let n = svc.unanswered_denials(runs.get(e.step.as_deref()?)?).ok()?;
                        (n > 0).then(|| board::unanswered(n))
                    }),
                });
            }
            if batch.len() < 500 {
                break;
            }
        }
        if d.announce_waits {
            for r in Scope::Plan(id.clone()).pending(&svc) {
                if told.insert(r.id.clone()) {
                    lines.push(super::ask::notice(&r));
                }
            }
        }
        if d.live {
            // Back to the block's first line: the lines it took, and each line the person
            // typed at the prompt (the terminal echoed them).
            let up = drawn + d.prompt.typed.swap(0, Ordering::SeqCst);
            if up > 0 {
                let _ = write!(err, "\r\x1b[{up}A");
            }
            let _ = write!(err, "\r\x1b[J");
            drawn = 0;
        }
        for l in &lines {
            let _ = writeln!(err, "{l}");
        }
        if d.live
            && !finished
            && let Some(plan) = &plan
        {
            let tools = current_tools(&svc, plan);
            let stopping = d.stopping.load(Ordering::SeqCst);
            let block = board::live(
                &board::Live { plan, tools: &tools, stopping, tick: frame },
                terminal_width(),
            );
            for l in &block {
                let _ = writeln!(err, "{l}");
            }
            drawn = block.len();
            if let Some(q) = d.prompt.question() {
                let ask = q.lines(terminal_width());
                // The cursor stays on the last line, after the question.
                drawn += ask.len() - 1;
                let _ = write!(err, "{}", ask.join("\n"));
            }
        }
        let _ = err.flush();
        if finished {
            break;
        }
    }
}

/// The tool each running step's agent called last, by step.
fn current_tools(svc: &Service, plan: &PlanView) -> HashMap<String, String> {
    plan.steps
        .iter()
        .flatten()
        .filter(|s| matches!(s.state.as_str(), "running" | "waiting"))
        .take(16)
        .filter_map(|s| {
            let run = s.subagent_id.as_deref()?;
            Some((s.id.clone(), svc.current_tool(run).ok()??))
        })
        .collect()
}

/// The width of the terminal on stderr (80 when it cannot be read).
pub(crate) fn terminal_width() -> usize {
    rustix::termios::tcgetwinsize(std::io::stderr())
        .ok()
        .map(|w| usize::from(w.ws_col))
        .filter(|w| *w >= 20)
        .unwrap_or(80)
}

/// The plan as it ended: its view as JSON (`herd show PLAN --json`'s shape), or the table of
/// its steps, what they produced, and a summary line.
fn print(p: &PlanView, json_out: bool) -> anyhow::Result<()> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if json_out {
        serde_json::to_writer(&mut out, p)?;
        writeln!(out)?;
        out.flush()?;
        return Ok(());
    }
    let width = if std::io::stdout().is_terminal() {
        rustix::termios::tcgetwinsize(std::io::stdout())
            .ok()
            .map_or(80, |w| usize::from(w.ws_col).max(20))
    } else {
        80
    };
    write!(out, "{}", board::table(p, width, false))?;
    show_outputs(&mut out, p)?;
    if let Some(b) = &p.integration_branch {
        writeln!(out, "isolated steps merged into {b}")?;
    }
    writeln!(out, "{}", board::summary(p))?;
    out.flush()?;
    Ok(())
}

/// Lines of an output file shown at the end of a plan.
const OUTPUT_LINES: usize = 20;

/// What completed steps produced: each declared output that exists, with its first lines —
/// the plan's result is usually a file, and this is where the person finds it.
fn show_outputs(out: &mut impl Write, r: &PlanView) -> anyhow::Result<()> {
    let files: Vec<&std::path::PathBuf> = r
        .steps
        .iter()
        .flatten()
        .filter(|s| s.status == "completed")
        .flat_map(|s| &s.outputs)
        .filter(|p| p.is_file())
        .collect();
    let cwd = std::env::current_dir().unwrap_or_default();
    for path in &files {
        let shown = path.strip_prefix(&cwd).unwrap_or(path);
        let text = std::fs::read(path).map(|b| String::from_utf8_lossy(&b).into_owned());
        let Ok(text) = text else { continue };
        let total = text.lines().count();
        writeln!(out, "\n{} ({total} lines):", shown.display())?;
        for line in text.lines().take(OUTPUT_LINES) {
            writeln!(out, "  {line}")?;
        }
        if total > OUTPUT_LINES {
            writeln!(out, "  … {} more lines in {}", total - OUTPUT_LINES, shown.display())?;
        }
    }
    if !files.is_empty() {
        writeln!(out)?;
    }
    Ok(())
}
