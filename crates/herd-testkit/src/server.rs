//! `MockServer`: the scripted model APIs (Anthropic Messages, OpenAI Responses, Gemini) on
//! 127.0.0.1, served from its own thread and tokio runtime; routing, turn playing, the record.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use crate::anthropic::{self, Block, Message};
use crate::http::{Conn, ReadError, Request, Response};
use crate::script::{Placeholders, Reply, Script, select_turn};
use crate::{conversation, gemini, openai};

/// A connection idle this long (no complete request) is closed.
const IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// Which model API a request spoke, by its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// `/v1/messages…` (claude).
    Anthropic,
    /// `/v1/responses` (codex, codex-acp).
    OpenAiResponses,
    /// `/v1beta/models/{model}:{action}` (gemini).
    Gemini,
    /// Anything else (answered 404, but recorded).
    Other,
}

impl Api {
    fn of(path: &str) -> Api {
        if path.starts_with("/v1/messages") {
            Api::Anthropic
        } else if path == "/v1/responses" {
            Api::OpenAiResponses
        } else if gemini::route(path).is_some() {
            Api::Gemini
        } else {
            Api::Other
        }
    }

    fn scenario(self, body: &Value) -> Option<String> {
        match self {
            Api::Anthropic => conversation::scenario_marker(body),
            Api::OpenAiResponses => openai::scenario_marker(body),
            Api::Gemini => gemini::scenario_marker(body),
            Api::Other => None,
        }
    }
}

/// One request the mock received.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    /// The API the path belongs to.
    pub api: Api,
    pub method: String,
    /// The path without the query string, e.g. `/v1/messages`.
    pub path: String,
    /// The query string without `?`, e.g. `beta=true`.
    pub query: Option<String>,
    /// Headers in the order received, names as sent.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON, `Null` if it is not JSON.
    pub body: Value,
    /// The `SCENARIO=` marker of the conversation, known scenario or not.
    pub scenario: Option<String>,
    /// Whether the answer was streamed (`"stream": true`, or Gemini's `:streamGenerateContent`).
    pub streaming: bool,
    pub received_at: Instant,
}

impl RecordedRequest {
    /// The first header with this name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// How many model turns the conversation already held (= the turn index played).
    pub fn assistant_turns(&self) -> usize {
        match self.api {
            Api::Anthropic => conversation::assistant_turns(&self.body),
            Api::OpenAiResponses => openai::assistant_turns(&self.body),
            Api::Gemini => gemini::assistant_turns(&self.body),
            Api::Other => 0,
        }
    }
}

#[derive(Default)]
struct State {
    scripts: Mutex<HashMap<String, Script>>,
    requests: Mutex<Vec<RecordedRequest>>,
    /// Source of unique message and tool_use ids.
    ids: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The scripted model API mock (Anthropic, OpenAI Responses and Gemini on one port, routed
/// by path; one set of scenarios for all). Dropping it stops the server (the shared one lives
/// until the test binary exits).
///
/// ```no_run
/// use herd_testkit::{MockServer, Script};
/// let mock = MockServer::shared();
/// mock.script(
///     "echo",
///     Script::new()
///         .tool_use("Bash", serde_json::json!({"command": "echo hi", "description": "x"}))
///         .text("saw: {{last_tool_result}}"),
/// );
/// // Then run `claude -p "SCENARIO=echo go" --output-format stream-json --verbose` with
/// // `env_clear()` and `herd_testkit::claude_env(mock, home)`; afterwards inspect
/// // `mock.requests_for("echo")`.
/// ```
pub struct MockServer {
    addr: SocketAddr,
    state: Arc<State>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl fmt::Debug for MockServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MockServer").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl MockServer {
    /// Starts a server on `127.0.0.1:0`.
    ///
    /// # Panics
    /// If no loopback port can be bound or the server thread cannot start; see [`Self::try_start`].
    pub fn start() -> MockServer {
        match Self::try_start() {
            Ok(server) => server,
            Err(e) => panic!("herd-testkit: cannot start the mock model server: {e}"),
        }
    }

    /// Starts a server on `127.0.0.1:0`, serving from a new thread with its own tokio runtime.
    pub fn try_start() -> io::Result<MockServer> {
        let std_listener = StdListener::bind(("127.0.0.1", 0))?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let state = Arc::new(State::default());
        let (shutdown, shutdown_rx) = oneshot::channel();
        let thread_state = Arc::clone(&state);
        let thread = std::thread::Builder::new()
            .name(format!("herd-mock-model-{}", addr.port()))
            .spawn(move || {
            runtime.block_on(async move {
                match TcpListener::from_std(std_listener) {
                    Ok(listener) => accept_loop(listener, thread_state, shutdown_rx).await,
                    Err(e) => eprintln!("herd-testkit mock: cannot register listener: {e}"),
                }
            });
        })?;
        Ok(MockServer { addr, state, shutdown: Some(shutdown), thread: Some(thread) })
    }

    /// One server per test binary, started on first use.
    pub fn shared() -> &'static MockServer {
        static SHARED: OnceLock<MockServer> = OnceLock::new();
        SHARED.get_or_init(MockServer::start)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Registers (or replaces) the scenario selected by `SCENARIO=<name>`.
    pub fn script(&self, name: &str, script: Script) {
        lock(&self.state.scripts).insert(name.to_owned(), script);
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.state.requests).clone()
    }

    /// The requests whose conversation carries the marker `SCENARIO=<scenario>`.
    pub fn requests_for(&self, scenario: &str) -> Vec<RecordedRequest> {
        lock(&self.state.requests)
            .iter()
            .filter(|r| r.scenario.as_deref() == Some(scenario))
            .cloned()
            .collect()
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    state: Arc<State>,
    mut shutdown: oneshot::Receiver<()>,
) {
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    tokio::spawn(serve_connection(stream, Arc::clone(&state)));
                }
                // E.g. EMFILE: back off instead of spinning.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
        }
    }
}

