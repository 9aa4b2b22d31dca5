//! The permission gate: every tool call an agent asks for goes through one pipeline — rules,
//! PreToolUse hooks, a person, auto-approve limits (DESIGN §6) — and every decision is audited.

pub(crate) mod calls;
pub mod hooks;
mod paths;
mod permissions;
mod protect;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use herd_backends::{PermissionAnswer, RunSpec};
use herd_core::permission::{
    AutoApprover, Call, CallKind, Decision, Policy, Rule, evaluate_layers, input_preview,
    input_sha256, main_input, normalize_tool,
};
use herd_core::{AgentEvent, Decoded, SubagentId};
use herd_store::{NewAudit, NewPermissionRequest, Store, WriterHandle, now_ms};
use serde_json::{Value, json};

pub use hooks::{DEFAULT_HOOK_TIMEOUT, HookDef, HookEnv, HookEvent, HookOutcome, run_hook};
pub use paths::canonical;
pub use permissions::Permissions;
pub(crate) use permissions::granted_env;

/// How long a call waits for a person before it is denied.
pub const DEFAULT_ASK_TIMEOUT: Duration = Duration::from_secs(120);
/// How often a waiting call looks in the store for an answer given by another herd process
/// (an answer given in this process wakes it at once).
const OTHER_PROCESS_POLL: Duration = Duration::from_millis(250);

/// Answers given in this process, announced to the gate waiting for them. The store stays the
/// record (first answer wins there); answers from other processes are found by reading it.
#[derive(Debug, Default)]
pub(crate) struct Answers {
    waiting: Mutex<std::collections::HashMap<String, Arc<tokio::sync::Notify>>>,
}

impl Answers {
    /// Tell the gate waiting on request `id` (if it is in this process) to read its answer.
    pub fn announce(&self, id: &str) {
        if let Some(n) = lock(&self.waiting).get(id) {
            n.notify_one();
        }
    }

    fn register(self: &Arc<Self>, id: &str) -> Waiting {
        let n = Arc::new(tokio::sync::Notify::new());
        lock(&self.waiting).insert(id.to_owned(), n.clone());
        Waiting { answers: self.clone(), id: id.to_owned(), notify: n }
    }
}

/// A gate's registration for one request; dropped, it is forgotten.
struct Waiting {
    answers: Arc<Answers>,
    id: String,
    notify: Arc<tokio::sync::Notify>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        lock(&self.answers.waiting).remove(&self.id);
    }
}
/// The environment variable carrying the policies of the herds above this one (JSON).
pub const POLICY_LAYERS_VAR: &str = "HERD_POLICY_LAYERS";

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

/// A CLI's request to use a tool, decoded by its backend: the gate never reads a CLI's JSON.
/// `tool.claude` is the name rules, hooks and the audit use; `tool.native` the CLI's own.
pub(crate) type ToolRequest = herd_backends::PermissionRequest;

/// Mutable per-run gate state.
#[derive(Debug, Default)]
struct GateState {
    approver: Option<AutoApprover>,
    revoked: Option<String>,
    /// Rules a person added with `herd approve --always`, for the rest of this run.
    always: Vec<Rule>,
}

/// One run's gate.
#[derive(Debug)]
pub(crate) struct Gate {
    perms: Permissions,
    /// The parents' policies, then this run's.
    layers: Vec<Policy>,
    writer: WriterHandle,
    store: Arc<Mutex<Store>>,
    subagent: SubagentId,
    names: HookEnv,
    cwd: PathBuf,
    state: Mutex<GateState>,
    answers: Arc<Answers>,
    /// The paths no rule may let the agent write; set once the run's workspace is known.
    protected: std::sync::OnceLock<crate::protected::Protected>,
    /// A sandbox confines the run (then a write herd cannot place is left to it).
    sandboxed: bool,
}

/// Fields of an audit entry about one call.
struct Entry<'a> {
    event_type: &'static str,
    severity: &'static str,
    decision: Option<&'static str>,
    by: String,
    rate: Option<Value>,
    details: Option<Value>,
    req: &'a ToolRequest,
}

