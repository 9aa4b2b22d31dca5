//! The MCP tools of `herd mcp`: their parameters (JSON Schemas read by models), each call as
//! one service call (a task spec, a plan spec, a wait…), and answers as tool results or errors.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use herd_core::BackendKind;
use herd_core::workspace::WorkspaceMode;
use herd_engine::service::{
    Answer, ApiError, Caller, CancelLevel, JobState, PlanSource, PlanSpec, Service, TaskSpec,
    WaitMode as Mode, WorkspaceSpec,
};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::log::Log;
use super::render;

/// The longest `task_wait` (seconds).
const MAX_WAIT_S: u64 = 600;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskParams {
    /// A short label for the task (3-5 words), shown in task_status and `herd ps`.
    pub description: String,
    #[doc = "The full task for the subagent: what to do, where, and what to report back. The subagent \
    does not see this conversation, so include every detail it needs."]
    pub prompt: String,
    #[doc = "Run a named agent definition (from .herd/agents, .claude/agents, ...; see `herd agents \
    list`). Its prompt template, tools, rules and limits apply."]
    pub agent_name: Option<String>,
    #[doc = "Which agent CLI runs the task: \"claude\", \"codex\", \"gemini\", or \"acp\" (an Agent \
    Client Protocol agent; its program comes from agent_name's definition, acp: {command}). \
    Overrides the agent definition's cli. Default: the agent's cli, else default_cli in \
    .herd/config.yml, else claude."]
    pub agent_cli: Option<String>,
    /// Values for the agent definition's prompt template inputs (needs agent_name).
    pub inputs: Option<BTreeMap<String, String>>,
    #[doc = "Return at once with the task's session_id instead of waiting; then use task_wait and \
    task_result. Background tasks share a bounded pool: when it is full the call fails \
    with RESOURCE_EXHAUSTED."]
    pub background: Option<bool>,
    #[doc = "Continue an earlier, finished task (its session_id): the same agent CLI session with \
    this prompt as the next message."]
    pub session_id: Option<String>,
    #[doc = "Working directory of the subagent (default: where herd runs; for a resumed task, the \
    original one)."]
    pub cwd: Option<String>,
    /// Model name or alias for the agent CLI (e.g. "sonnet").
    pub model: Option<String>,
    /// The only tools the subagent has (e.g. ["Read", "Grep"]); [] for none.
    pub tools: Option<Vec<String>>,
    /// Rules for tool calls that run without asking, e.g. "Edit" or "Bash(cargo test *)".
    pub allow: Option<Vec<String>>,
    /// Rules for tool calls that are refused, e.g. "Bash(rm *)". Deny wins over allow.
    pub deny: Option<Vec<String>>,
    /// Stop the subagent after this many model turns.
    #[schemars(range(min = 1, max = 10000))]
    pub max_turns: Option<u32>,
    /// Give up after this many seconds (1-7200; default: the agent's, else 1800).
    #[schemars(range(min = 1, max = 7200))]
    pub timeout_s: Option<u64>,
    #[doc = "Where the subagent works: \"shared\" (cwd as is; the default), \"locked\" (an \
    exclusive advisory lock on cwd's working tree: another locked task fails with \
    RESOURCE_EXHAUSTED unless wait: true) or \"isolated\" (its own git worktree and branch \
    from HEAD, merged into herd/<session_id>/integration when it succeeds; your checkout is \
    not touched, and the result names the branches)."]
    pub workspace: Option<WorkspaceParam>,
    /// With workspace "locked": wait for the lock instead of failing at once.
    pub wait: Option<bool>,
    /// Rules for tool calls that always wait for a person (answered with `approve`).
    pub ask: Option<Vec<String>>,
    #[doc = "Let herd approve the subagent's calls to its `tools` that no rule decides, within \
    limits (per minute: 60 tool calls, 20 Bash calls, 30 file writes; 1000 calls and 1 hour \
    in all). Needs `tools`. Without it, an undecided call waits for `approve` (2 minutes), \
    then is denied."]
    pub auto_approve: Option<bool>,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
pub enum WorkspaceParam {
    Shared,
    Locked,
    Isolated,
}

impl TaskParams {
    /// The call as a task spec; each problem names its parameter.
    fn spec(self) -> Result<TaskSpec, ApiError> {
        let bad = |m: String| ApiError::invalid(m);
        let description = self.description.trim().to_owned();
        if description.is_empty() {
            return Err(bad("description: give a short label for the task".into()));
        }
        let cli = self
            .agent_cli
            .as_deref()
            .map(str::parse::<BackendKind>)
            .transpose()
            .map_err(|e| bad(format!("agent_cli: {e}")))?;
        if cli == Some(BackendKind::Command) {
            return Err(bad("agent_cli: \"command\" runs a program given on herd's command line \
                 (herd task --cli command -- PROGRAM); over MCP use \"claude\""
                .into()));
        }
        if cli == Some(BackendKind::Acp) && self.agent_name.is_none() && self.session_id.is_none() {
            return Err(bad("agent_cli: \"acp\" runs the ACP agent an agent definition names \
                 (acp: {command: [program, args…]}): give agent_name"
                .into()));
        }
        let timeout = match self.timeout_s {
            Some(s) if !(1..=7200).contains(&s) => {
                return Err(bad(format!("timeout_s: {s} is out of range (1-7200)")));
            }
            s => s.map(Duration::from_secs),
        };
        if self.max_turns.is_some_and(|t| !(1..=10_000).contains(&t)) {
            return Err(bad("max_turns: out of range (1-10000)".into()));
        }
        if self.wait.is_some() && !matches!(self.workspace, Some(WorkspaceParam::Locked)) {
            return Err(bad("wait: only with workspace \"locked\"".into()));
        }
        if self.session_id.is_some() && self.agent_name.is_some() {
            return Err(bad(
                "session_id continues an earlier task as it was; leave out agent_name".into(),
            ));
        }
        let mode = match self.workspace {
            None | Some(WorkspaceParam::Shared) => WorkspaceMode::Shared,
            Some(WorkspaceParam::Locked) => WorkspaceMode::Locked,
            Some(WorkspaceParam::Isolated) => WorkspaceMode::Isolated,
        };
        Ok(TaskSpec {
            prompt: self.prompt,
            name: Some(description),
            cli,
            agent: self.agent_name,
            inputs: self.inputs.unwrap_or_default(),
            model: self.model,
            tools: self.tools,
            allow: self.allow.unwrap_or_default(),
            deny: self.deny.unwrap_or_default(),
            ask: self.ask.unwrap_or_default(),
            max_turns: self.max_turns,
            timeout,
            cwd: self.cwd.map(PathBuf::from),
            workspace: WorkspaceSpec {
                mode,
                wait: self.wait.unwrap_or(false),
                ..Default::default()
            },
            auto_approve: (self.auto_approve == Some(true)).then(Default::default),
            resume: self.session_id,
            ..TaskSpec::default()
        })
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusParams {
    /// Task or plan ids (session_id / plan_id); default: every task and plan this server started.
    pub ids: Option<Vec<String>>,
}

#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
pub enum WaitMode {
    // Return when the first of the ids ends.
    Any,
    // Return when every id has ended.
    #[default]
    All,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitParams {
    /// Task or plan ids to wait for.
    pub ids: Vec<String>,
    /// "any": return when one ends; "all" (default): when all have ended.
    #[serde(default)]
    pub mode: WaitMode,
    #[doc = "Wait at most this many seconds (default 60, at most 600); on timeout the call still \
    returns the statuses, with timed_out: true."]
    #[schemars(range(min = 0, max = 600))]
    pub timeout_s: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IdParams {
    /// The task's session_id or the plan's plan_id.
    pub id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelParams {
    /// The task's session_id or the plan's plan_id.
    pub id: String,
    /// Kill at once instead of stopping gracefully (interrupt, then SIGTERM, then SIGKILL).
    pub force: Option<bool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApproveParams {
    /// The pending request's id (perm_…), from task_status's pending_permissions.
    pub request_id: String,
    /// "allow" runs the call; "deny" refuses it (the subagent's model sees the reason).
    pub decision: Decision,
    /// Why (for a deny, shown to the subagent's model).
    pub reason: Option<String>,
    /// With allow: also allow the same call (tool and input) for the rest of that task.
    pub always: Option<bool>,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(inline)]
pub enum Decision {
    Allow,
    Deny,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunPlanParams {
    #[doc = "The plan as YAML (or JSON) text: name, optional limits and defaults, and steps with id, \
    prompt and depends_on. Give this or `path`."]
    pub plan: Option<String>,
    /// A plan file (.yml, .yaml or .json) to run instead of `plan` text.
    pub path: Option<String>,
    /// Return at once with the plan_id; then use task_wait / task_status / task_result.
    pub background: Option<bool>,
    /// Run at most this many steps at once (1-20; overrides the plan's limits.max_concurrent).
    #[schemars(range(min = 1, max = 20))]
    pub max_concurrent: Option<u32>,
}

/// The MCP server: its tools over the engine service.
#[derive(Debug, Clone)]
pub struct Server {
    svc: Service,
    /// Every client call runs as this caller: the server's policy above what it asks for.
    caller: Caller,
    /// The jobs started with `background: true`.
    background: Arc<Mutex<BTreeSet<String>>>,
    log: Arc<Log>,
    tool_router: ToolRouter<Self>,
}

/// A tool's answer: JSON on success, a tool error (seen by the model) otherwise; the error
/// names its code (`RESOURCE_EXHAUSTED`, `INVALID_ARGUMENT`…) so a model can act on it.
fn reply(r: Result<Value, ApiError>) -> CallToolResult {
    match r {
        Ok(v) => CallToolResult::structured(v),
        Err(e) => {
            CallToolResult::error(vec![ContentBlock::text(format!("{}: {}", e.code, e.message))])
        }
    }
}

/// Run a call that starts work on its own task: if the client drops the call half-way, a task
/// is never left persisted but unstarted (a cancelled call stops its task through the ladder).
async fn detached(
    f: impl Future<Output = Result<Value, ApiError>> + Send + 'static,
) -> Result<Value, ApiError> {
    tokio::spawn(f).await.unwrap_or_else(|e| Err(ApiError::internal(format!("herd failed: {e}"))))
}

#[tool_router(router = tool_router)]
impl Server {
    pub fn new(svc: Service, caller: Caller, log: Arc<Log>) -> Self {
        Self { svc, caller, background: Arc::default(), log, tool_router: Self::tool_router() }
    }

    fn logged(&self, tool: &str, r: Result<Value, ApiError>) -> CallToolResult {
        if let Err(e) = &r {
            self.log.line(format_args!("{tool}: error: {}: {}", e.code, e.message));
        }
        reply(r)
    }

    #[tool(description = "Delegate a task to a subagent: herd runs an agent CLI (Claude Code by \
        default, or a named agent definition) on the prompt, supervised, limited and recorded, \
        and returns the run: {session_id, status, state, result, failure_reason, duration_ms, \
        usage, cost_usd, …} (state completed_with_denials: calls nobody answered were denied). The subagent \
        starts fresh: put everything it needs in the prompt. With background: true it returns \
        the session_id at once (use task_wait / task_result). Pass session_id to continue a \
        finished task. What it may do is bounded by the server's policy: your tools, allow and \
        auto_approve only narrow it, and a call the server does not allow waits for a person.")]
    async fn task(
        &self,
        Parameters(p): Parameters<TaskParams>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let server = self.clone();
        let r = detached(async move { server.run_task(p, ctx).await }).await;
        self.logged("task", r)
    }

    #[tool(
        description = "Status of tasks and plans started through herd: queued, running, \
        completed, failed (with the reason) or cancelled, with duration, tokens and cost. \
        Without ids: every task and plan this server started.",
        annotations(read_only_hint = true)
    )]
    async fn task_status(&self, Parameters(p): Parameters<StatusParams>) -> CallToolResult {
        let ids = p.ids.unwrap_or_else(|| self.svc.job_ids());
        let r = ids
            .iter()
            .map(|id| self.svc.status(id).map(|s| self.render_status(&s)))
            .collect::<Result<Vec<_>, _>>()
            .map(|tasks| json!({ "tasks": tasks }));
        self.logged("task_status", r)
    }

    #[tool(
        description = "Wait until any or all of the given tasks/plans have ended (completed, \
        failed or cancelled), at most timeout_s seconds (≤ 600). Returns their statuses and \
        timed_out; fetch outputs with task_result.",
        annotations(read_only_hint = true)
    )]
    async fn task_wait(&self, Parameters(p): Parameters<WaitParams>) -> CallToolResult {
        let r = async {
            let secs = p.timeout_s.unwrap_or(60);
            if secs > MAX_WAIT_S {
                return Err(ApiError::invalid(format!(
                    "timeout_s: {secs} is too long (at most {MAX_WAIT_S}); call task_wait again"
                )));
            }
            let mode = match p.mode {
                WaitMode::All => Mode::All,
                WaitMode::Any => Mode::Any,
            };
            let w = self.svc.wait(&p.ids, mode, Duration::from_secs(secs)).await?;
            let tasks: Vec<Value> = w.jobs.iter().map(|s| self.render_status(s)).collect();
            Ok(json!({"timed_out": w.timed_out, "done": w.done, "tasks": tasks}))
        }
        .await;
        self.logged("task_wait", r)
    }

    #[tool(
        description = "The full result of a finished task (its whole result text, status, \
        failure reason, tokens, cost, transcript path) or plan (every step with its result).",
        annotations(read_only_hint = true)
    )]
    async fn task_result(&self, Parameters(p): Parameters<IdParams>) -> CallToolResult {
        let r = self.result_of(&p.id);
        self.logged("task_result", r)
    }

    #[tool(description = "Stop a running or queued task or plan. Graceful by default (the agent \
        is interrupted, then terminated); force: true kills at once. Returns the final status.")]
    async fn task_cancel(&self, Parameters(p): Parameters<CancelParams>) -> CallToolResult {
        let level =
            if p.force.unwrap_or(false) { CancelLevel::Force } else { CancelLevel::Graceful };
        let r = self
            .svc
            .cancel(&p.id, level, "task_cancel", &self.caller)
            .await
            .map(|s| self.render_status(&s));
        self.logged("task_cancel", r)
    }

    #[tool(
        description = "Run a plan: several subagent steps in parallel up to a bound, each after \
        its depends_on completed, with its dependencies' results in its prompt; a failed step \
        fails its descendants. Give the plan as YAML text (plan) or a file in the project \
        (path), e.g.\nname: review\nsteps:\n  - {id: scan, prompt: \"List risky functions\"}\n  \
        - {id: fix, prompt: \"Fix the first\", depends_on: [scan]}\nReturns the plan with every \
        step's status and result, or with background: true the plan_id at once."
    )]
    async fn run_plan(
        &self,
        Parameters(p): Parameters<RunPlanParams>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let server = self.clone();
        let r = detached(async move { server.start_plan(p, ctx).await }).await;
        self.logged("run_plan", r)
    }

    #[tool(description = "Answer a tool call a subagent is waiting on (listed under \
        pending_permissions in task_status): decision \"allow\" or \"deny\" with an optional \
        reason. The first answer wins, whether from here or from `herd approve` in a terminal; \
        unanswered calls are denied when they time out. Every answer is audited.")]
    async fn approve(&self, Parameters(p): Parameters<ApproveParams>) -> CallToolResult {
        let allow = matches!(p.decision, Decision::Allow);
        let r = async {
            if !allow && p.always.is_some() {
                return Err(ApiError::invalid("always: only with decision \"allow\""));
            }
            let a = Answer { allow, always: p.always.unwrap_or(false), reason: p.reason };
            let req = self.svc.answer(&p.request_id, a, &self.caller).await?;
            let decision = if allow { "allowed" } else { "denied" };
            self.log.line(format_args!("request {} {decision}", req.id));
            // The request as every surface shows it, and what this answer did.
            let mut v = serde_json::to_value(&req).unwrap_or_default();
            v["decision"] = decision.into();
            Ok(v)
        }
        .await;
        self.logged("approve", r)
    }
}

impl Server {
    fn render_status(&self, s: &JobState) -> Value {
        let background =
            self.svc.job_ids().contains(&s.id().to_owned()).then(|| {
                self.background.lock().unwrap_or_else(|p| p.into_inner()).contains(s.id())
            });
        render::status(s, background)
    }

    /// A finished job's full result; a job still going is an error that says to wait.
    fn result_of(&self, id: &str) -> Result<Value, ApiError> {
        let state = self.svc.status(id)?;
        if !state.is_terminal() {
            return Err(ApiError::precondition(format!(
                "{} is still {}; call task_wait first",
                state.id(),
                state.status()
            )));
        }
        match &state {
            JobState::Task(r) => Ok(render::task(r, None)),
            JobState::Plan(p) => Ok(render::plan(&self.svc.plan(&p.id)?, None)),
            JobState::Error { .. } => Ok(self.render_status(&state)),
        }
    }

    /// Wait for job `id` to end; if the client cancels the call first, stop the job.
    async fn finish(&self, id: &str, ct: tokio_util::sync::CancellationToken) {
        let ids = [id.to_owned()];
        tokio::select! {
            _ = self.svc.wait(&ids, Mode::All, Duration::MAX / 4) => return,
            _ = ct.cancelled() => {}
        }
        self.log.line(format_args!("{id}: the client cancelled the call; stopping it"));
        let why = "the MCP client cancelled the call";
        let _ = self.svc.cancel(id, CancelLevel::Graceful, why, &self.caller).await;
    }

    async fn run_task(
        &self,
        p: TaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Value, ApiError> {
        let background = p.background.unwrap_or(false);
        let spawned = self.svc.spawn(&self.caller, p.spec()?).await?;
        let id = spawned.id.to_string();
        self.log.line(format_args!(
            "task {id} submitted ({}, {})",
            spawned.cli,
            if background { "background" } else { "foreground" }
        ));
        if background {
            self.background.lock().unwrap_or_else(|p| p.into_inner()).insert(id.clone());
            return Ok(self.render_status(&self.svc.status(&id)?));
        }
        self.finish(&id, ctx.ct).await;
        let r = self.result_of(&id);
        if let Ok(v) = &r {
            self.log.line(format_args!("task {id} {}", v["status"].as_str().unwrap_or("?")));
        }
        r
    }

    async fn start_plan(
        &self,
        p: RunPlanParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<Value, ApiError> {
        let source = match (p.plan, p.path) {
            (Some(text), None) => PlanSource::Text { name: "plan".into(), text },
            (None, Some(path)) => PlanSource::File(PathBuf::from(path)),
            _ => return Err(ApiError::invalid("give exactly one of plan (YAML text) or path")),
        };
        if p.max_concurrent.is_some_and(|n| !(1..=20).contains(&n)) {
            return Err(ApiError::invalid("max_concurrent: out of range (1-20)"));
        }
        let spec = PlanSpec {
            source,
            max_concurrent: p.max_concurrent.map(|n| n as usize),
            into: None,
            // A client answers with the `approve` tool (or a person with `herd approve`).
            non_interactive: false,
        };
        let started = self.svc.run_plan(&self.caller, spec).await?;
        self.log.line(format_args!("plan {} ({}) submitted", started.id, started.name));
        let id = started.id.clone();
        // Nobody here shows the plan's progress: let its updates go.
        drop(started.updates);
        if p.background.unwrap_or(false) {
            self.background.lock().unwrap_or_else(|p| p.into_inner()).insert(id.clone());
            let status = self.svc.status(&id).map(|s| self.render_status(&s));
            let v = status.unwrap_or_else(
                |_| json!({"id": id, "kind": "plan", "plan_id": id, "status": "pending"}),
            );
            return Ok(v);
        }
        self.finish(&id, ctx.ct).await;
        let r = self.result_of(&id);
        if let Ok(v) = &r {
            self.log.line(format_args!("plan {id} {}", v["status"].as_str().unwrap_or("?")));
        }
        r
    }
}

const INSTRUCTIONS: &str = "herd runs subagents (agent CLIs such as Claude Code) under \
supervision: limits, cancellation, records. Use `task` to delegate one self-contained task \
(foreground, or background: true to run several at once, then task_wait and task_result), \
`run_plan` for several dependent steps. Every task is recorded; `herd ps` and `herd show` \
see them too.";

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("herd", env!("CARGO_PKG_VERSION"))
                    .with_title("herd: supervised subagents"),
            )
            .with_instructions(INSTRUCTIONS)
    }
}