async fn serve_connection(stream: TcpStream, state: Arc<State>) {
    let _ = stream.set_nodelay(true);
    let mut conn = Conn::new(stream);
    loop {
        let request = match tokio::time::timeout(IDLE_TIMEOUT, conn.next_request()).await {
            Ok(Ok(Some(request))) => request,
            Ok(Err(ReadError::Bad { status, reason })) => {
                let body = anthropic::error_json(status, &format!("mock: bad request: {reason}"));
                let _ = conn.respond(&Response::json(status, &body), false, false).await;
                return;
            }
            Ok(Ok(None) | Err(ReadError::Io)) | Err(_) => return,
        };
        let keep_alive = request.keep_alive();
        let head_only = request.method.eq_ignore_ascii_case("HEAD");
        let response = handle(&state, request).await;
        if conn.respond(&response, keep_alive, head_only).await.is_err() || !keep_alive {
            return;
        }
    }
}

async fn handle(state: &State, request: Request) -> Response {
    let (path, query) = match request.target.split_once('?') {
        Some((path, query)) => (path.to_owned(), Some(query.to_owned())),
        None => (request.target.clone(), None),
    };
    let api = Api::of(&path);
    let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
    let scenario = api.scenario(&body);
    let gemini_route = gemini::route(&path);
    let streaming = match &gemini_route {
        Some((_, action)) => *action == gemini::Action::StreamGenerate,
        None => body.get("stream").and_then(Value::as_bool) == Some(true),
    };
    let body_len = request.body.len();
    lock(&state.requests).push(RecordedRequest {
        api,
        method: request.method.clone(),
        path: path.clone(),
        query,
        headers: request.headers,
        body: body.clone(),
        scenario: scenario.clone(),
        streaming,
        received_at: Instant::now(),
    });
    let scenario = scenario.as_deref();

    match (request.method.as_str(), api) {
        ("POST", _) if api != Api::Other && !body.is_object() => {
            let message = "mock: request body is not a JSON object";
            Response::json(400, &error_json(api, 400, message))
        }
        ("POST", Api::Anthropic) if path == "/v1/messages" => {
            messages(state, &body, scenario, streaming).await
        }
        ("POST", Api::Anthropic) if path == "/v1/messages/count_tokens" => {
            Response::json(200, &anthropic::count_tokens_json(body_len))
        }
        ("POST", Api::OpenAiResponses) => responses(state, &body, scenario, streaming).await,
        ("POST", Api::Gemini) if let Some((model, action)) = gemini_route => {
            generate(state, &body, scenario, &model, action).await
        }
        (method, _) => Response::json(
            404,
            &error_json(api, 404, &format!("mock: no route for {method} {path}")),
        ),
    }
}

fn error_json(api: Api, status: u16, message: &str) -> Value {
    match api {
        Api::OpenAiResponses => openai::error_json(status, message),
        Api::Gemini => gemini::error_json(status, message),
        Api::Anthropic | Api::Other => anthropic::error_json(status, message),
    }
}

