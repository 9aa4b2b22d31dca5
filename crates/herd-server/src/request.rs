//! From the wire's requests to the service's vocabulary: the caller a request speaks for, a
//! spawn's task spec, a plan given as steps. Every bad field is INVALID_ARGUMENT naming it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use herd_core::BackendKind;
use herd_core::permission::AutoApproveConfig;
use herd_core::workspace::{LockMode, WorkspaceMode};
use herd_engine::service::{ApiError, Caller, TaskSpec, WorkspaceSpec};
use serde_json::{Value, json};

use crate::pb;

/// What the daemon assumes of a request that says nothing about its caller.
#[derive(Debug, Clone)]
pub struct Defaults {
    /// The daemon's project (the parent of its state directory).
    pub project_root: PathBuf,
    /// Recorded as who answers, cancels or revokes when the request does not say.
    pub who: String,
}

fn absolute(field: &str, p: &str) -> Result<PathBuf, ApiError> {
    let path = Path::new(p);
    if !path.is_absolute() {
        return Err(ApiError::field(field, format!("{field} {p:?}: give an absolute path")));
    }
    Ok(path.to_path_buf())
}

/// The caller a request speaks for: its context, else the daemon's defaults (depth 0).
pub fn caller(
    d: &Defaults,
    ctx: Option<&pb::CallerContext>,
    session: &str,
) -> Result<Caller, ApiError> {
    let empty = pb::CallerContext::default();
    let ctx = ctx.unwrap_or(&empty);
    let project_root = match ctx.project_root.as_str() {
        "" => d.project_root.clone(),
        p => absolute("caller.project_root", p)?,
    };
    let cwd = match ctx.cwd.as_str() {
        "" => project_root.clone(),
        p => absolute("caller.cwd", p)?,
    };
    let inherited = match ctx.policy_layers_json.trim() {
        "" => Vec::new(),
        text => serde_json::from_str(text).map_err(|e| {
            ApiError::field(
                "caller.policy_layers_json",
                format!("caller.policy_layers_json: not herd's policy layers ({e})"),
            )
        })?,
    };
    Ok(Caller {
        project_root,
        cwd,
        depth: ctx.depth,
        max_depth: if ctx.max_depth == 0 { 1 } else { ctx.max_depth },
        inherited,
        session: (!session.is_empty()).then(|| session.to_owned()),
        who: if ctx.who.is_empty() { d.who.clone() } else { ctx.who.clone() },
        roots: None,
    })
}

fn positive(field: &str, n: i32) -> Result<Option<u32>, ApiError> {
    match n {
        0 => Ok(None),
        n if n < 0 => Err(ApiError::field(field, format!("{field} {n}: must not be negative"))),
        n => Ok(Some(n as u32)),
    }
}

fn workspace_mode(field: &str, v: i32) -> Result<WorkspaceMode, ApiError> {
    match pb::WorkspaceMode::try_from(v) {
        Ok(pb::WorkspaceMode::Shared) => Ok(WorkspaceMode::Shared),
        Ok(pb::WorkspaceMode::Locked) => Ok(WorkspaceMode::Locked),
        Ok(pb::WorkspaceMode::Isolated) => Ok(WorkspaceMode::Isolated),
        Err(_) => Err(ApiError::field(field, format!("{field} {v}: no such workspace mode"))),
    }
}

fn cli(field: &str, s: &str) -> Result<Option<BackendKind>, ApiError> {
    if s.is_empty() {
        return Ok(None);
    }
    s.parse().map(Some).map_err(|e| ApiError::field(field, format!("{field} {s:?}: {e}")))
}

/// Auto-approve's limits: a zero keeps herd's default (the service checks the bounds).
fn auto_approve(c: Option<&pb::AutoApproveConfig>) -> Result<AutoApproveConfig, ApiError> {
    let mut out = AutoApproveConfig::default();
    let Some(c) = c else { return Ok(out) };
    let f = "auto_approve_config";
    if let Some(s) = positive(&format!("{f}.max_duration_seconds"), c.max_duration_seconds)? {
        out.max_duration = Duration::from_secs(s.into());
    }
    if let Some(n) = positive(&format!("{f}.tool_calls_per_minute"), c.tool_calls_per_minute)? {
        out.tool_calls_per_minute = n;
    }
    if let Some(n) = positive(&format!("{f}.tool_calls_per_session"), c.tool_calls_per_session)? {
        out.tool_calls_per_session = n;
    }
    if let Some(n) = positive(&format!("{f}.bash_commands_per_minute"), c.bash_commands_per_minute)?
    {
        out.bash_per_minute = n;
    }
    if let Some(n) =
        positive(&format!("{f}.write_operations_per_minute"), c.write_operations_per_minute)?
    {
        out.writes_per_minute = n;
    }
    out.queue_on_rate_limit = c.queue_on_rate_limit;
    Ok(out)
}

