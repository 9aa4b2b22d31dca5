//! `herd run PLAN`: one service call validates (exit 2 on any problem, nothing started) and
//! starts it; a live block of running steps on a terminal, plain lines when piped, a table or
//! JSON at the end.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use herd_engine::service::{
    Caller, PlanOutline, PlanReport, PlanSource, PlanSpec, PlanUpdate, Service, ServiceOptions,
};
use serde_json::json;
use tokio::sync::mpsc;

use crate::cli::RunArgs;
use crate::{exit, fmt};

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
    };
    let mut opts = ServiceOptions::for_project(&crate::state::project_root()?, "cli")?;
    // A person's own plan: the flag, else the project's config, bounds it; without either
    // the plan's own limits do (the pool is this command's alone).
    match a.max_concurrent {
        Some(n) => opts.max_concurrent = n as usize,
        None if !opts.configured_max_concurrent => opts.max_concurrent = 20,
        None => {}
    }
    if let Some(b) = super::STORE.get() {
        opts.store = b.clone();
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
    let started = match resume {
        Some(id) => svc.resume_plan(caller, &id, spec.max_concurrent).await?,
        None => svc.run_plan(caller, spec).await?,
    };
    let signals = tokio::spawn(super::signals::cancel_on_signal(
        svc.clone(),
        started.id.clone(),
        caller.clone(),
    ));
    let live = std::io::stderr().is_terminal();
    let display = tokio::spawn(show(started.updates, live));
    let report = svc.plan_report(&started.id).await;
    let _ = display.await;
    signals.abort();
    let report = report?;
    for w in &report.warnings {
        eprintln!("herd: {w}");
    }
    print(&report, json_out)?;
    Ok(match report.status.as_str() {
        "completed" => exit::COMPLETED,
        "cancelled" => exit::CANCELLED,
        _ => exit::FAILED,
    })
}

/// Progress: a redrawn block on a terminal, one line per change when piped.
async fn show(mut rx: mpsc::UnboundedReceiver<PlanUpdate>, live: bool) {
    let mut running: Vec<(String, Instant)> = Vec::new();
    let mut counts = String::new();
    let mut drawn = 0usize;
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    // Written out once the updates queued so far are handled, not line by line: a plan of short
    // steps sends thousands, and each write wakes whoever reads a piped stderr.
    let mut err = std::io::BufWriter::new(std::io::stderr());
    loop {
        let update = tokio::select! {
            u = rx.recv() => match u { Some(u) => Some(u), None => break },
            _ = tick.tick(), if live => None,
        };
        match update {
            Some(PlanUpdate::Started { step, subagent, attempt }) => {
                if !live {
                    let again =
                        if attempt > 1 { format!(" (attempt {attempt})") } else { String::new() };
                    let _ = writeln!(err, "herd: {step} started{again} as {subagent}");
                }
                running.retain(|(s, _)| *s != step);
                running.push((step, Instant::now()));
            }
            Some(PlanUpdate::Finished { step, status, reason }) => {
                running.retain(|(s, _)| *s != step);
                let why = reason.map(|r| format!(": {r}")).unwrap_or_default();
                if live {
                    let _ = write!(err, "\x1b[{drawn}A\x1b[J");
                    drawn = 0;
                }
                let _ = writeln!(err, "herd: {step} {status}{why}");
            }
            Some(PlanUpdate::Counts { running: r, queued, done, failed, total }) => {
                counts =
                    format!("{done}/{total} done, {failed} failed, {r} running, {queued} queued");
            }
            None => {}
        }
        if !rx.is_empty() {
            continue;
        }
        if live {
            let mut block = String::new();
            for (s, t) in &running {
                block.push_str(&format!("  ⠿ {s} · {:.1}s\n", t.elapsed().as_secs_f64()));
            }
            block.push_str(&format!("  {counts}\n"));
            let up = if drawn > 0 { format!("\x1b[{drawn}A") } else { String::new() };
            let _ = write!(err, "{up}\x1b[J{block}");
            drawn = running.len() + 1;
        }
        let _ = err.flush();
    }
    if live && drawn > 0 {
        let _ = write!(err, "\x1b[{drawn}A\x1b[J");
    }
    let _ = err.flush();
}

