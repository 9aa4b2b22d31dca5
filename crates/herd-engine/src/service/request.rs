//! From what a user asks for to what a run needs: the one path for tasks and plan steps — the
//! agent definition, the chosen CLI, the context before the task, limits, permissions.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use herd_backends::RunSpec;
use herd_core::BackendKind;
use herd_core::agent::Memory;
use herd_core::context::{Part, truncate_with_marker};
use herd_core::permission::{Grants, Rule};
use herd_core::workspace::{LockMode, WorkspaceMode};

use super::api::{Caller, TaskSpec};
use super::error::ApiError;
use crate::agents::{Catalog, Found};
use crate::config::ProjectConfig;
use crate::gate::Permissions;
use crate::workspace::WorkspaceReq;
use crate::{TaskRequest, config};

/// AGENTS.md is cut to this many bytes (with a marker), never dropped.
pub const AGENTS_MD_BUDGET: usize = 32 * 1024;
/// An agent's MEMORY.md is cut to this many bytes (with a marker), never dropped.
pub const MEMORY_BUDGET: usize = 8 * 1024;
/// A run's time limit when nobody sets one.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// The project a caller works in, read once per request (or once per plan): its config and,
/// when an agent is named, its agent definitions and their context.
#[derive(Debug)]
pub(crate) struct Project {
    pub root: PathBuf,
    pub config: ProjectConfig,
    catalog: Option<Catalog>,
    /// Context parts by agent name (AGENTS.md and memory are read once per plan).
    context: BTreeMap<String, Vec<Part>>,
}

impl Project {
    pub fn open(root: &Path) -> Result<Self, ApiError> {
        let config = config::load(root).map_err(|e| ApiError::invalid(e.to_string()))?;
        Ok(Self { root: root.to_path_buf(), config, catalog: None, context: BTreeMap::new() })
    }

    /// Every definition herd can find here (discovered once).
    pub fn catalog(&mut self) -> &Catalog {
        let root = &self.root;
        self.catalog.get_or_insert_with(|| {
            crate::agents::discover(root, crate::agents::user_agents_dir().as_deref())
        })
    }

    /// A runnable agent by name.
    pub fn agent(&mut self, name: &str) -> Result<Found, ApiError> {
        let cat = self.catalog();
        let Some(found) = cat.get(name) else {
            let names: Vec<&str> = cat.agents.iter().map(|f| f.def.name.as_str()).collect();
            let known = if names.is_empty() { "none".into() } else { names.join(", ") };
            // A file that would have defined it but does not load says why.
            let why: Vec<String> = cat
                .errors
                .iter()
                .filter(|e| std::path::Path::new(&e.file).file_stem().is_some_and(|s| s == name))
                .map(|e| format!("; {e}"))
                .collect();
            return Err(ApiError::field(
                "agent",
                format!("no agent named {name:?} (known: {known}){}", why.concat()),
            ));
        };
        if !found.def.runnable {
            return Err(ApiError::field(
                "agent",
                format!("agent {name:?} ({}) is not runnable here", found.path.display()),
            ));
        }
        Ok(found.clone())
    }