fn some(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

/// A spawn request as the service's task spec.
pub fn task_spec(r: pb::SpawnSubagentRequest) -> Result<TaskSpec, ApiError> {
    let mut mode = workspace_mode("workspace", r.workspace)?;
    let lock = match pb::WorktreeLockMode::try_from(r.worktree_lock) {
        Ok(pb::WorktreeLockMode::WorktreeLockNone) => None,
        Ok(pb::WorktreeLockMode::WorktreeLockShared) => Some(LockMode::Shared),
        Ok(pb::WorktreeLockMode::WorktreeLockExclusive) => Some(LockMode::Exclusive),
        Err(_) => {
            let v = r.worktree_lock;
            return Err(ApiError::field(
                "worktree_lock",
                format!("worktree_lock {v}: no such mode"),
            ));
        }
    };
    if lock.is_some() {
        match mode {
            WorkspaceMode::Shared => mode = WorkspaceMode::Locked,
            WorkspaceMode::Locked => {}
            WorkspaceMode::Isolated => {
                return Err(ApiError::field(
                    "worktree_lock",
                    "worktree_lock: an isolated subagent has its own worktree; lock only a shared one",
                ));
            }
        }
    }
    let secs = |n: u32| (n > 0).then(|| Duration::from_secs(n.into()));
    let auto = if r.auto_approve_permissions {
        Some(auto_approve(r.auto_approve_config.as_ref())?)
    } else if r.auto_approve_config.is_some() {
        return Err(ApiError::field(
            "auto_approve_config",
            "auto_approve_config is given but auto_approve_permissions is false",
        ));
    } else {
        None
    };
    Ok(TaskSpec {
        non_interactive: r.non_interactive,
        prompt: r.prompt,
        name: some(r.name),
        cli: cli("cli", &r.cli)?,
        command: r.command,
        agent: some(r.agent),
        inputs: r.inputs.into_iter().collect(),
        model: some(r.model),
        tools: (!r.allowed_tools.is_empty()).then_some(r.allowed_tools),
        allow: r.allow,
        deny: r.deny,
        ask: r.ask,
        max_turns: positive("max_turns", r.max_turns)?,
        timeout: secs(r.timeout_seconds),
        max_output_kb: (r.max_output_kb > 0).then_some(r.max_output_kb),
        env: r.env.into_iter().collect(),
        cwd: some(r.working_directory).map(PathBuf::from),
        workspace: WorkspaceSpec {
            mode,
            lock,
            wait: r.wait_for_lock,
            into: some(r.into),
            base: some(r.base),
            setup: some(r.setup),
            auto_commit: r.no_auto_commit.then_some(false),
        },
        auto_approve: auto,
        permission_timeout: secs(r.permission_timeout_seconds),
        grants: Vec::new(),
        resume: some(r.resume),
    })
}

/// A plan given as steps, as herd's plan text (JSON): validated by the service like any plan.
pub fn plan_text(p: &pb::OrchestrationPlan) -> Result<String, ApiError> {
    let strategy = match pb::OrchestrationStrategy::try_from(p.strategy) {
        Ok(pb::OrchestrationStrategy::Dag) => "dag",
        Ok(pb::OrchestrationStrategy::Parallel) => "parallel",
        Ok(pb::OrchestrationStrategy::Sequential) => "sequential",
        Err(_) => {
            let v = p.strategy;
            return Err(ApiError::field("strategy", format!("strategy {v}: no such strategy")));
        }
    };
    let mut steps = Vec::with_capacity(p.steps.len());
    for (i, s) in p.steps.iter().enumerate() {
        let field = |f: &str| format!("steps[{i}].{f}");
        let mut step = serde_json::Map::new();
        step.insert("id".into(), json!(s.id));
        let mut put = |k: &str, v: Value| {
            step.insert(k.into(), v);
        };
        let text = |t: &str| (!t.is_empty()).then(|| json!(t));
        for (k, v) in [
            ("name", text(&s.name)),
            ("prompt", text(&s.prompt)),
            ("model", text(&s.model)),
            ("cwd", text(&s.working_directory)),
            ("cli", text(&s.cli)),
            ("agent", text(&s.agent)),
        ] {
            if let Some(v) = v {
                put(k, v);
            }
        }
        for (k, v) in [
            ("tools", &s.allowed_tools),
            ("allow", &s.allow),
            ("deny", &s.deny),
            ("command", &s.command),
        ] {
            if !v.is_empty() {
                put(k, json!(v));
            }
        }
        if !s.depends_on.is_empty() {
            put("depends_on", json!(s.depends_on));
        }
        if let Some(n) = positive(&field("max_turns"), s.max_turns)? {
            put("max_turns", json!(n));
        }
        if s.auto_approve_permissions {
            put("auto_approve", json!(true));
        }
        if !s.inputs.is_empty() {
            put("inputs", json!(s.inputs));
        }
        match workspace_mode(&field("workspace"), s.workspace)? {
            WorkspaceMode::Shared => {}
            WorkspaceMode::Locked => put("workspace", json!("locked")),
            WorkspaceMode::Isolated => put("workspace", json!("isolated")),
        }
        steps.push(Value::Object(step));
    }
    let mut plan = json!({"strategy": strategy, "steps": steps});
    if !p.name.is_empty() {
        plan["name"] = json!(p.name);
    }
    Ok(plan.to_string())
}

/// A caller as the wire's context: a herd client speaking for itself to a daemon.
pub fn context(c: &Caller) -> Result<pb::CallerContext, ApiError> {
    let policy_layers_json = if c.inherited.is_empty() {
        String::new()
    } else {
        serde_json::to_string(&c.inherited).map_err(|e| ApiError::internal(e.to_string()))?
    };
    Ok(pb::CallerContext {
        project_root: c.project_root.display().to_string(),
        cwd: c.cwd.display().to_string(),
        depth: c.depth,
        max_depth: c.max_depth,
        policy_layers_json,
        who: c.who.clone(),
    })
}

/// A task spec as a spawn request (what a herd client sends its daemon). Grants are refused:
/// their secret values stay in the process that read them.
pub fn spawn_request(
    spec: TaskSpec,
    caller: pb::CallerContext,
) -> Result<pb::SpawnSubagentRequest, ApiError> {
    if !spec.grants.is_empty() {
        return Err(ApiError::field(
            "grants",
            "--grant is not sent to the daemon (a granted secret stays in the process that read \
             it); run this task without herd serve running, or without --grant",
        ));
    }
    let w = &spec.workspace;
    let (workspace, worktree_lock) = match (w.mode, w.lock) {
        (WorkspaceMode::Isolated, _) => (pb::WorkspaceMode::Isolated, None),
        (WorkspaceMode::Locked, lock) => {
            (pb::WorkspaceMode::Locked, Some(lock.unwrap_or(LockMode::Exclusive)))
        }
        (WorkspaceMode::Shared, lock) => (pb::WorkspaceMode::Shared, lock),
    };
    let auto = spec.auto_approve.as_ref().map(|a| pb::AutoApproveConfig {
        max_duration_seconds: i32::try_from(a.max_duration.as_secs()).unwrap_or(i32::MAX),
        tool_calls_per_minute: a.tool_calls_per_minute as i32,
        tool_calls_per_session: a.tool_calls_per_session as i32,
        bash_commands_per_minute: a.bash_per_minute as i32,
        write_operations_per_minute: a.writes_per_minute as i32,
        queue_on_rate_limit: a.queue_on_rate_limit,
    });
    let secs = |d: Option<Duration>| {
        d.map_or(0, |d| u32::try_from(d.as_secs().max(1)).unwrap_or(u32::MAX))
    };
    Ok(pb::SpawnSubagentRequest {
        non_interactive: spec.non_interactive,
        parent_session_id: String::new(),
        prompt: spec.prompt,
        model: spec.model.unwrap_or_default(),
        working_directory: spec.cwd.map(|p| p.display().to_string()).unwrap_or_default(),
        allowed_tools: spec.tools.unwrap_or_default(),
        max_turns: spec.max_turns.map_or(0, |n| i32::try_from(n).unwrap_or(i32::MAX)),
        env: spec.env.into_iter().collect(),
        name: spec.name.unwrap_or_default(),
        auto_approve_permissions: auto.is_some(),
        worktree_lock: match worktree_lock {
            None => pb::WorktreeLockMode::WorktreeLockNone,
            Some(LockMode::Shared) => pb::WorktreeLockMode::WorktreeLockShared,
            Some(LockMode::Exclusive) => pb::WorktreeLockMode::WorktreeLockExclusive,
        } as i32,
        auto_approve_config: auto,
        wait_for_lock: w.wait,
        agent: spec.agent.unwrap_or_default(),
        inputs: spec.inputs.into_iter().collect(),
        workspace: workspace as i32,
        cli: spec.cli.map(|c| c.to_string()).unwrap_or_default(),
        command: spec.command,
        allow: spec.allow,
        deny: spec.deny,
        ask: spec.ask,
        timeout_seconds: secs(spec.timeout),
        permission_timeout_seconds: secs(spec.permission_timeout),
        resume: spec.resume.unwrap_or_default(),
        caller: Some(caller),
        into: w.into.clone().unwrap_or_default(),
        base: w.base.clone().unwrap_or_default(),
        setup: w.setup.clone().unwrap_or_default(),
        no_auto_commit: w.auto_commit == Some(false),
        max_output_kb: spec.max_output_kb.unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_makes_a_shared_workspace_locked_and_bad_fields_are_named() {
        let r = pb::SpawnSubagentRequest {
            prompt: "go".into(),
            worktree_lock: pb::WorktreeLockMode::WorktreeLockExclusive as i32,
            wait_for_lock: true,
            ..Default::default()
        };
        let spec = task_spec(r).unwrap();
        assert_eq!(spec.workspace.mode, WorkspaceMode::Locked);
        assert_eq!(spec.workspace.lock, Some(LockMode::Exclusive));
        assert!(spec.workspace.wait);

        let bad = pb::SpawnSubagentRequest { max_turns: -1, ..Default::default() };
        assert_eq!(task_spec(bad).unwrap_err().field_name(), Some("max_turns"));
        let bad = pb::SpawnSubagentRequest { workspace: 9, ..Default::default() };
        assert_eq!(task_spec(bad).unwrap_err().field_name(), Some("workspace"));
        let bad = pb::SpawnSubagentRequest { cli: "vim".into(), ..Default::default() };
        assert_eq!(task_spec(bad).unwrap_err().field_name(), Some("cli"));
    }

    #[test]
    fn a_task_spec_goes_over_the_wire_and_back_unchanged() {
        let spec = TaskSpec {
            prompt: "go".into(),
            cli: Some(BackendKind::Claude),
            tools: Some(vec!["Read".into()]),
            max_turns: Some(3),
            timeout: Some(Duration::from_secs(90)),
            auto_approve: Some(AutoApproveConfig { bash_per_minute: 7, ..Default::default() }),
            workspace: WorkspaceSpec {
                mode: WorkspaceMode::Locked,
                lock: Some(LockMode::Shared),
                wait: true,
                ..Default::default()
            },
            allow: vec!["Bash(ls)".into()],
            ..Default::default()
        };
        let back = task_spec(spawn_request(spec, pb::CallerContext::default()).unwrap()).unwrap();
        assert_eq!(back.cli, Some(BackendKind::Claude));
        assert_eq!(back.tools, Some(vec!["Read".to_owned()]));
        assert_eq!((back.max_turns, back.timeout), (Some(3), Some(Duration::from_secs(90))));
        assert_eq!(back.auto_approve.unwrap().bash_per_minute, 7);
        assert_eq!(
            (back.workspace.mode, back.workspace.lock),
            (WorkspaceMode::Locked, Some(LockMode::Shared))
        );
        assert!(back.workspace.wait);
        assert_eq!(back.allow, ["Bash(ls)"]);
    }

    #[test]
    fn auto_approve_limits_keep_defaults_for_zeroes() {
        let r = pb::SpawnSubagentRequest {
            auto_approve_permissions: true,
            auto_approve_config: Some(pb::AutoApproveConfig {
                bash_commands_per_minute: 5,
                ..Default::default()
            }),
            ..Default::default()
        };
        let a = task_spec(r).unwrap().auto_approve.unwrap();
        assert_eq!(a.bash_per_minute, 5);
        assert_eq!(a.tool_calls_per_minute, AutoApproveConfig::default().tool_calls_per_minute);
    }

    #[test]
    fn steps_become_a_plan_the_service_can_read() {
        let p = pb::OrchestrationPlan {
            name: "two".into(),
            strategy: pb::OrchestrationStrategy::Dag as i32,
            steps: vec![
                pb::OrchestrationStep {
                    id: "a".into(),
                    prompt: "one".into(),
                    ..Default::default()
                },
                pb::OrchestrationStep {
                    id: "b".into(),
                    prompt: "two".into(),
                    depends_on: vec!["a".into()],
                    workspace: pb::WorkspaceMode::Isolated as i32,
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let v: Value = serde_json::from_str(&plan_text(&p).unwrap()).unwrap();
        assert_eq!(v["steps"][1]["depends_on"], json!(["a"]));
        assert_eq!(v["steps"][1]["workspace"], "isolated");
        assert_eq!(v["name"], "two");
        let parsed = herd_core::plan::PlanFile::parse("p.json", &v.to_string()).unwrap();
        assert_eq!(parsed.steps.len(), 2);
    }

    #[test]
    fn callers_need_absolute_paths_and_readable_policies() {
        let d = Defaults { project_root: "/p".into(), who: "someone".into() };
        let c = caller(&d, None, "").unwrap();
        assert_eq!((c.cwd.as_path(), c.max_depth, c.session), (Path::new("/p"), 1, None));
        let ctx = pb::CallerContext { cwd: "rel".into(), ..Default::default() };
        assert_eq!(caller(&d, Some(&ctx), "").unwrap_err().field_name(), Some("caller.cwd"));
        let ctx = pb::CallerContext { policy_layers_json: "{".into(), ..Default::default() };
        assert!(caller(&d, Some(&ctx), "s").is_err());
    }
}
