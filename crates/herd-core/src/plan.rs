//! Plan files (YAML or JSON): their schema, the defaults merge, and validation before anything
//! starts — duplicate ids, unknown and self dependencies, cycles (with their path), bad fields.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::workspace::{LockMode, WorkspaceMode};

/// How steps relate when `depends_on` is not used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Every step independent.
    Parallel,
    /// Each step after the previous one.
    Sequential,
    /// Edges from `depends_on`.
    #[default]
    Dag,
}

/// The step fields that `defaults` may also set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepFields {
    pub name: Option<String>,
    pub prompt: Option<String>,
    pub agent: Option<String>,
    pub cli: Option<String>,
    pub command: Option<Vec<String>>,
    /// For `cli: acp`: the agent's program and arguments.
    pub acp: Option<crate::AcpSpec>,
    pub model: Option<String>,
    pub cwd: Option<String>,
    pub tools: Option<Vec<String>>,
    pub allow: Option<Vec<String>>,
    pub deny: Option<Vec<String>>,
    /// Rules for calls that are always asked of a person.
    pub ask: Option<Vec<String>>,
    /// Approve calls no rule decides, within the default limits (needs `tools`).
    pub auto_approve: Option<bool>,
    pub max_turns: Option<u32>,
    pub timeout: Option<String>,
    pub inputs: Option<BTreeMap<String, String>>,
    pub retries: Option<u32>,
    pub outputs: Option<Vec<String>>,
    /// `shared` (default), `locked` or `isolated`.
    pub workspace: Option<WorkspaceMode>,
    /// For `locked`: `shared` or `exclusive` (default); implies `workspace: locked`.
    pub lock: Option<LockMode>,
    /// When the directory is locked by another run: wait (`true`) or fail at once
    /// with RESOURCE_EXHAUSTED (`false`, the default).
    pub wait: Option<bool>,
    /// For `isolated`: the ref the worktree starts from (default: the repository's HEAD, or the
    /// integration branch for a step that depends on isolated steps).
    pub base: Option<String>,
    /// For `isolated`: a shell command run in the new worktree before the agent.
    pub setup: Option<String>,
    /// For `isolated`: commit what the agent left uncommitted when it succeeds (default true).
    pub auto_commit: Option<bool>,
    /// Served by workers (`herd worker`): only a worker with every one of these labels takes it.
    pub labels: Option<Vec<String>>,
}

/// One step as written in the file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepFile {
    pub id: String,
    #[serde(default)]
    pub depends_on: Vec<String>,
    #[serde(flatten)]
    pub fields: StepFields,
}

/// Limits of a plan run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    pub max_concurrent: Option<u32>,
    pub max_queue: Option<u32>,
    pub max_per_parent: Option<u32>,
    pub timeout: Option<String>,
    pub budget_usd: Option<f64>,
}

/// A plan file as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanFile {
    pub name: Option<String>,
    #[serde(default)]
    pub strategy: Strategy,
    #[serde(default)]
    pub defaults: StepFields,
    #[serde(default)]
    pub limits: Limits,
    /// Where isolated steps' worktrees go (default: `<repo>.herd-worktrees` beside the repo).
    pub worktree_root: Option<String>,
    /// Merge isolated steps into this branch instead of `herd/<run>/integration`.
    pub into: Option<String>,
    /// The repository workers on other machines clone for isolated steps (a URL git can
    /// fetch and push; default: the submitting checkout's `origin`). Used by plans served by
    /// workers; a plan run on one machine works in its steps' own repository.
    pub repo: Option<String>,
    pub steps: Vec<StepFile>,
}

/// A validated step: defaults applied, dependencies as indices into [`Plan::steps`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    pub id: String,
    pub fields: StepFields,
    pub depends_on: Vec<String>,
    #[serde(skip)]
    pub deps: Vec<usize>,
    /// 1-based line of the step in its file, when known.
    pub line: Option<usize>,
}

/// A plan that passed validation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub name: String,
    pub strategy: Strategy,
    pub limits: Limits,
    pub worktree_root: Option<String>,
    pub into: Option<String>,
    pub repo: Option<String>,
    pub steps: Vec<Step>,
}

impl Step {
    /// The step's workspace: as written, else `locked` when it names a lock, else `shared`.
    pub fn workspace(&self) -> WorkspaceMode {
        workspace_of(&self.fields)
    }
}

fn workspace_of(f: &StepFields) -> WorkspaceMode {
    f.workspace.unwrap_or(if f.lock.is_some() {
        WorkspaceMode::Locked
    } else {
        WorkspaceMode::Shared
    })
}

/// One problem in a plan file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanProblem {
    pub line: Option<usize>,
    pub field: String,
    pub message: String,
}

impl fmt::Display for PlanProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "line {l}: {}: {}", self.field, self.message),
            None => write!(f, "{}: {}", self.field, self.message),
        }
    }
}

