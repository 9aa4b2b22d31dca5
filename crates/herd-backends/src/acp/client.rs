//! The sans-IO ACP client: fed the agent's stdout lines, it yields herd events, the bytes to
//! write to the agent's stdin, and the terminal result — initialize, session, prompt, cancel.

use std::collections::HashMap;

use herd_core::{AgentEvent, Decoded, ResultInfo, ResultKind, Usage};
use serde_json::{Value, json};

use super::update::{Updates, note_tool, permission_request};
use super::wire::{self, Incoming, RpcError};
use crate::lenient::not_typed;
use crate::{Decoder, PermissionAnswer, PermissionRequest};

/// The subtype of the `ControlRequest` event carrying an agent's permission request.
pub const PERMISSION_METHOD: &str = "session/request_permission";

/// What one ACP run does.
#[derive(Debug, Clone, PartialEq)]
pub struct AcpConfig {
    /// The session's working directory (absolute).
    pub cwd: String,
    pub prompt: String,
    /// MCP servers for the session, in ACP's shape (`[]` for none).
    pub mcp_servers: Vec<Value>,
    /// An earlier session to continue (`session/load`, if the agent can load sessions).
    pub resume: Option<String>,
    /// With `resume`: what to prompt in a new session when the agent cannot load sessions (the
    /// task with the earlier run's history); without it such a resume fails.
    pub replay: Option<String>,
    /// A session mode to switch to before prompting (`session/set_mode`), e.g. gemini's
    /// `default` or codex-acp's `read-only`.
    pub mode: Option<String>,
}

impl AcpConfig {
    pub fn new(cwd: impl Into<String>, prompt: impl Into<String>) -> Self {
        Self {
            cwd: cwd.into(),
            prompt: prompt.into(),
            mcp_servers: Vec::new(),
            resume: None,
            replay: None,
            mode: None,
        }
    }
}

/// What herd's request of a given id was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    Initialize,
    NewSession,
    LoadSession,
    SetMode,
    Prompt,
}

/// What feeding one line produced.
#[derive(Debug, Default, PartialEq)]
pub struct Step {
    pub events: Vec<Decoded>,
    /// Write these to the agent's stdin now.
    pub stdin: Vec<u8>,
    /// The terminal result, once (also among `events`).
    pub result: Option<ResultInfo>,
}

/// The client side of one ACP session, without I/O. Create it, write [`AcpClient::start`]'s
/// bytes, then feed every stdout line to [`AcpClient::feed`] and write what it returns.
#[derive(Debug)]
pub struct AcpClient {
    config: AcpConfig,
    next_id: u64,
    sent: HashMap<String, Sent>,
    session_id: Option<String>,
    can_load: bool,
    updates: Updates,
    /// Permission requests not answered yet, by id key.
    pending: HashMap<String, PermissionRequest>,
    usage: Usage,
    done: bool,
    cancelled: bool,
    /// `session/load` was sent and `session/prompt` not yet: what the agent streams meanwhile
    /// is the loaded session's history (gemini streams it after its answer to the load).
    replaying: bool,
    /// Bytes for stdin not taken yet (the [`Decoder`] face).
    out: Vec<u8>,
}

impl AcpClient {
    pub fn new(config: AcpConfig) -> Self {
        Self {
            config,
            next_id: 1,
            sent: HashMap::new(),
            session_id: None,
            can_load: false,
            updates: Updates::default(),
            pending: HashMap::new(),
            usage: Usage::default(),
            done: false,
            cancelled: false,
            replaying: false,
            out: Vec::new(),
        }
    }

    /// A client whose first bytes (`initialize`) wait in [`Decoder::take_stdin`].
    pub fn starting(config: AcpConfig) -> Self {
        let mut client = Self::new(config);
        client.out = client.start();
        client
    }

    /// The first bytes for stdin: `initialize` (protocol version 1, no file system or terminal
    /// offered, so the agent uses its own tools and asks herd before risky ones).
    pub fn start(&mut self) -> Vec<u8> {
        self.send(Sent::Initialize, "initialize", initialize_params())
    }

    /// The agent's session id, once `session/new` (or `session/load`) answered.
    pub fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    /// Whether the prompt has ended (the terminal result was produced).
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The permission requests waiting for an answer.
    pub fn pending_permissions(&self) -> impl Iterator<Item = &PermissionRequest> {
        self.pending.values()
    }