/// The scripted reply for a request holding `assistant_turns` model turns, placeholders filled,
/// after the turn's delay.
async fn play(
    state: &State,
    scenario: Option<&str>,
    assistant_turns: usize,
    last_tool_result: Option<String>,
) -> Reply {
    let turn = {
        let scripts = lock(&state.scripts);
        let script = scenario.and_then(|name| scripts.get(name));
        select_turn(scenario, script, assistant_turns)
    };
    if !turn.delay.is_zero() {
        tokio::time::sleep(turn.delay).await;
    }
    let last_tool_result = last_tool_result.unwrap_or_default();
    Placeholders { scenario: scenario.unwrap_or(""), last_tool_result: &last_tool_result }
        .render_reply(turn.reply)
}

fn next_id(state: &State) -> u64 {
    state.ids.fetch_add(1, Ordering::Relaxed)
}

fn model_of(body: &Value, default: &str) -> String {
    body.get("model").and_then(Value::as_str).unwrap_or(default).to_owned()
}

/// `POST /v1/messages`: the Anthropic Messages API.
async fn messages(
    state: &State,
    body: &Value,
    scenario: Option<&str>,
    streaming: bool,
) -> Response {
    let reply = play(
        state,
        scenario,
        conversation::assistant_turns(body),
        conversation::last_tool_result(body),
    )
    .await;
    let request_id = format!("req_mock_{}", next_id(state));
    let blocks = match reply {
        Reply::HttpError { status, message } => {
            return Response::json(status, &anthropic::error_json(status, &message))
                .with_header("request-id", request_id);
        }
        Reply::Text(text) => vec![Block::Text(text)],
        Reply::ToolUse { text, name, input } => {
            let mut blocks: Vec<Block> = text.into_iter().map(Block::Text).collect();
            blocks.push(Block::ToolUse {
                id: format!("toolu_mock_{}", next_id(state)),
                name,
                input,
            });
            blocks
        }
    };
    let model = model_of(body, "claude-mock");
    let message = Message { id: format!("msg_mock_{}", next_id(state)), model, blocks };
    let response = if streaming {
        Response::new(200, "text/event-stream; charset=utf-8", message.to_sse())
            .with_header("cache-control", "no-cache")
    } else {
        Response::json(200, &message.to_json())
    };
    response.with_header("request-id", request_id)
}

/// `POST /v1/responses`: the OpenAI Responses API.
async fn responses(
    state: &State,
    body: &Value,
    scenario: Option<&str>,
    streaming: bool,
) -> Response {
    let reply =
        play(state, scenario, openai::assistant_turns(body), openai::last_tool_result(body)).await;
    let request_id = format!("req_mock_{}", next_id(state));
    if let Reply::HttpError { status, message } = &reply {
        return Response::json(*status, &openai::error_json(*status, message))
            .with_header("x-request-id", request_id);
    }
    let id = format!("resp_mock_{}", next_id(state));
    let Some(response) =
        openai::Response::from_reply(id, model_of(body, "gpt-mock"), reply, || next_id(state))
    else {
        return Response::json(500, &openai::error_json(500, "mock: no response"));
    };
    let out = if streaming {
        Response::new(200, "text/event-stream; charset=utf-8", response.to_sse())
            .with_header("cache-control", "no-cache")
    } else {
        Response::json(200, &response.to_json())
    };
    out.with_header("x-request-id", request_id)
}

/// `POST /v1beta/models/{model}:{action}`: the Gemini API. Streamed calls play the script;
/// one-shot JSON calls (the model router, …) get a value of their schema; other one-shot calls
/// (session summaries) a fixed text.
async fn generate(
    state: &State,
    body: &Value,
    scenario: Option<&str>,
    model: &str,
    action: gemini::Action,
) -> Response {
    let response_id = format!("mock_{}", next_id(state));
    match action {
        gemini::Action::StreamGenerate => {
            let reply = play(
                state,
                scenario,
                gemini::assistant_turns(body),
                gemini::last_tool_result(body),
            )
            .await;
            if let Reply::HttpError { status, message } = &reply {
                return Response::json(*status, &gemini::error_json(*status, message));
            }
            match gemini::Answer::from_reply(model.to_owned(), response_id, reply) {
                Some(a) => Response::new(200, "text/event-stream", a.to_sse()),
                None => Response::json(500, &gemini::error_json(500, "mock: no answer")),
            }
        }
        gemini::Action::Generate => {
            let text = match gemini::json_schema(body) {
                Some(schema) => gemini::value_for_schema(schema).to_string(),
                None => "mock summary".to_owned(),
            };
            Response::json(
                200,
                &gemini::Answer::text(model.to_owned(), response_id, text).to_json(),
            )
        }
        gemini::Action::CountTokens => {
            Response::json(200, &json!({"totalTokens": (body.to_string().len() / 4).max(1)}))
        }
        gemini::Action::Other(other) => Response::json(
            404,
            &gemini::error_json(404, &format!("mock: no Gemini action {other}")),
        ),
    }
}