/// `herd run --json`: keys in alphabetical order, as scripts have seen them so far.
#[derive(serde::Serialize)]
struct JsonReport<'a> {
    cost_usd: f64,
    id: &'a str,
    integration_branch: Option<&'a str>,
    status: &'a str,
    steps: Vec<JsonStep<'a>>,
    usage: JsonUsage,
}

#[derive(serde::Serialize)]
struct JsonStep<'a> {
    attempts: u32,
    cost_usd: Option<f64>,
    duration_ms: Option<u64>,
    failure_reason: Option<&'a str>,
    id: &'a str,
    outputs: &'a [std::path::PathBuf],
    status: &'a str,
    subagent_id: Option<&'a str>,
    usage: JsonUsage,
}

#[derive(serde::Serialize)]
struct JsonUsage {
    input_tokens: u64,
    output_tokens: u64,
}

impl<'a> JsonReport<'a> {
    fn of(r: &'a PlanReport) -> Self {
        let usage = |u: &herd_core::Usage| JsonUsage {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
        };
        Self {
            cost_usd: r.cost_usd,
            id: &r.id,
            integration_branch: r.integration_branch.as_deref(),
            status: &r.status,
            steps: r
                .steps
                .iter()
                .map(|s| JsonStep {
                    attempts: s.attempts,
                    cost_usd: s.cost_usd,
                    duration_ms: s.duration_ms,
                    failure_reason: s.failure_reason.as_deref(),
                    id: &s.id,
                    outputs: &s.outputs,
                    status: &s.status,
                    subagent_id: s.subagent_id.as_deref(),
                    usage: usage(&s.usage),
                })
                .collect(),
            usage: usage(&r.usage),
        }
    }
}

fn print(r: &PlanReport, json_out: bool) -> anyhow::Result<()> {
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if json_out {
        serde_json::to_writer(&mut out, &JsonReport::of(r))?;
        writeln!(out)?;
        out.flush()?;
        return Ok(());
    }
    writeln!(
        out,
        "{:<20}  {:<10}  {:>8}  {:>7}  {:>8}  REASON",
        "STEP", "STATUS", "DURATION", "TOKENS", "COST"
    )?;
    for s in &r.steps {
        writeln!(
            out,
            "{:<20}  {:<10}  {:>8}  {:>7}  {:>8}  {}",
            fmt::oneline(&s.id, 20),
            s.status,
            s.duration_ms.map_or_else(|| "-".into(), |d| fmt::duration_ms(d as i64)),
            fmt::count(s.usage.input_tokens + s.usage.output_tokens),
            fmt::cost(s.cost_usd),
            s.failure_reason.as_deref().unwrap_or("")
        )?;
    }
    let done = r.steps.iter().filter(|s| s.status == "completed").count();
    show_outputs(&mut out, r)?;
    if let Some(b) = &r.integration_branch {
        writeln!(out, "isolated steps merged into {b}")?;
    }
    writeln!(
        out,
        "plan {} {}: {done}/{} steps completed, {} tokens, {}",
        r.id,
        r.status,
        r.steps.len(),
        fmt::count(r.usage.input_tokens + r.usage.output_tokens),
        fmt::cost(Some(r.cost_usd))
    )?;
    out.flush()?;
    Ok(())
}

/// Lines of an output file shown at the end of a plan.
const OUTPUT_LINES: usize = 20;

/// What completed steps produced: each declared output that exists, with its first lines —
/// the plan's result is usually a file, and this is where the person finds it.
fn show_outputs(out: &mut impl Write, r: &PlanReport) -> anyhow::Result<()> {
    let files: Vec<&std::path::PathBuf> = r
        .steps
        .iter()
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