    /// The context an agent's runs get before their task: AGENTS.md (trusted), then the agent's
    /// memory (untrusted), each budgeted — the same bytes for a task and a plan step.
    fn agent_context(&mut self, f: &Found) -> Vec<Part> {
        let root = self.root.clone();
        self.context
            .entry(f.def.name.clone())
            .or_insert_with(|| {
                let mut parts = Vec::new();
                if let Ok(text) = std::fs::read_to_string(root.join("AGENTS.md")) {
                    parts.push(Part {
                        source: "AGENTS.md".into(),
                        trusted: true,
                        content: truncate_with_marker(&text, AGENTS_MD_BUDGET),
                    });
                }
                let d = &f.def;
                let memory = match d.memory {
                    Memory::None => None,
                    Memory::Project => {
                        Some(root.join(".herd").join("memory").join(&d.name).join("MEMORY.md"))
                    }
                    Memory::User => crate::agents::user_agents_dir().and_then(|a| {
                        a.parent().map(|p| p.join("memory").join(&d.name).join("MEMORY.md"))
                    }),
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
                parts
            })
            .clone()
    }

    /// The permissions every run here starts from (config rules, hooks, ask timeout).
    fn base_permissions(&self) -> Result<Permissions, ApiError> {
        let file = config::config_path(&self.root);
        self.config.permissions().map_err(|e| ApiError::invalid(format!("{}: {e}", file.display())))
    }

    /// The CLI for a run and why: the request's own, the agent's, `default_cli` in the
    /// project's config, else claude.
    fn choose_cli(
        &self,
        asked: Option<BackendKind>,
        agent: Option<&Found>,
    ) -> Result<(BackendKind, String), ApiError> {
        if let Some(c) = asked {
            return Ok((c, "--cli".into()));
        }
        if let Some(f) = agent
            && let Some(c) = f.def.cli
        {
            return Ok((c, format!("agent {} says cli: {c}", f.def.name)));
        }
        if let Some(c) = &self.config.default_cli {
            let path = config::config_path(&self.root);
            let cli: BackendKind = c.parse().map_err(|e: String| {
                ApiError::invalid(format!("{}: default_cli: {e}", path.display()))
            })?;
            return Ok((cli, format!("default_cli in {}", path.display())));
        }
        Ok((BackendKind::Claude, "no --cli, agent or default_cli: claude".into()))
    }
}

/// What a request resolves to, and how its CLI was chosen (for `--explain`).
#[derive(Debug)]
pub(crate) struct Resolved {
    pub req: TaskRequest,
    pub cli_reason: String,
}

/// Defaults that come from where the request is made rather than from the request: a plan's
/// `limits.timeout` under its steps' own.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Fallbacks {
    pub timeout: Option<Duration>,
    /// A plan step: its directory may be made by a step before it, so it need not exist yet.
    pub step: bool,
}