    fn send(&mut self, what: Sent, method: &str, params: Value) -> Vec<u8> {
        let id = self.next_id;
        self.next_id += 1;
        self.sent.insert(wire::id_key(&json!(id)), what);
        wire::request(id, method, params)
    }

    /// Feed one stdout line (without its newline). Never panics.
    pub fn feed(&mut self, line: &[u8]) -> Step {
        let mut step = Step::default();
        let trimmed = line.trim_ascii();
        if trimmed.is_empty() {
            return step;
        }
        let parsed = match serde_json::from_slice::<Value>(trimmed) {
            Ok(v) => v,
            Err(e) => {
                step.events.push(Decoded::top(not_typed(trimmed, &e)));
                return step;
            }
        };
        match wire::classify(parsed) {
            Some(Incoming::Response { id, outcome }) => {
                self.on_response(&id, outcome, trimmed, &mut step)
            }
            Some(Incoming::Request { id, method, params }) => {
                self.on_request(id, method, params, &mut step)
            }
            Some(Incoming::Notification { method, params }) => {
                let events = match (method.as_str(), params.get("update")) {
                    // History a `session/load` replays is not this run's work.
                    ("session/update", Some(_)) if self.replaying => {
                        vec![AgentEvent::System { subtype: "session/update (replay)".into() }]
                    }
                    ("session/update", Some(update)) => self.updates.update(update, trimmed),
                    _ => vec![AgentEvent::System { subtype: method }],
                };
                step.events.extend(events.into_iter().map(Decoded::top));
            }
            None => step.events.push(Decoded::top(AgentEvent::Unknown {
                raw: String::from_utf8_lossy(trimmed).into_owned(),
            })),
        }
        step
    }

    fn on_request(&mut self, id: Value, method: String, mut params: Value, step: &mut Step) {
        if method != PERMISSION_METHOD {
            // herd offers no file system or terminal: refuse what it does not serve.
            step.stdin.extend(wire::error(&id, -32601, &format!("herd does not serve {method}")));
            step.events.push(Decoded::top(AgentEvent::System { subtype: method }));
            return;
        }
        let key = wire::id_key(&id);
        let call_id = params.pointer("/toolCall/toolCallId").and_then(Value::as_str);
        let known = call_id.and_then(|c| self.updates.name_of(c)).cloned();
        if let (Some(known), Some(tc)) = (known, params.get_mut("toolCall")) {
            note_tool(tc, &known);
        }
        if let Some(call) = params.get("toolCall").and_then(|tc| self.updates.tool_call(tc)) {
            step.events.push(Decoded::top(call));
        }
        let req = permission_request(key.clone(), &params);
        if self.cancelled {
            step.stdin.extend(encode_answer(&req, None));
            return;
        }
        self.pending.insert(key.clone(), req);
        step.events.push(Decoded::top(AgentEvent::ControlRequest {
            request_id: key,
            subtype: PERMISSION_METHOD.to_owned(),
            request: params,
        }));
    }