/// Why a plan file was rejected: every problem found, each with its line and field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid plan {file}:\n{}", .problems.iter().map(|p| format!("  {file}:{p}")).collect::<Vec<_>>().join("\n"))]
pub struct PlanError {
    pub file: String,
    pub problems: Vec<PlanProblem>,
}

fn merge(step: &StepFields, d: &StepFields) -> StepFields {
    macro_rules! pick { ($($f:ident),*) => { StepFields { $($f: step.$f.clone().or_else(|| d.$f.clone()),)* } } }
    let mut f = pick!(
        name,
        prompt,
        agent,
        cli,
        command,
        acp,
        model,
        cwd,
        tools,
        allow,
        deny,
        ask,
        auto_approve,
        max_turns,
        timeout,
        inputs,
        retries,
        outputs,
        workspace,
        lock,
        wait,
        base,
        setup,
        auto_commit,
        labels
    );
    // A step that picks another cli does not inherit the default command line (or agent).
    if step.cli.as_deref().is_some_and(|c| c != "command") && step.command.is_none() {
        f.command = None;
    }
    if step.cli.as_deref().is_some_and(|c| c != "acp") && step.acp.is_none() {
        f.acp = None;
    }
    f
}

/// For each step id written as `id: x` / `"id": "x"` on its own line, the 1-based lines where it
/// appears, in order (best effort: block-style YAML and one-key-per-line JSON). One pass.
fn id_lines(src: &str) -> HashMap<&str, Vec<usize>> {
    let mut out: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, l) in src.lines().enumerate() {
        let t = l.trim_start().trim_start_matches("- ").trim_start();
        if let Some(rest) = t.strip_prefix("id:").or_else(|| t.strip_prefix("\"id\":")) {
            let id = rest.trim().trim_end_matches(',').trim_matches(|c| c == '"' || c == '\'');
            out.entry(id).or_default().push(i + 1);
        }
    }
    out
}

/// Parse a duration like `90s`, `10m`, `1h`, or plain seconds.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num.parse().map_err(|_| format!("{s:?} is not a duration (try 90s, 10m, 1h)"))?;
    let secs = match unit.trim() {
        "" | "s" => Some(n),
        "m" => n.checked_mul(60),
        "h" => n.checked_mul(3600),
        _ => return Err(format!("{s:?} is not a duration (try 90s, 10m, 1h)")),
    };
    match secs {
        Some(secs @ 1..=7200) => Ok(std::time::Duration::from_secs(secs)),
        _ => Err(format!("{s:?} is out of range: a timeout is between 1s and 120m")),
    }
}