/// Resolve `spec` for `caller` in `project`: everything but the workspace's worktree and a
/// resume (which need the store). The prompt is the task alone; the agent's context is in
/// `req.context`, assembled by [`TaskRequest::assemble`] once every part is known.
pub(crate) fn resolve(
    project: &mut Project,
    caller: &Caller,
    spec: TaskSpec,
    fallbacks: Fallbacks,
) -> Result<Resolved, ApiError> {
    if spec.prompt.trim().is_empty() {
        return Err(ApiError::field("prompt", "the prompt is empty"));
    }
    let agent = spec.agent.as_deref().map(|n| project.agent(n)).transpose()?;
    if agent.is_none() && !spec.inputs.is_empty() {
        return Err(ApiError::field("inputs", "inputs need an agent (name one with --agent NAME)"));
    }
    let (cli, cli_reason) = match spec.resume {
        // A resumed run keeps its own CLI (set once the earlier run is read).
        Some(_) => (spec.cli.unwrap_or(BackendKind::Claude), "the resumed run's".to_owned()),
        None => project.choose_cli(spec.cli, agent.as_ref())?,
    };
    let backend = herd_backends::backend(cli);
    // An ACP agent's program: the request's, else its agent definition's `acp: {command}`.
    let mut command = spec.command.clone();
    if cli == BackendKind::Acp
        && command.is_empty()
        && let Some(a) = agent.as_ref().and_then(|f| f.def.acp.as_ref())
    {
        command = a.command.clone();
    }
    if spec.resume.is_none() {
        check_command(cli, &command)?;
    }
    let cwd = match &spec.cwd {
        Some(d) if fallbacks.step => caller.path(d, "cwd")?,
        Some(d) => {
            let p = caller.path(d, "cwd")?;
            std::fs::canonicalize(&p).ok().filter(|p| p.is_dir()).ok_or_else(|| {
                ApiError::field("cwd", format!("cwd {}: not an existing directory", d.display()))
            })?
        }
        None => caller.path(&caller.cwd, "cwd")?,
    };
    let workspace = workspace_req(&spec)?;
    check_env(&spec.env, "env ")?;
    let file = config::config_path(&project.root);
    let cfg = |e: String| ApiError::invalid(format!("{}: {e}", file.display()));
    let cfg_timeout = project.config.timeout().map_err(cfg)?;
    let cfg_permission_timeout = project.config.permission_timeout().map_err(cfg)?;
    let cfg_max_turns = project.config.max_turns;
    let max_stored_bytes = project.config.max_stored_output().map_err(cfg)?;
    let tools = spec
        .tools
        .map(|t| t.into_iter().map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect());
    let mut req = TaskRequest {
        name: spec.name.clone(),
        backend: cli,
        spec: RunSpec {
            prompt: spec.prompt.clone(),
            model: spec.model,
            tools,
            allow: spec.allow,
            deny: spec.deny,
            max_turns: spec.max_turns,
            append_system_prompt: None,
            resume: None,
            replay_prompt: None,
            command,
            ask_first: Vec::new(),
            // From the project's config at launch (`permissions.confine`).
            trust_project_settings: false,
        },
        task_prompt: spec.prompt,
        context: Vec::new(),
        cwd,
        env: spec.env,
        timeout: spec.timeout.unwrap_or(Duration::ZERO),
        max_output_bytes: spec.max_output_kb.map(|kb| kb * 1024),
        max_stored_bytes,
        permissions: Permissions::default(),
        workspace,
        plan_step: None,
        caller: crate::RunCaller::of(caller),
    };
    if let Some(f) = &agent {
        check_env(
            &f.def.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<Vec<_>>(),
            &format!("agent {}: env ", f.def.name),
        )?;
        apply_agent(&mut req, f, &spec.inputs, spec.timeout.is_some())?;
        req.context = project.agent_context(f);
        // A CLI without a system prompt channel (gemini, ACP agents) gets the agent's rendered
        // prompt first in its context, as trusted instructions.
        let channel = backend.takes_system_prompt(&req.spec);
        if let Some(system) = req.spec.append_system_prompt.take_if(|_| !channel) {
            let part =
                Part { source: format!("agent:{}", f.def.name), trusted: true, content: system };
            req.context.insert(0, part);
        }
    }
    if req.timeout.is_zero() {
        req.timeout = fallbacks.timeout.or(cfg_timeout).unwrap_or(DEFAULT_TIMEOUT);
    }
    if req.spec.max_turns.is_none() {
        req.spec.max_turns = cfg_max_turns;
    }
    let mut perms = project.base_permissions()?;
    for r in &spec.ask {
        let rule =
            Rule::parse(r).map_err(|e| ApiError::field("ask", format!("ask rule {r:?}: {e}")))?;
        perms.policy.ask.push(rule);
    }
    if let Some(f) = &agent {
        let d = &f.def;
        let at = |m: String| ApiError::field("agent", format!("agent {}: {m}", d.name));
        for (i, r) in d.ask.iter().enumerate() {
            perms.policy.ask.push(Rule::parse(r).map_err(|e| at(format!("ask[{i}]: {e}")))?);
        }
        perms.hooks.extend(config::hook_defs(&d.hooks).map_err(at)?);
    }
    perms.auto_approve = spec.auto_approve;
    perms.non_interactive = spec.non_interactive;
    if let Some(t) = spec.permission_timeout.or(cfg_permission_timeout) {
        perms.ask_timeout = t;
    }
    let now = Instant::now();
    let mut grants = Grants::default();
    for (kind, ttl) in spec.grants {
        grants.add(kind, ttl, now);
    }
    perms.grants = Arc::new(Mutex::new(grants));
    // Refused before anything is created (seed 000's INVALID_PERMISSION_CONFIG).
    perms.validate(&req.spec).map_err(|e| ApiError::field("permissions", e))?;
    req.permissions = perms;
    if spec.resume.is_none() {
        check_program(&req)?;
    }
    Ok(Resolved { req, cli_reason })
}

/// The agent CLI's binary is there (before anything is recorded): a missing one is an input
/// error naming the binary, the variable that points at it and how to install it. A `command`
/// program is not checked here: its absence is the run's recorded `spawn_error`.
pub(crate) fn check_program(req: &TaskRequest) -> Result<(), ApiError> {
    if req.backend == BackendKind::Command {
        return Ok(());
    }
    let backend = herd_backends::backend(req.backend);
    let path = match req.env.iter().rfind(|(k, _)| k == "PATH") {
        Some((_, p)) => Some(p.clone()),
        None => std::env::var("PATH").ok(),
    };
    let over = backend.program_override_var(&req.spec).and_then(|v| std::env::var(v).ok());
    match backend.program(&req.spec, path.as_deref(), over.as_deref()) {
        Ok(_) => Ok(()),
        Err(e) => Err(ApiError::field("cli", format!("cli {}: {e}", req.backend))),
    }
}

/// Variables herd sets for a child itself (its depth, the policies above it, its run id): a
/// request cannot set them, or a child could escape its limits (`HERD_MAX_DEPTH=9`).
const RESERVED_ENV: &[&str] =
    &["HERD_DEPTH", "HERD_MAX_DEPTH", "HERD_POLICY_LAYERS", crate::guard::RUN_MARKER_VAR];

