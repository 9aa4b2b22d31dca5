//! Choosing what runs a task: a named agent definition (its cli, prompt template, limits, and
//! the context it gets — AGENTS.md and its memory), else `--cli`, else the configured default.

use std::collections::BTreeMap;
use std::path::Path;

use herd_backends::BackendKind;
use herd_core::agent::{Cli, Memory, render};
use herd_core::context::{Part, assemble, truncate_with_marker};
use herd_engine::TaskRequest;
use herd_engine::agents::Found;

use crate::UsageError;

/// AGENTS.md is cut to this many bytes (with a marker), never dropped.
const AGENTS_MD_BUDGET: usize = 32 * 1024;
/// An agent's MEMORY.md is cut to this many bytes (with a marker), never dropped.
const MEMORY_BUDGET: usize = 8 * 1024;

fn backend_of(cli: Cli) -> Result<BackendKind, UsageError> {
    match cli {
        Cli::Claude => Ok(BackendKind::Claude),
        Cli::Command => Ok(BackendKind::Command),
        other => Err(UsageError(format!(
            "cli {other} is not supported by this herd yet (supported: claude, command)"
        ))),
    }
}

/// The permissions every run in this project starts from: `.herd/config.yml`'s rules, hooks
/// and ask timeout. A bad config is a usage error naming the file and field.
pub fn project_permissions() -> anyhow::Result<herd_engine::gate::Permissions> {
    let root = crate::state::project_root()?;
    let cfg = herd_engine::config::load(&root).map_err(|e| UsageError(e.to_string()))?;
    Ok(cfg.permissions().map_err(UsageError)?)
}

/// Find a runnable agent by name.
pub fn find_agent(root: &Path, name: &str) -> anyhow::Result<Found> {
    let mut cat = super::agents::catalog(root);
    let names: Vec<String> = cat.agents.iter().map(|f| f.def.name.clone()).collect();
    let i = cat.agents.iter().position(|f| f.def.name == name).ok_or_else(|| {
        let known = if names.is_empty() { "none".into() } else { names.join(", ") };
        UsageError(format!("no agent named {name:?} (known: {known})"))
    })?;
    let found = cat.agents.swap_remove(i);
    if !found.def.runnable {
        return Err(UsageError(format!(
            "agent {name:?} ({}) is not runnable here",
            found.path.display()
        ))
        .into());
    }
    Ok(found)
}

/// The backend for this task and why: `--cli`, the agent's cli, `default_cli` in
/// `.herd/config.yml`, else claude.
pub fn choose_cli(
    flag: Option<BackendKind>,
    agent: Option<&Found>,
    root: &Path,
) -> anyhow::Result<(BackendKind, String)> {
    if let Some(c) = flag {
        return Ok((c, "--cli".into()));
    }
    if let Some(f) = agent
        && let Some(c) = f.def.cli
    {
        return Ok((backend_of(c)?, format!("agent {} says cli: {c}", f.def.name)));
    }
    let path = herd_engine::config::config_path(root);
    let cfg = herd_engine::config::load(root).map_err(|e| UsageError(e.to_string()))?;
    if let Some(c) = cfg.default_cli {
        let cli: Cli = c
            .parse()
            .map_err(|e: String| UsageError(format!("{}: default_cli: {e}", path.display())))?;
        return Ok((backend_of(cli)?, format!("default_cli in {}", path.display())));
    }
    Ok((
        BackendKind::Claude,
        "no --cli, agent or default_cli: claude, the one agent CLI this herd drives".into(),
    ))
}

/// Apply an agent definition to a request built from the flags; flags win where both speak.
/// The agent definition's ask rules and hooks, on top of the project's and the flags'.
pub fn apply_agent_permissions(
    perms: &mut herd_engine::gate::Permissions,
    f: &Found,
) -> anyhow::Result<()> {
    let d = &f.def;
    let at = |m: String| UsageError(format!("agent {}: {m}", d.name));
    for (i, r) in d.ask.iter().enumerate() {
        let rule =
            herd_core::permission::Rule::parse(r).map_err(|e| at(format!("ask[{i}]: {e}")))?;
        perms.policy.ask.push(rule);
    }
    perms.hooks.extend(herd_engine::config::hook_defs(&d.hooks).map_err(at)?);
    Ok(())
}

pub fn apply_agent(
    req: &mut TaskRequest,
    f: &Found,
    inputs: &[(String, String)],
    root: &Path,
    flags: &Flags,
) -> anyhow::Result<()> {
    let d = &f.def;
    let given: BTreeMap<String, String> = inputs.iter().cloned().collect();
    if let Some(template) = &d.prompt {
        let system = render(template, &d.inputs, &given)
            .map_err(|e| UsageError(format!("agent {}: {e}", d.name)))?;
        if req.backend == BackendKind::Command {
            // A program has no system-prompt flag: it gets the rendered prompt in its environment.
            req.env.push(("HERD_SYSTEM_PROMPT".into(), system));
        } else {
            req.spec.append_system_prompt = Some(system);
        }
    } else if !given.is_empty() {
        return Err(
            UsageError(format!("agent {} has no prompt template for --input", d.name)).into()
        );
    }
    req.name = Some(d.name.clone());
    if req.spec.model.is_none() {
        req.spec.model.clone_from(&d.model);
    }
    if req.spec.tools.is_none() {
        req.spec.tools.clone_from(&d.tools);
    }
    req.spec.allow.splice(0..0, d.allow.iter().cloned());
    req.spec.deny.splice(0..0, d.deny.iter().cloned());
    if req.spec.max_turns.is_none() {
        req.spec.max_turns = d.max_turns;
    }
    if !flags.timeout
        && let Some(t) = &d.timeout
    {
        req.timeout = herd_core::plan::parse_duration(t).map_err(UsageError)?;
    }
    if req.max_output_bytes.is_none() {
        req.max_output_bytes = d.max_output_kb.map(|kb| kb * 1024);
    }
    for (k, v) in &d.env {
        if !req.env.iter().any(|(ek, _)| ek == k) {
            req.env.push((k.clone(), v.clone()));
        }
    }
    let mut parts = Vec::new();
    if let Ok(text) = std::fs::read_to_string(root.join("AGENTS.md")) {
        parts.push(Part {
            source: "AGENTS.md".into(),
            trusted: true,
            content: truncate_with_marker(&text, AGENTS_MD_BUDGET),
        });
    }
    let memory = match d.memory {
        Memory::None => None,
        Memory::Project => Some(root.join(".herd").join("memory").join(&d.name).join("MEMORY.md")),
        Memory::User => herd_engine::agents::user_agents_dir()
            .and_then(|a| a.parent().map(|p| p.join("memory").join(&d.name).join("MEMORY.md"))),
    };
    if let Some(path) = memory
        && let Ok(text) = std::fs::read_to_string(&path)
    {
        parts.push(Part {
            source: format!("memory:{}", d.name),
            trusted: false,
            content: truncate_with_marker(&text, MEMORY_BUDGET),
        });
    }
    if !parts.is_empty() {
        req.spec.prompt = assemble(&parts, &req.spec.prompt);
    }
    Ok(())
}

/// Which limits the user set explicitly (they beat the definition's).
#[derive(Debug, Default)]
pub struct Flags {
    pub timeout: bool,
}