impl Gate {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        perms: Permissions,
        inherited: &[Policy],
        spec: &RunSpec,
        writer: WriterHandle,
        store: Arc<Mutex<Store>>,
        subagent: SubagentId,
        names: HookEnv,
        cwd: PathBuf,
        answers: Arc<Answers>,
    ) -> Self {
        // Validated at create_run; a rule that stopped parsing since is dropped, never widened
        // into "no rules" (the deny-by-default of asking a person still applies).
        let mut own = perms.run_policy(spec).unwrap_or_else(|_| {
            let mut p = perms.policy.clone();
            p.readonly = true;
            p
        });
        own.auto_approve = perms.auto_approve.is_some();
        let mut layers = inherited.to_vec();
        layers.push(own);
        let approver = perms.auto_approve.clone().map(|c| AutoApprover::new(c, now()));
        let sandboxed = matches!(perms.confine.decide(), crate::sandbox::Decision::Confine(_));
        Self {
            perms,
            layers,
            writer,
            store,
            subagent,
            names,
            cwd,
            state: Mutex::new(GateState { approver, ..GateState::default() }),
            answers,
            protected: std::sync::OnceLock::new(),
            sandboxed,
        }
    }

    /// The run's protected paths (its workspace is ready): calls that write one go to a person.
    pub fn protect(&self, protected: crate::protected::Protected) {
        let _ = self.protected.set(protected);
    }

    /// Why `call` must go to a person whatever the rules say: it writes a protected path, or,
    /// with no sandbox around the run, somewhere herd cannot place.
    fn must_ask(&self, call: &Call) -> Option<String> {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let cwd = call.cwd.as_deref().unwrap_or(&self.cwd);
        let touch = match self.protected.get() {
            Some(p) => protect::touches(call, p, cwd, home.as_deref()),
            None => protect::Touch::Unknown("the run's protected paths are not known yet".into()),
        };
        match touch {
            protect::Touch::None => None,
            protect::Touch::Protected { path, how } => Some(format!(
                "{how}: herd protects {} and no rule or auto-approve lets an agent write there",
                path.display()
            )),
            protect::Touch::Unknown(_) if self.sandboxed => None,
            protect::Touch::Unknown(why) => Some(format!(
                "{why}, and no sandbox confines this run: herd cannot tell whether it writes a \
                 path it protects"
            )),
        }
    }

    /// The policy layers a herd started inside this run must apply (JSON for the env).
    pub fn layers_json(&self) -> String {
        serde_json::to_string(&self.layers).unwrap_or_else(|_| "[]".into())
    }

    /// The tools (normalised) the CLI must ask about on every call, of `tools` (what the run
    /// has), whatever allow rules the user's or the repository's own settings hold: every tool
    /// that can change something or reach out (Bash, writes, the web, anything unknown), and a
    /// read-only one too when herd has something to say about it (a deny or ask rule of any
    /// layer names it, a PreToolUse hook watches it, a layer's `tools` leave it out, or
    /// auto-approve, which counts every call, is on). Tool grants always (checked at each use).
    pub fn ask_first(&self, tools: &[String]) -> Vec<String> {
        /// Tools that only look: the CLI may run these on its own when herd has no say.
        const LOOK_ONLY: &[&str] = &["read", "grep", "glob", "ls", "todowrite", "task", "agent"];
        let mut out: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
        out.insert("bash".into());
        for layer in &self.layers {
            for r in layer.deny.iter().chain(&layer.ask) {
                out.insert(r.tool.clone());
                // A Read rule binds searches of a path too.
                if r.tool == "read" {
                    out.extend(["grep".to_owned(), "glob".to_owned()]);
                }
            }
        }
        out.extend(lock(&self.perms.grants).tool_names());
        let counted = self.perms.auto_approve.is_some();
        for t in tools {
            let t = normalize_tool(t);
            let herd_has_a_say = !LOOK_ONLY.contains(&t.as_str())
                || counted
                || self.layers.iter().any(|l| !l.tools.is_empty() && !l.tools.contains(&t))
                || self.perms.hooks.iter().any(|h| h.applies(HookEvent::PreToolUse, &t));
            if herd_has_a_say {
                out.insert(t);
            }
        }
        out.into_iter().collect()
    }

    /// Hooks of `event` for `subject`.
    fn hooks(&self, event: HookEvent, subject: &str) -> Vec<HookDef> {
        self.perms.hooks.iter().filter(|h| h.applies(event, subject)).cloned().collect()
    }

    /// Switch auto-approve off (first time only); true if this call did it.
    pub async fn revoke(&self, reason: &str) -> bool {
        {
            let mut st = lock(&self.state);
            if st.revoked.is_some() {
                return false;
            }
            st.revoked = Some(reason.to_owned());
        }
        let ev = AgentEvent::AutoApproveRevoked { reason: reason.to_owned() };
        let _ = self.writer.append(&self.subagent, vec![Decoded::top(ev)]).await;
        true
    }

    /// Decide one tool call. Never fails: on an internal error the call is denied. Returns the
    /// request with its answer (the backend needs both to encode it).
    pub async fn decide(self: Arc<Self>, req: ToolRequest) -> (ToolRequest, PermissionAnswer) {
        let answer = match self.pipeline(&req).await {
            Ok(a) => a,
            Err(e) => PermissionAnswer::Deny { message: format!("herd could not decide: {e}") },
        };
        (req, answer)
    }

    async fn pipeline(
        &self,
        req: &ToolRequest,
    ) -> Result<PermissionAnswer, herd_store::StoreError> {
        let mut call = Call::new(&req.tool.claude, &req.input, Some(&self.cwd));
        paths::resolve(&mut call, &self.cwd);
        let granted = lock(&self.perms.grants).valid_tools(now());
        let decision = {
            let st = lock(&self.state);
            if st.always.is_empty() {
                evaluate_layers(&self.layers, &call, &granted)
            } else {
                let mut layers = self.layers.clone();
                if let Some(own) = layers.last_mut() {
                    own.allow.extend(st.always.iter().cloned());
                }
                evaluate_layers(&layers, &call, &granted)
            }
        };
        if let Decision::Deny { by } = decision {
            return self.deny(req, "permission_decision", by, None).await;
        }
        let protected = self.must_ask(&call);
        for hook in self.hooks(HookEvent::PreToolUse, &req.tool.claude) {
            let payload = json!({
                "hook_event_name": "PreToolUse", "subagent_id": self.subagent.as_str(),
                "tool_name": req.tool.claude, "tool_input": req.input, "cwd": self.cwd,
            });
            let outcome = self.run_hook(&hook, &payload).await;
            if let HookOutcome::Veto(reason) = outcome {
                let by = format!("PreToolUse hook `{}`: {reason}", hook.command);
                return self.deny(req, "hook_veto", by, None).await;
            }
        }
        if let Some(why) = protected {
            return self.ask_person(req, why).await;
        }
        match decision {
            Decision::Allow { by } => self.allow(req, "permission_decision", by, None).await,
            Decision::Ask { by } => self.ask_person(req, by).await,
            Decision::Deny { .. } | Decision::Undecided => self.auto_or_ask(req).await,
        }
    }

    async fn auto_or_ask(
        &self,
        req: &ToolRequest,
    ) -> Result<PermissionAnswer, herd_store::StoreError> {
        let kind = CallKind::of(&normalize_tool(&req.tool.claude));
        loop {
            let attempt = {
                let mut st = lock(&self.state);
                let revoked = st.revoked.is_some();
                match st.approver.as_mut() {
                    Some(a) if !revoked => {
                        let t = now();
                        if a.time_remaining(t).is_none() {
                            Some(Err(None))
                        } else {
                            Some(
                                a.try_acquire(kind, t)
                                    .map_err(Some)
                                    .map(|s| (s, a.time_remaining(t))),
                            )
                        }
                    }
                    _ => None,
                }
            };
            let queue = self.perms.auto_approve.as_ref().is_some_and(|c| c.queue_on_rate_limit);
            match attempt {
                None => {
                    let why = if lock(&self.state).revoked.is_some() {
                        "auto-approve was revoked; no rule decides this call"
                    } else {
                        "no rule decides this call and auto-approve is off"
                    };
                    return self.ask_person(req, why.into()).await;
                }
                Some(Ok((state, left))) => {
                    let details = json!({"time_remaining_seconds": left.map(|d| d.as_secs())});
                    let entry = Entry {
                        event_type: "auto_approve_tool_call",
                        severity: "warn",
                        decision: Some("allow"),
                        by: "auto-approve".into(),
                        rate: serde_json::to_value(state).ok(),
                        details: Some(details),
                        req,
                    };
                    self.record(entry).await?;
                    return Ok(PermissionAnswer::Allow { input: req.input.clone() });
                }
                Some(Err(None)) => {
                    return self
                        .deny(
                            req,
                            "subagent_timeout",
                            "the auto-approve time box is over".into(),
                            None,
                        )
                        .await;
                }
                Some(Err(Some(limited))) => {
                    let by = format!("rate limit {}", limited.limit);
                    let rate = serde_json::to_value(limited.state).ok();
                    match limited.retry_after.filter(|_| queue) {
                        Some(wait) => {
                            let entry = Entry {
                                event_type: "rate_limit_exceeded",
                                severity: "warn",
                                decision: None,
                                by: format!("{by}: queued for {} ms", wait.as_millis()),
                                rate,
                                details: None,
                                req,
                            };
                            self.record(entry).await?;
                            tokio::time::sleep(wait).await;
                        }
                        None => return self.deny(req, "rate_limit_exceeded", by, rate).await,
                    }
                }
            }
        }
    }

    /// Ask a person: a pending request anyone can answer; denied when nobody does in time.
    async fn ask_person(
        &self,
        req: &ToolRequest,
        why: String,
    ) -> Result<PermissionAnswer, herd_store::StoreError> {
        let id = format!("perm_{}", SubagentId::generate());
        let timeout = self.perms.ask_timeout;
        let preview = input_preview(&req.input);
        self.writer
            .create_permission_request(NewPermissionRequest {
                id: id.clone(),
                subagent_id: self.subagent.to_string(),
                cli_request_id: req.request_id.clone(),
                tool: req.tool.claude.clone(),
                input_preview: preview.clone(),
                input_sha256: input_sha256(&req.input),
                expires_at: now_ms() + timeout.as_millis() as i64,
            })
            .await?;
        let nobody = self.perms.non_interactive;
        if nobody {
            // Recorded like a request nobody answered (the run's result counts it), at once.
            self.writer.close_permission_request(&id, "expired", "non-interactive").await?;
        } else {
            let ev = AgentEvent::PermissionRequested {
                request: id.clone(),
                tool: req.tool.claude.clone(),
                input_preview: preview,
                timeout_ms: timeout.as_millis() as u64,
            };
            self.writer.append(&self.subagent, vec![Decoded::top(ev)]).await?;
        }
        let details = Some(match nobody {
            true => json!({"request": id, "non_interactive": true}),
            false => json!({"request": id}),
        });
        self.record(Entry {
            event_type: "permission_request",
            severity: "info",
            decision: Some("ask"),
            by: why,
            rate: None,
            details,
            req,
        })
        .await?;
        if nobody {
            let by = "nobody can answer: herd runs non-interactively (--non-interactive, or \
                      --json without a terminal; --wait-for-approval waits)"
                .to_owned();
            return self.deny(req, "permission_decision", by, None).await;
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let waiting = self.answers.register(&id);
        loop {
            let row = lock(&self.store).permission_request(&id)?;
            match row {
                Some(r) if r.status == "approved" => {
                    if r.always {
                        let tool = normalize_tool(&req.tool.claude);
                        let pattern = main_input(&tool, &req.input);
                        lock(&self.state).always.push(Rule { tool, pattern });
                    }
                    let by = format!(
                        "a person ({}){}",
                        r.decided_by.unwrap_or_default(),
                        if r.always { ", always" } else { "" }
                    );
                    return self.allow(req, "permission_decision", by, Some(id)).await;
                }
                Some(r) if r.status == "denied" => {
                    let reason = r.reason.unwrap_or_else(|| "no reason given".into());
                    let by = format!("a person ({}): {reason}", r.decided_by.unwrap_or_default());
                    return self.deny(req, "permission_decision", by, None).await;
                }
                Some(r) if r.status != "pending" => {
                    return self
                        .deny(req, "permission_decision", format!("request {}", r.status), None)
                        .await;
                }
                _ => {}
            }
            if tokio::time::Instant::now() >= deadline {
                self.writer.close_permission_request(&id, "expired", "timeout").await?;
                let by = format!("nobody answered within {}s", timeout.as_secs());
                return self.deny(req, "permission_decision", by, None).await;
            }
            tokio::select! {
                _ = waiting.notify.notified() => {}
                _ = tokio::time::sleep(OTHER_PROCESS_POLL) => {}
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    async fn allow(
        &self,
        req: &ToolRequest,
        event_type: &'static str,
        by: String,
        request: Option<String>,
    ) -> Result<PermissionAnswer, herd_store::StoreError> {
        let details = request.map(|r| json!({"request": r}));
        self.record(Entry {
            event_type,
            severity: "info",
            decision: Some("allow"),
            by,
            rate: None,
            details,
            req,
        })
        .await?;
        Ok(PermissionAnswer::Allow { input: req.input.clone() })
    }

    async fn deny(
        &self,
        req: &ToolRequest,
        event_type: &'static str,
        by: String,
        rate: Option<Value>,
    ) -> Result<PermissionAnswer, herd_store::StoreError> {
        let message = format!("Denied by herd: {by}");
        self.record(Entry {
            event_type,
            severity: "warn",
            decision: Some("deny"),
            by,
            rate,
            details: None,
            req,
        })
        .await?;
        Ok(PermissionAnswer::Deny { message })
    }

    /// Audit a decision and add it to the run's events.
    async fn record(&self, e: Entry<'_>) -> Result<(), herd_store::StoreError> {
        let mut details = e.details.unwrap_or_else(|| json!({}));
        if let Some(obj) = details.as_object_mut() {
            obj.insert("cli_request_id".into(), e.req.request_id.clone().into());
            if let Some(a) = &e.req.agent_id {
                obj.insert("agent_id".into(), a.clone().into());
            }
            if let Some(t) = &e.req.tool_use_id {
                obj.insert("tool_use_id".into(), t.clone().into());
            }
            // The audit speaks Claude Code's vocabulary; the CLI's own name is kept beside it.
            if e.req.tool.native != e.req.tool.claude {
                obj.insert("cli_tool".into(), e.req.tool.native.clone().into());
            }
        }
        if let Some(decision) = e.decision.filter(|d| *d != "ask") {
            let ev = AgentEvent::PermissionDecided {
                tool: e.req.tool.claude.clone(),
                decision: decision.into(),
                by: e.by.clone(),
                request: Some(e.req.request_id.clone()),
            };
            self.writer.append(&self.subagent, vec![Decoded::top(ev)]).await?;
        }
        self.writer
            .audit(NewAudit {
                event_type: e.event_type,
                severity: e.severity,
                subagent_id: Some(self.subagent.to_string()),
                parent_session_id: Some(self.names.session_id.clone()),
                tool: Some(e.req.tool.claude.clone()),
                input_preview: Some(input_preview(&e.req.input)),
                input_sha256: Some(input_sha256(&e.req.input)),
                decision: e.decision,
                decided_by: Some(e.by),
                rate_limit_state: e.rate,
                details: Some(details),
            })
            .await
    }

    /// A call the CLI made without asking (read-only tools): audited as observed.
    pub async fn observed(
        &self,
        tool: &str,
        cli_tool: Option<&str>,
        input: &Value,
    ) -> Result<(), herd_store::StoreError> {
        self.writer
            .audit(NewAudit {
                event_type: "tool_call_observed",
                severity: "info",
                subagent_id: Some(self.subagent.to_string()),
                parent_session_id: Some(self.names.session_id.clone()),
                tool: Some(tool.to_owned()),
                input_preview: Some(input_preview(input)),
                input_sha256: Some(input_sha256(input)),
                decision: Some("observed"),
                decided_by: Some("the agent CLI (no permission asked)".into()),
                details: cli_tool.map(|t| json!({"cli_tool": t})),
                ..NewAudit::default()
            })
            .await
    }

    /// Run one hook, recording how it went; failures are shown and audited, never fatal.
    pub async fn run_hook(&self, hook: &HookDef, payload: &Value) -> HookOutcome {
        let mut names = self.names.clone();
        names.tool = payload.get("tool_name").and_then(Value::as_str).map(str::to_owned);
        let outcome = run_hook(hook, payload, &names, &self.cwd).await;
        let ev = AgentEvent::HookRan {
            hook: hook.command.clone(),
            event: hook.event.as_str().into(),
            outcome: outcome.label().into(),
            message: outcome.message(),
        };
        let _ = self.writer.append(&self.subagent, vec![Decoded::top(ev)]).await;
        if matches!(outcome, HookOutcome::Failed(_) | HookOutcome::Timeout) {
            eprintln!(
                "herd: WARN {} hook `{}` {}: {}",
                hook.event.as_str(),
                hook.command,
                outcome.label(),
                outcome.message().unwrap_or_default()
            );
            let _ = self
                .writer
                .audit(NewAudit {
                    event_type: "hook_failed",
                    severity: "warn",
                    subagent_id: Some(self.subagent.to_string()),
                    parent_session_id: Some(self.names.session_id.clone()),
                    tool: names.tool,
                    decided_by: Some(hook.command.clone()),
                    details: Some(json!({"event": hook.event.as_str(), "outcome": outcome.label(), "message": outcome.message()})),
                    ..NewAudit::default()
                })
                .await;
        }
        outcome
    }

    /// Run every hook of a lifecycle event (SubagentStart, SubagentStop, PostToolUse).
    pub async fn fire(&self, event: HookEvent, subject: &str, payload: Value) {
        for hook in self.hooks(event, subject) {
            self.run_hook(&hook, &payload).await;
        }
    }

    pub fn has_hooks(&self, event: HookEvent) -> bool {
        self.perms.hooks.iter().any(|h| h.event == event)
    }

    pub fn names(&self) -> &HookEnv {
        &self.names
    }
}

#[cfg(test)]
mod tests;