fn check_env(env: &[(String, String)], whose: &str) -> Result<(), ApiError> {
    match env.iter().find(|(k, _)| RESERVED_ENV.contains(&k.as_str())) {
        Some((k, _)) => Err(ApiError::field(
            "env",
            format!(
                "{whose}{k}: herd sets this variable for its children itself; it cannot be given"
            ),
        )),
        None => Ok(()),
    }
}

/// A program is given for `cli: command` and `cli: acp` (the agent's), and only for them.
fn check_command(cli: BackendKind, command: &[String]) -> Result<(), ApiError> {
    match (cli, command.is_empty()) {
        (BackendKind::Command, true) => Err(ApiError::field(
            "command",
            "cli command needs a program: herd task PROMPT --cli command -- PROGRAM [ARGS…]",
        )),
        (BackendKind::Acp, true) => Err(ApiError::field(
            "command",
            "cli acp needs the agent's program: herd task PROMPT --cli acp -- PROGRAM [ARGS…] \
             (or acp: {command: [program, args…]} in an agent file or plan step)",
        )),
        (BackendKind::Acp, false) => herd_core::AcpSpec { command: command.to_vec() }
            .check()
            .map_err(|e| ApiError::field("command", format!("cli acp: {e}"))),
        (other, false) if other != BackendKind::Command => Err(ApiError::field(
            "command",
            format!(
                "a program (`{}`) is only for cli command or cli acp, not {other}",
                command.join(" ")
            ),
        )),
        _ => Ok(()),
    }
}

/// The workspace fields, checked together: each names the mode it belongs to.
fn workspace_req(spec: &TaskSpec) -> Result<WorkspaceReq, ApiError> {
    let w = &spec.workspace;
    let mode = match (w.mode, w.lock.is_some()) {
        (WorkspaceMode::Shared, true) => WorkspaceMode::Locked,
        (m, _) => m,
    };
    let isolated_only =
        w.into.is_some() || w.base.is_some() || w.setup.is_some() || w.auto_commit.is_some();
    if isolated_only && mode != WorkspaceMode::Isolated {
        return Err(ApiError::invalid(
            "into, base, setup and auto_commit are for an isolated workspace",
        ));
    }
    if w.wait && mode == WorkspaceMode::Isolated {
        return Err(ApiError::invalid(
            "wait is for a shared or locked workspace (an isolated one has its own)",
        ));
    }
    if spec.resume.is_some() && mode == WorkspaceMode::Isolated {
        return Err(ApiError::invalid(
            "a resumed run continues in the earlier run's directory; it cannot be isolated",
        ));
    }
    Ok(WorkspaceReq::Shared {
        lock: match mode {
            WorkspaceMode::Locked => Some(w.lock.unwrap_or(LockMode::Exclusive)),
            _ => None,
        },
        wait: w.wait,
    })
}

/// Apply an agent definition to a request built from the spec; the spec wins where both
/// speak, the definition's rules come first.
fn apply_agent(
    req: &mut TaskRequest,
    f: &Found,
    inputs: &BTreeMap<String, String>,
    timeout_given: bool,
) -> Result<(), ApiError> {
    let d = &f.def;
    let at = |m: String| ApiError::field("agent", format!("agent {}: {m}", d.name));
    if let Some(template) = &d.prompt {
        let system =
            herd_core::agent::render(template, &d.inputs, inputs).map_err(|e| at(e.to_string()))?;
        if req.backend == BackendKind::Command {
            // A program has no system-prompt flag: it gets the rendered prompt in its environment.
            req.env.push(("HERD_SYSTEM_PROMPT".into(), system));
        } else {
            req.spec.append_system_prompt = Some(system);
        }
    } else if !inputs.is_empty() {
        return Err(at("it has no prompt template for inputs".into()));
    }
    if req.name.is_none() {
        req.name = Some(d.name.clone());
    }
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
    if !timeout_given && let Some(t) = &d.timeout {
        req.timeout = herd_core::plan::parse_duration(t).map_err(at)?;
    }
    if req.max_output_bytes.is_none() {
        req.max_output_bytes = d.max_output_kb.map(|kb| kb * 1024);
    }
    for (k, v) in &d.env {
        if !req.env.iter().any(|(ek, _)| ek == k) {
            req.env.push((k.clone(), v.clone()));
        }
    }
    Ok(())
}
