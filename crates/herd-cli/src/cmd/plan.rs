//! `herd run PLAN`: validate (exit 2 on any problem, nothing started), then run every step —
//! a live block of running steps on a terminal, plain lines when piped, a table or JSON at the end.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use std::collections::{BTreeMap, HashMap};

use herd_core::plan::{Plan, PlanFile};
use herd_engine::plan::{DEFAULT_SUMMARY_CAP, PlanOptions, PlanReport, PlanUpdate, StepOverlay};
use herd_engine::{Engine, GuardCommand, StopLevel};
use herd_store::StatePaths;
use serde_json::json;
use tokio::sync::{mpsc, watch};

use crate::cli::RunArgs;
use crate::{UsageError, exit, fmt};

pub fn run(paths: StatePaths, a: RunArgs) -> anyhow::Result<u8> {
    let file = a.plan.display().to_string();
    let src = std::fs::read_to_string(&a.plan)
        .map_err(|e| UsageError(format!("cannot read plan {file}: {e}")))?;
    let (plan, overlays) = load(&file, &src)?;
    // The project's rules and hooks apply to every step; a bad config stops the plan here.
    let permissions = super::select::project_permissions()?;
    if a.dry_run {
        return dry_run(&plan, a.json);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    // On a worker, not on this thread: the plan loop and its runs wake each other on every
    // step, and a wake-up within the pool's threads is cheaper than one across to this one.
    let run = rt.spawn(run_async(paths, plan, a, file, overlays, permissions));
    rt.block_on(run).context("the plan's task failed")?
}

/// Parse and validate plan text (`file` names it in errors), with its steps' agent definitions
/// applied. Also used by `herd mcp`'s `run_plan`.
pub(crate) fn load(file: &str, src: &str) -> anyhow::Result<(Plan, HashMap<String, StepOverlay>)> {
    let mut parsed = PlanFile::parse(file, src).map_err(|e| UsageError(e.to_string()))?;
    let overlays = resolve_agents(&mut parsed, file)?;
    let plan = parsed.validate(file, src).map_err(|e| UsageError(e.to_string()))?;
    Ok((plan, overlays))
}

/// Steps naming an `agent` take the definition's fields where the plan leaves them unset, and
/// its rendered prompt template (with the step's `inputs`) and env as an overlay.
fn resolve_agents(plan: &mut PlanFile, file: &str) -> anyhow::Result<HashMap<String, StepOverlay>> {
    let mut overlays = HashMap::new();
    let default_agent = plan.defaults.agent.clone();
    if plan.steps.iter().all(|s| s.fields.agent.is_none()) && default_agent.is_none() {
        return Ok(overlays);
    }
    let root = crate::state::project_root()?;
    for (i, step) in plan.steps.iter_mut().enumerate() {
        let Some(name) = step.fields.agent.clone().or_else(|| default_agent.clone()) else {
            continue;
        };
        let at = |m: String| {
            UsageError(format!(
                "invalid plan {file}:\n  {file}: steps[{i}] ({}).agent: {m}",
                step.id
            ))
        };
        let found = super::select::find_agent(&root, &name).map_err(|e| at(e.to_string()))?;
        let d = &found.def;
        let f = &mut step.fields;
        if f.cli.is_none() && plan.defaults.cli.is_none() {
            f.cli = d.cli.map(|c| c.to_string());
        }
        f.model = f.model.take().or_else(|| d.model.clone());
        f.tools = f.tools.take().or_else(|| d.tools.clone());
        f.max_turns = f.max_turns.or(d.max_turns);
        f.timeout = f.timeout.take().or_else(|| d.timeout.clone());
        if !d.allow.is_empty() {
            let mut allow = d.allow.clone();
            allow.extend(f.allow.take().unwrap_or_default());
            f.allow = Some(allow);
        }
        if !d.deny.is_empty() {
            let mut deny = d.deny.clone();
            deny.extend(f.deny.take().unwrap_or_default());
            f.deny = Some(deny);
        }
        if !d.ask.is_empty() {
            let mut ask = d.ask.clone();
            ask.extend(f.ask.take().unwrap_or_default());
            f.ask = Some(ask);
        }
        let hooks = herd_engine::config::hook_defs(&d.hooks).map_err(at)?;
        let given: BTreeMap<String, String> =
            f.inputs.clone().or_else(|| plan.defaults.inputs.clone()).unwrap_or_default();
        let system_prompt = d
            .prompt
            .as_deref()
            .map(|t| herd_core::agent::render(t, &d.inputs, &given))
            .transpose()
            .map_err(|e| at(e.to_string()))?;
        let env = d.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        overlays.insert(step.id.clone(), StepOverlay { system_prompt, env, hooks });
    }
    Ok(overlays)
}

fn dry_run(plan: &Plan, json_out: bool) -> anyhow::Result<u8> {
    let layers = plan.layers();
    let mut out = std::io::stdout().lock();
    if json_out {
        let ids: Vec<Vec<&str>> =
            layers.iter().map(|l| l.iter().map(|&i| plan.steps[i].id.as_str()).collect()).collect();
        writeln!(out, "{}", json!({"name": plan.name, "steps": plan.steps.len(), "layers": ids}))?;
        return Ok(exit::COMPLETED);
    }
    writeln!(
        out,
        "plan {}: {} steps in {} layers (valid)",
        plan.name,
        plan.steps.len(),
        layers.len()
    )?;
    for (n, layer) in layers.iter().enumerate() {
        let names: Vec<String> = layer
            .iter()
            .map(|&i| {
                let s = &plan.steps[i];
                let ws = match s.workspace() {
                    herd_core::workspace::WorkspaceMode::Shared => String::new(),
                    m => format!(", {m:?}").to_lowercase(),
                };
                format!("{} ({}{ws})", s.id, s.fields.cli.as_deref().unwrap_or("claude"))
            })
            .collect();
        writeln!(out, "  layer {}: {}", n + 1, names.join(", "))?;
    }
    Ok(exit::COMPLETED)
}

async fn run_async(
    paths: StatePaths,
    plan: Plan,
    a: RunArgs,
    file: String,
    overlays: HashMap<String, StepOverlay>,
    permissions: herd_engine::gate::Permissions,
) -> anyhow::Result<u8> {
    let guard = GuardCommand::current_exe().context("cannot find the herd executable")?;
    let engine = Arc::new(Engine::open(paths, guard, "cli")?);
    let (stop_tx, stop_rx) = watch::channel(StopLevel::None);
    tokio::spawn(super::signals::forward(stop_tx));
    let (tx, rx) = mpsc::unbounded_channel();
    let live = std::io::stderr().is_terminal();
    let display = tokio::spawn(show(rx, live));
    let opts = PlanOptions {
        max_concurrent: a.max_concurrent.map(|n| n as usize),
        base_dir: std::env::current_dir()?,
        source_file: Some(file),
        summary_cap: DEFAULT_SUMMARY_CAP,
        overlays,
        permissions,
        id: None,
        into: a.into.clone(),
        pool: None,
    };
    let report = engine.run_plan(&plan, opts, stop_rx, Some(tx)).await;
    let _ = display.await;
    // Flush what was written even when the plan failed with an error.
    if let Some(engine) = Arc::into_inner(engine) {
        engine.shutdown().await?;
    }
    let report = report?;
    for w in &report.warnings {
        eprintln!("herd: {w}");
    }
    print(&report, a.json)?;
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