    fn on_response(
        &mut self,
        id: &Value,
        outcome: Result<Value, RpcError>,
        raw: &[u8],
        step: &mut Step,
    ) {
        let Some(what) = self.sent.remove(&wire::id_key(id)) else {
            step.events.push(Decoded::top(AgentEvent::Unknown {
                raw: String::from_utf8_lossy(raw).into_owned(),
            }));
            return;
        };
        let result = match outcome {
            Err(e) => {
                return self
                    .finish(step, Err(format!("{} failed: {}", method_of(what), e.describe())));
            }
            Ok(r) => r,
        };
        if self.cancelled && what != Sent::Prompt {
            // Stopped before the prompt went out: go no further.
            return self.finish(step, Err("cancelled before the prompt was sent".into()));
        }
        match what {
            Sent::Initialize => {
                self.can_load =
                    result.pointer("/agentCapabilities/loadSession") == Some(&json!(true));
                step.events.push(Decoded::top(AgentEvent::System { subtype: "initialize".into() }));
                let params = json!({"cwd": self.config.cwd, "mcpServers": self.config.mcp_servers});
                match self.config.resume.clone() {
                    Some(_) if !self.can_load => match self.config.replay.take() {
                        Some(replay) => {
                            // No native resume: the history goes in the prompt of a new session.
                            self.config.resume = None;
                            self.config.prompt = replay;
                            step.events.push(Decoded::top(AgentEvent::System {
                                subtype: "session/load unavailable: history replayed".into(),
                            }));
                            step.stdin.extend(self.send(Sent::NewSession, "session/new", params));
                        }
                        None => self.finish(
                            step,
                            Err("the agent cannot load sessions (agentCapabilities.loadSession \
                                 is not true): nothing to resume"
                                .into()),
                        ),
                    },
                    Some(session) => {
                        let mut p = params;
                        p["sessionId"] = json!(session);
                        self.replaying = true;
                        step.stdin.extend(self.send(Sent::LoadSession, "session/load", p));
                    }
                    None => step.stdin.extend(self.send(Sent::NewSession, "session/new", params)),
                }
            }
            Sent::NewSession | Sent::LoadSession => {
                let session = match what {
                    Sent::NewSession => {
                        result.get("sessionId").and_then(Value::as_str).map(str::to_owned)
                    }
                    _ => self.config.resume.clone(),
                };
                let Some(session) = session else {
                    return self
                        .finish(step, Err("session/new answered without a sessionId".into()));
                };
                self.session_id = Some(session.clone());
                step.events.push(Decoded::top(AgentEvent::Init {
                    native_session_id: Some(session.clone()),
                    model: result
                        .pointer("/models/currentModelId")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    tools: Vec::new(),
                }));
                match self.config.mode.clone() {
                    Some(mode) => {
                        let p = json!({"sessionId": session, "modeId": mode});
                        step.stdin.extend(self.send(Sent::SetMode, "session/set_mode", p));
                    }
                    None => step.stdin.extend(self.prompt()),
                }
            }
            Sent::SetMode => step.stdin.extend(self.prompt()),
            Sent::Prompt => self.finish(step, Ok(result)),
        }
    }

    fn prompt(&mut self) -> Vec<u8> {
        self.replaying = false;
        let p = json!({
            "sessionId": self.session_id,
            "prompt": [{"type": "text", "text": self.config.prompt}],
        });
        self.send(Sent::Prompt, "session/prompt", p)
    }

    /// The terminal result from the prompt's answer (`Ok`) or a failed step (`Err`).
    fn finish(&mut self, step: &mut Step, outcome: Result<Value, String>) {
        if self.done {
            return;
        }
        self.done = true;
        if let Ok(r) = &outcome {
            self.usage.add(&usage_of(r));
        }
        let (subtype, is_error, text, errors, reason) = match outcome {
            Ok(r) => {
                let stop = r.get("stopReason").and_then(Value::as_str).unwrap_or("").to_owned();
                let kind = match stop.as_str() {
                    "end_turn" => ResultKind::Success,
                    "max_turn_requests" => ResultKind::ErrorMaxTurns,
                    _ => ResultKind::ErrorDuringExecution,
                };
                let failed = kind != ResultKind::Success;
                let errors = if failed {
                    vec![format!("the prompt ended with stopReason {stop:?}")]
                } else {
                    vec![]
                };
                (kind, failed, Some(self.updates.answer.clone()), errors, Some(stop))
            }
            Err(m) => (ResultKind::ErrorDuringExecution, true, Some(m.clone()), vec![m], None),
        };
        let info = ResultInfo {
            subtype,
            is_error,
            api_error_status: errors.last().and_then(|e| crate::api_error::http_status(e)),
            text,
            errors,
            num_turns: Some(self.updates.turns),
            native_session_id: self.session_id.clone(),
            usage: self.usage,
            cost_usd: None,
            duration_ms: None,
            permission_denials: Vec::new(),
            terminal_reason: reason,
        };
        step.events.push(Decoded::top(AgentEvent::Result(info.clone())));
        step.result = Some(info);
    }

    /// The answer to the pending permission request `request_id` (the `ControlRequest`'s id),
    /// or `None` if none such is pending. ACP cannot change a call's input: an allow runs the
    /// call as asked.
    pub fn answer(&mut self, request_id: &str, answer: &PermissionAnswer) -> Option<Vec<u8>> {
        let req = self.pending.remove(request_id)?;
        Some(encode_answer(&req, Some(answer)))
    }