impl PlanFile {
    /// Parse YAML (or JSON, which is YAML) text.
    pub fn parse(file: &str, src: &str) -> Result<PlanFile, PlanError> {
        serde_saphyr::from_str::<PlanFile>(src).map_err(|e| {
            let msg = e.to_string().replace("<input>", file);
            let line = msg
                .split("line ")
                .nth(1)
                .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|n| n.parse().ok());
            PlanError {
                file: file.into(),
                problems: vec![PlanProblem { line, field: "plan".into(), message: msg }],
            }
        })
    }

    /// Check everything and produce a runnable [`Plan`].
    pub fn validate(self, file: &str, src: &str) -> Result<Plan, PlanError> {
        let mut problems = Vec::new();
        let mut add = |line, field: String, message: String| {
            problems.push(PlanProblem { line, field, message });
        };
        if self.steps.is_empty() {
            add(None, "steps".into(), "a plan needs at least one step".into());
        }
        let lim = &self.limits;
        if let Some(n) = lim.max_concurrent
            && !(1..=20).contains(&n)
        {
            add(None, "limits.max_concurrent".into(), format!("{n} is out of range 1..=20"));
        }
        if let Some(b) = lim.budget_usd
            && (b.is_nan() || b <= 0.0)
        {
            add(None, "limits.budget_usd".into(), format!("{b} must be a positive amount"));
        }
        if let Some(t) = &lim.timeout
            && let Err(e) = parse_duration(t)
        {
            add(None, "limits.timeout".into(), e);
        }
        let mut index: HashMap<&str, usize> = HashMap::new();
        let where_ = id_lines(src);
        let mut seen: HashMap<&str, usize> = HashMap::new();
        let lines: Vec<Option<usize>> = self
            .steps
            .iter()
            .map(|s| {
                let nth = seen.entry(&s.id).or_insert(0);
                *nth += 1;
                where_.get(s.id.as_str()).and_then(|l| l.get(*nth - 1)).copied()
            })
            .collect();
        for (i, s) in self.steps.iter().enumerate() {
            let line = lines[i];
            let at = |f: &str| format!("steps[{i}] ({}).{f}", s.id);
            if s.id.is_empty()
                || s.id.len() > 64
                || !s.id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                add(
                    line,
                    format!("steps[{i}].id"),
                    format!("{:?} must be 1-64 characters of a-z, 0-9, - or _", s.id),
                );
            }
            if let Some(prev) = index.insert(&s.id, i) {
                add(line, at("id"), format!("duplicate id (also steps[{prev}])"));
            }
            let f = merge(&s.fields, &self.defaults);
            if f.prompt.as_deref().is_none_or(|p| p.trim().is_empty()) {
                add(line, at("prompt"), "missing (every step needs a prompt)".into());
            }
            // The caller resolves agents (I/O) and fills the step's fields before validation.
            if let Some(a) = &f.agent
                && let Err(e) = crate::agent::validate_name(a)
            {
                add(line, at("agent"), e);
            }
            // An agent's cli is the engine's to apply: unset here means the agent's, or claude.
            let cli = match f.cli.as_deref().map(str::parse::<crate::BackendKind>).transpose() {
                Ok(c) => c.unwrap_or(crate::BackendKind::Claude),
                Err(e) => {
                    add(line, at("cli"), e);
                    crate::BackendKind::Claude
                }
            };
            let cli = cli.as_str();
            match (cli, &f.command) {
                ("command", None) => {
                    add(line, at("command"), "cli: command needs command: [program, args…]".into())
                }
                ("command", Some(c)) if c.is_empty() => add(line, at("command"), "is empty".into()),
                (other, Some(_)) if other != "command" => add(
                    line,
                    at("command"),
                    format!("only for cli: command (this step uses {other})"),
                ),
                _ => {}
            }
            match (cli, &f.acp) {
                ("acp", None) => add(
                    line,
                    at("acp"),
                    "cli: acp needs acp: {command: [program, args…]} (here or in its agent)".into(),
                ),
                ("acp", Some(a)) => {
                    if let Err(e) = a.check() {
                        add(line, at("acp.command"), e);
                    }
                }
                (other, Some(_)) => {
                    add(line, at("acp"), format!("only for cli: acp (this step uses {other})"))
                }
                _ => {}
            }
            if let Some(t) = &f.timeout
                && let Err(e) = parse_duration(t)
            {
                add(line, at("timeout"), e);
            }
            for (field, rules) in [("allow", &f.allow), ("deny", &f.deny), ("ask", &f.ask)] {
                for (k, r) in rules.iter().flatten().enumerate() {
                    if let Err(e) = crate::permission::Rule::parse(r) {
                        add(line, format!("steps[{i}].{field}[{k}]"), e.to_string());
                    }
                }
            }
            if f.auto_approve == Some(true) && f.tools.as_ref().is_none_or(|t| t.is_empty()) {
                add(
                    line,
                    at("auto_approve"),
                    "INVALID_PERMISSION_CONFIG: auto_approve needs a non-empty tools list".into(),
                );
            }
            let mode = workspace_of(&f);
            if f.lock.is_some() && mode != WorkspaceMode::Locked {
                add(
                    line,
                    at("lock"),
                    format!("only for workspace: locked (this step is {mode:?})").to_lowercase(),
                );
            }
            if f.wait.is_some() && mode == WorkspaceMode::Isolated {
                add(
                    line,
                    at("wait"),
                    "an isolated step has its own worktree: nothing to wait for".into(),
                );
            }
            for (name, set) in [
                ("base", f.base.is_some()),
                ("setup", f.setup.is_some()),
                ("auto_commit", f.auto_commit.is_some()),
            ] {
                if set && mode != WorkspaceMode::Isolated {
                    add(line, at(name), "only for workspace: isolated".into());
                }
            }
            if f.base.as_deref().is_some_and(|b| b.trim().is_empty()) {
                add(line, at("base"), "is empty".into());
            }
            if self.strategy != Strategy::Dag && !s.depends_on.is_empty() {
                add(
                    line,
                    at("depends_on"),
                    format!("not allowed with strategy {:?}; use dag", self.strategy),
                );
            }
        }
        let mut deps: Vec<Vec<usize>> = Vec::with_capacity(self.steps.len());
        for (i, s) in self.steps.iter().enumerate() {
            let line = lines[i];
            let mut d = Vec::new();
            match self.strategy {
                Strategy::Sequential if i > 0 => d.push(i - 1),
                Strategy::Dag => {
                    for dep in &s.depends_on {
                        match index.get(dep.as_str()) {
                            Some(&j) if j == i => add(
                                line,
                                format!("steps[{i}] ({}).depends_on", s.id),
                                "a step cannot depend on itself".into(),
                            ),
                            Some(&j) => {
                                if !d.contains(&j) {
                                    d.push(j);
                                }
                            }
                            None => add(
                                line,
                                format!("steps[{i}] ({}).depends_on", s.id),
                                format!("unknown step {dep:?}"),
                            ),
                        }
                    }
                }
                _ => {}
            }
            deps.push(d);
        }
        if let Some(cycle) = find_cycle(&deps) {
            let path: Vec<&str> = cycle.iter().map(|&i| self.steps[i].id.as_str()).collect();
            let line = lines[cycle[0]];
            add(line, "depends_on".into(), format!("cycle: {}", path.join(" -> ")));
        }
        if self.into.as_deref().is_some_and(|b| b.trim().is_empty() || b.starts_with('-')) {
            add(
                None,
                "into".into(),
                format!("{:?} is not a branch name", self.into.as_deref().unwrap_or("")),
            );
        }
        if self.repo.as_deref().is_some_and(|r| r.trim().is_empty() || r.starts_with('-')) {
            add(
                None,
                "repo".into(),
                format!("{:?} is not a repository URL", self.repo.as_deref().unwrap_or("")),
            );
        }
        if !problems.is_empty() {
            return Err(PlanError { file: file.into(), problems });
        }
        let defaults = self.defaults;
        let steps = self
            .steps
            .into_iter()
            .zip(deps)
            .zip(lines)
            .map(|((s, d), line)| Step {
                line,
                fields: merge(&s.fields, &defaults),
                depends_on: d.iter().map(|_| String::new()).collect(),
                id: s.id,
                deps: d,
            })
            .collect::<Vec<_>>();
        let ids: Vec<String> = steps.iter().map(|s| s.id.clone()).collect();
        let steps = steps
            .into_iter()
            .map(|mut s| {
                s.depends_on = s.deps.iter().map(|&j| ids[j].clone()).collect();
                s
            })
            .collect();
        Ok(Plan {
            name: self.name.unwrap_or_else(|| file.rsplit('/').next().unwrap_or(file).to_owned()),
            strategy: self.strategy,
            limits: self.limits,
            worktree_root: self.worktree_root,
            into: self.into,
            repo: self.repo,
            steps,
        })
    }
}