    /// A graceful stop: `session/cancel` for the session, and every pending permission request
    /// answered `cancelled` (as ACP requires); the agent then ends the prompt with
    /// `stopReason: "cancelled"`. Empty before the session exists or after the end.
    pub fn cancel(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        if self.done || self.cancelled {
            return out;
        }
        self.cancelled = true;
        for (_, req) in self.pending.drain() {
            out.extend(encode_answer(&req, None));
        }
        if let Some(session) = &self.session_id {
            out.extend(wire::notification("session/cancel", json!({"sessionId": session})));
        }
        out
    }
}

fn method_of(what: Sent) -> &'static str {
    match what {
        Sent::Initialize => "initialize",
        Sent::NewSession => "session/new",
        Sent::LoadSession => "session/load",
        Sent::SetMode => "session/set_mode",
        Sent::Prompt => "session/prompt",
    }
}

/// `initialize`'s params.
pub(crate) fn initialize_params() -> Value {
    json!({
        "protocolVersion": 1,
        "clientCapabilities": {"fs": {"readTextFile": false, "writeTextFile": false}, "terminal": false},
        "clientInfo": {"name": "herd", "version": env!("CARGO_PKG_VERSION")},
    })
}

/// Token usage a prompt's answer reports: gemini's `_meta.quota.token_count`, or the
/// (unstable) `usage` object; zero when none.
fn usage_of(r: &Value) -> Usage {
    let n = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
    if let Some(t) = r.pointer("/_meta/quota/token_count") {
        return Usage {
            input_tokens: n(t.get("input_tokens")),
            output_tokens: n(t.get("output_tokens")),
            ..Usage::default()
        };
    }
    if let Some(u) = r.get("usage") {
        let cached = n(u.get("cachedReadTokens"));
        return Usage {
            input_tokens: n(u.get("inputTokens")).saturating_sub(cached),
            output_tokens: n(u.get("outputTokens")),
            cache_creation_input_tokens: n(u.get("cachedWriteTokens")),
            cache_read_input_tokens: cached,
        };
    }
    Usage::default()
}

/// The JSON-RPC answer to a permission request: the offered allow (or reject) option, or
/// `cancelled` when `answer` is `None` or the agent offered no fitting option.
pub(crate) fn encode_answer(req: &PermissionRequest, answer: Option<&PermissionAnswer>) -> Vec<u8> {
    let option = match answer {
        Some(PermissionAnswer::Allow { .. }) => req.allow_option(),
        Some(PermissionAnswer::Deny { .. }) => req.reject_option(),
        None => None,
    };
    let outcome = match option {
        Some(o) => json!({"outcome": "selected", "optionId": o.id}),
        None => json!({"outcome": "cancelled"}),
    };
    wire::result(&wire::id_value(&req.request_id), json!({"outcome": outcome}))
}

impl Decoder for AcpClient {
    fn decode(&mut self, line: &[u8], out: &mut Vec<Decoded>) {
        let step = self.feed(line);
        out.extend(step.events);
        self.out.extend(step.stdin);
    }

    /// Model responses: a response starts at the first agent text or tool call after the
    /// prompt or a finished tool call.
    fn turns(&self) -> u32 {
        self.updates.turns
    }

    fn usage(&self) -> Usage {
        self.usage
    }

    fn take_stdin(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    fn interrupt(&mut self) -> Vec<u8> {
        self.cancel()
    }

    fn answered(&mut self, request_id: &str) -> bool {
        self.pending.remove(request_id).is_some()
    }

    fn handshake_pending(&self) -> Option<String> {
        if self.session_id.is_some() || self.done {
            return None;
        }
        let waiting: Vec<&str> = self
            .sent
            .values()
            .filter(|s| matches!(s, Sent::Initialize | Sent::NewSession | Sent::LoadSession))
            .map(|s| method_of(*s))
            .collect();
        Some(match waiting.as_slice() {
            [] => "its answer to initialize".to_owned(),
            [m, ..] => format!("its answer to {m}"),
        })
    }
}

#[cfg(test)]
mod tests;