/// A dependency cycle as a path that starts and ends at the same step, if there is one.
fn find_cycle(deps: &[Vec<usize>]) -> Option<Vec<usize>> {
    // Iterative DFS with colours: 0 new, 1 on the stack, 2 done.
    let n = deps.len();
    let mut colour = vec![0u8; n];
    for root in 0..n {
        if colour[root] != 0 {
            continue;
        }
        let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
        colour[root] = 1;
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            if let Some(&dep) = deps[node].get(*next) {
                *next += 1;
                match colour[dep] {
                    0 => {
                        colour[dep] = 1;
                        stack.push((dep, 0));
                    }
                    1 => {
                        let start = stack.iter().position(|&(s, _)| s == dep).unwrap_or(0);
                        // Stack order is dependent -> dependency; print in "depends on" order.
                        let mut path: Vec<usize> = stack[start..].iter().map(|&(s, _)| s).collect();
                        path.push(dep);
                        return Some(path);
                    }
                    _ => {}
                }
            } else {
                colour[node] = 2;
                stack.pop();
            }
        }
    }
    None
}

impl Plan {
    /// Parse and validate plan text.
    pub fn from_source(file: &str, src: &str) -> Result<Plan, PlanError> {
        PlanFile::parse(file, src)?.validate(file, src)
    }

    /// The steps grouped in layers: each layer depends only on earlier ones.
    pub fn layers(&self) -> Vec<Vec<usize>> {
        let mut depth = vec![0usize; self.steps.len()];
        // Steps are validated acyclic; relax in topological order (Kahn).
        let order = self.topo_order();
        for &i in &order {
            depth[i] = self.steps[i].deps.iter().map(|&d| depth[d] + 1).max().unwrap_or(0);
        }
        let mut layers: Vec<Vec<usize>> = vec![Vec::new(); depth.iter().max().map_or(0, |m| m + 1)];
        for (i, d) in depth.into_iter().enumerate() {
            layers[d].push(i);
        }
        layers
    }

    fn topo_order(&self) -> Vec<usize> {
        let n = self.steps.len();
        let mut indeg: Vec<usize> = self.steps.iter().map(|s| s.deps.len()).collect();
        let mut dependents = vec![Vec::new(); n];
        for (i, s) in self.steps.iter().enumerate() {
            for &d in &s.deps {
                dependents[d].push(i);
            }
        }
        let mut queue: std::collections::VecDeque<usize> =
            (0..n).filter(|&i| indeg[i] == 0).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(i) = queue.pop_front() {
            order.push(i);
            for &j in &dependents[i] {
                indeg[j] -= 1;
                if indeg[j] == 0 {
                    queue.push_back(j);
                }
            }
        }
        order
    }
}

#[cfg(test)]
mod tests;
