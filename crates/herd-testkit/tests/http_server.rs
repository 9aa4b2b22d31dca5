//! The mock over raw HTTP/1.1 sockets (no CLI needed): routing of the three APIs, framing, keep-alive,
//! error handling, delays and lifecycle.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use herd_testkit::{Api, MockServer, Script};
use serde_json::{Value, json};

struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("JSON body")
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Reads one response (Content-Length framed; `head_only` for HEAD).
fn read_response(reader: &mut BufReader<TcpStream>, head_only: bool) -> Resp {
    let mut status_line = String::new();
    reader.read_line(&mut status_line).unwrap();
    let status = status_line.split(' ').nth(1).and_then(|s| s.parse().ok()).expect(&status_line);
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (k, v) = line.split_once(':').unwrap();
        headers.push((k.trim().to_owned(), v.trim().to_owned()));
    }
    let mut resp = Resp { status, headers, body: Vec::new() };
    if !head_only {
        let len: usize = resp.header("content-length").unwrap().parse().unwrap();
        resp.body = vec![0; len];
        reader.read_exact(&mut resp.body).unwrap();
    }
    resp
}

fn connect(mock: &MockServer) -> (TcpStream, BufReader<TcpStream>) {
    let stream = TcpStream::connect(mock.addr()).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let reader = BufReader::new(stream.try_clone().unwrap());
    (stream, reader)
}

fn post(mock: &MockServer, path: &str, body: &Value) -> Resp {
    let (mut stream, mut reader) = connect(mock);
    let body = body.to_string();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    read_response(&mut reader, false)
}

fn conversation(scenario: &str, assistant_turns: usize, stream: bool) -> Value {
    let mut messages = vec![json!({"role": "user", "content": [
        {"type": "text", "text": "<system-reminder>ctx</system-reminder>"},
        {"type": "text", "text": format!("SCENARIO={scenario} go")}]})];
    for i in 0..assistant_turns {
        messages.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": format!("t{i}"), "name": "Bash", "input": {}}]}));
        messages.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": format!("t{i}"), "content": format!("out{i}")}]}));
    }
    json!({"model": "claude-test-model", "max_tokens": 100, "stream": stream, "messages": messages})
}

/// Parses an SSE body into its `data` JSON values, checking each `event:` name matches.
fn sse_events(body: &str) -> Vec<Value> {
    body.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (event, data) = e.split_once('\n').unwrap();
            let data: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
            assert_eq!(event.strip_prefix("event: ").unwrap(), data["type"]);
            data
        })
        .collect()
}

#[test]
fn non_streaming_turns_follow_assistant_count() {
    let mock = MockServer::shared();
    mock.script(
        "http-json",
        Script::new()
            .text_and_tool_use("calling", "Bash", json!({"command": "echo {{scenario}}"}))
            .tool_use("Bash", json!({"command": "true"}))
            .text("last={{last_tool_result}}"),
    );
    let first = post(mock, "/v1/messages?beta=true", &conversation("http-json", 0, false));
    assert_eq!(first.status, 200);
    assert!(first.header("content-type").unwrap().starts_with("application/json"));
    let m = first.json();
    assert_eq!(m["model"], "claude-test-model");
    assert_eq!(m["stop_reason"], "tool_use");
    assert_eq!(m["content"][0], json!({"type": "text", "text": "calling"}));
    assert_eq!(m["content"][1]["input"], json!({"command": "echo http-json"}));
    assert_eq!(m["usage"]["input_tokens"], 12);

    let second = post(mock, "/v1/messages", &conversation("http-json", 1, false)).json();
    assert_ne!(second["content"][0]["id"], m["content"][1]["id"], "tool_use ids are unique");
    assert!(second["content"][0]["id"].as_str().unwrap().starts_with("toolu_mock_"));

    let third = post(mock, "/v1/messages", &conversation("http-json", 2, false)).json();
    assert_eq!(third["content"][0]["text"], "last=out1");
    assert_eq!(third["stop_reason"], "end_turn");
    let done = post(mock, "/v1/messages", &conversation("http-json", 3, false)).json();
    assert_eq!(done["content"][0]["text"], "MOCK DONE scenario=http-json");

    let recorded = mock.requests_for("http-json");
    assert_eq!(recorded.len(), 4);
    assert_eq!(recorded[0].path, "/v1/messages");
    assert_eq!(recorded[0].query.as_deref(), Some("beta=true"));
    assert!(!recorded[0].streaming);
    assert_eq!(recorded[0].header("host"), Some("x"));
}

#[test]
fn streaming_reply_is_sse() {
    let mock = MockServer::shared();
    mock.script(
        "http-sse",
        Script::new().tool_use("Write", json!({"file_path": "/tmp/x", "content": "é\n"})),
    );
    let resp = post(mock, "/v1/messages", &conversation("http-sse", 0, true));
    assert_eq!(resp.status, 200);
    assert!(resp.header("content-type").unwrap().starts_with("text/event-stream"));
    let events = sse_events(&resp.text());
    assert_eq!(events.first().unwrap()["message"]["model"], "claude-test-model");
    assert_eq!(events.last().unwrap()["type"], "message_stop");
    let partial: String =
        events.iter().filter_map(|e| e["delta"]["partial_json"].as_str()).collect();
    assert_eq!(
        serde_json::from_str::<Value>(&partial).unwrap(),
        json!({"file_path": "/tmp/x", "content": "é\n"})
    );
    let delta = events.iter().find(|e| e["type"] == "message_delta").unwrap();
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
    assert!(mock.requests_for("http-sse")[0].streaming);
}

#[test]
fn defaults_errors_and_other_routes() {
    let mock = MockServer::shared();
    let none = post(
        mock,
        "/v1/messages",
        &json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!(none.json()["content"][0]["text"], "mock: no scenario");
    let unknown = post(mock, "/v1/messages", &conversation("http-never-registered", 0, true));
    assert!(unknown.text().contains("mock: no scenario"));

    mock.script("http-err", Script::new().error(529, "mock: overloaded"));
    let err = post(mock, "/v1/messages", &conversation("http-err", 0, true));
    assert_eq!(err.status, 529);
    assert_eq!(
        err.json(),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "mock: overloaded"}})
    );
    assert!(err.header("request-id").is_some());

    let count = post(mock, "/v1/messages/count_tokens", &conversation("http-count", 0, false));
    assert_eq!(count.status, 200);
    assert!(count.json()["input_tokens"].as_u64().unwrap() > 0);

    let missing = post(mock, "/v2/nothing", &json!({}));
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json()["error"]["type"], "not_found_error");

    let (mut stream, mut reader) = connect(mock);
    stream.write_all(b"POST /v1/messages HTTP/1.1\r\nContent-Length: 5\r\n\r\nnope!").unwrap();
    assert_eq!(read_response(&mut reader, false).status, 400);
    // HEAD gets headers only, and the connection stays usable.
    stream.write_all(b"HEAD / HTTP/1.1\r\nHost: probe-head\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut reader, true).status, 404);
    stream.write_all(b"GET /v1/models HTTP/1.1\r\nHost: probe-get\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut reader, false).status, 404);
    let seen: Vec<_> = mock
        .requests()
        .into_iter()
        .filter(|r| r.header("host").is_some_and(|h| h.starts_with("probe-")))
        .map(|r| (r.method, r.path))
        .collect();
    assert_eq!(seen, [("HEAD".into(), "/".into()), ("GET".into(), "/v1/models".into())]);
}

#[test]
fn keep_alive_chunked_and_expect_continue() {
    let mock = MockServer::shared();
    mock.script("http-chunked", Script::new().text("chunked ok").forever());
    let (mut stream, mut reader) = connect(mock);
    let body = conversation("http-chunked", 0, false).to_string();
    let (a, b) = body.split_at(10);
    write!(
        stream,
        "POST /v1/messages HTTP/1.1\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n"
    )
    .unwrap();
    let cont = read_response(&mut reader, true);
    assert_eq!(cont.status, 100);
    write!(stream, "{:x}\r\n{a}\r\n{:x};ext=1\r\n{b}\r\n0\r\nTrailer: x\r\n\r\n", a.len(), b.len())
        .unwrap();
    let first = read_response(&mut reader, false);
    assert_eq!(first.json()["content"][0]["text"], "chunked ok");

    // Same connection again, Content-Length this time, with turns past the end (forever).
    let body = conversation("http-chunked", 5, false).to_string();
    write!(stream, "POST /v1/messages HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}", body.len())
        .unwrap();
    assert_eq!(read_response(&mut reader, false).json()["content"][0]["text"], "chunked ok");
    assert_eq!(mock.requests_for("http-chunked").len(), 2);
}

#[test]
fn malformed_input_gets_400_and_close() {
    let mock = MockServer::shared();
    for garbage in [
        &b"\x00\x01\x02 nonsense\r\n\r\n"[..],
        b"POST /v1/messages HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"POST /v1/messages HTTP/1.1\r\nContent-Length: -3\r\n\r\n",
        b"POST /v1/messages HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n",
    ] {
        let (mut stream, mut reader) = connect(mock);
        stream.write_all(garbage).unwrap();
        let resp = read_response(&mut reader, false);
        assert!(matches!(resp.status, 400 | 413), "{garbage:?} -> {}", resp.status);
        assert_eq!(resp.header("connection"), Some("close"));
        let mut rest = Vec::new();
        assert_eq!(reader.read_to_end(&mut rest).unwrap(), 0, "connection closed");
    }
    // Truncated request, then the client goes away: nothing to answer, server keeps serving.
    let (mut stream, _) = connect(mock);
    stream.write_all(b"POST /v1/messages HTTP/1.1\r\nContent-Le").unwrap();
    drop(stream);
    let ok = post(mock, "/v1/messages", &conversation("http-after-garbage", 0, false));
    assert_eq!(ok.status, 200);
}

#[test]
fn delays_run_concurrently() {
    let mock = MockServer::start();
    let delay = Duration::from_millis(300);
    mock.script("slow", Script::new().text("slow reply").delay(delay));
    let started = Instant::now();
    let handles: Vec<_> = (0..3)
        .map(|_| {
            let addr = mock.addr();
            std::thread::spawn(move || {
                let mut stream = TcpStream::connect(addr).unwrap();
                let body = conversation("slow", 0, true).to_string();
                write!(
                    stream,
                    "POST /v1/messages HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                )
                .unwrap();
                read_response(&mut BufReader::new(stream), false).text()
            })
        })
        .collect();
    for h in handles {
        assert!(h.join().unwrap().contains("slow reply"));
    }
    let elapsed = started.elapsed();
    assert!(elapsed >= delay, "{elapsed:?}");
    assert!(elapsed < delay * 3, "delays overlap: {elapsed:?}");
    assert_eq!(mock.requests().len(), 3);
}

#[tokio::test]
async fn starts_inside_a_tokio_runtime_and_stops_on_drop() {
    let mock = MockServer::start();
    let addr = mock.addr();
    assert_eq!(mock.base_url(), format!("http://{addr}"));
    let resp = tokio::task::spawn_blocking(move || {
        let r = post(&mock, "/v1/messages", &conversation("none", 0, false)).status;
        drop(mock);
        r
    })
    .await
    .unwrap();
    assert_eq!(resp, 200);
    assert!(TcpStream::connect(addr).is_err(), "listener closed after drop");
}

#[test]
fn openai_responses_route_plays_the_same_scripts() {
    let mock = MockServer::shared();
    mock.script(
        "http-openai",
        Script::new()
            .tool_use("exec_command", json!({"cmd": "echo {{scenario}}"}))
            .tool_use("apply_patch", json!("*** Begin Patch\n*** End Patch\n"))
            .text("last={{last_tool_result}}")
            .error(500, "mock: forced 500"),
    );
    let user = json!({"type": "message", "role": "user",
        "content": [{"type": "input_text", "text": "SCENARIO=http-openai go"}]});
    let mut input = vec![user];
    let first =
        post(mock, "/v1/responses", &json!({"model": "gpt-x", "stream": true, "input": input}));
    assert_eq!(first.status, 200);
    assert!(first.header("content-type").unwrap().starts_with("text/event-stream"));
    let events = sse_events(&first.text());
    let done = events.last().unwrap();
    assert_eq!(done["type"], "response.completed");
    let call = &done["response"]["output"][0];
    assert_eq!(
        (call["type"].as_str(), call["name"].as_str()),
        (Some("function_call"), Some("exec_command"))
    );
    assert_eq!(
        serde_json::from_str::<Value>(call["arguments"].as_str().unwrap()).unwrap(),
        json!({"cmd": "echo http-openai"})
    );

    input.push(call.clone());
    input.push(
        json!({"type": "function_call_output", "call_id": call["call_id"], "output": "out-1"}),
    );
    let second = post(mock, "/v1/responses", &json!({"model": "gpt-x", "input": input})).json();
    let patch = &second["output"][0];
    assert_eq!(
        (patch["type"].as_str(), patch["input"].as_str()),
        (Some("custom_tool_call"), Some("*** Begin Patch\n*** End Patch\n"))
    );

    input.push(patch.clone());
    input.push(json!({"type": "custom_tool_call_output", "call_id": patch["call_id"], "output": "patched"}));
    let third = post(mock, "/v1/responses", &json!({"model": "gpt-x", "input": input})).json();
    assert_eq!(third["output"][0]["content"][0]["text"], "last=patched");

    input.push(third["output"][0].clone());
    input.push(json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "more"}]}));
    let failed = post(mock, "/v1/responses", &json!({"model": "gpt-x", "input": input}));
    assert_eq!(failed.status, 500);
    assert_eq!(failed.json()["error"]["message"], "mock: forced 500");

    let recorded = mock.requests_for("http-openai");
    assert_eq!(recorded.iter().map(|r| r.assistant_turns()).collect::<Vec<_>>(), [0, 1, 2, 3]);
    assert!(recorded.iter().all(|r| r.api == Api::OpenAiResponses));
    assert!(recorded[0].streaming && !recorded[1].streaming);
}

#[test]
fn gemini_routes_stream_scripts_and_answer_side_calls() {
    let mock = MockServer::shared();
    mock.script(
        "http-gemini",
        Script::new()
            .text_and_tool_use("calling", "run_shell_command", json!({"command": "ls"}))
            .text("last={{last_tool_result}}"),
    );
    let user = json!({"role": "user", "parts": [{"text": "SCENARIO=http-gemini go"}]});
    let path = "/v1beta/models/gemini-x:streamGenerateContent?alt=sse";
    let first = post(mock, path, &json!({"contents": [user]}));
    assert_eq!(first.status, 200);
    let chunks: Vec<Value> = first
        .text()
        .split("\r\n\r\n")
        .filter(|c| !c.is_empty())
        .map(|c| serde_json::from_str(c.strip_prefix("data: ").unwrap()).unwrap())
        .collect();
    let last = chunks.last().unwrap();
    assert_eq!(last["candidates"][0]["finishReason"], "STOP");
    let call = last["candidates"][0]["content"]["parts"][0]["functionCall"].clone();
    assert_eq!(call, json!({"name": "run_shell_command", "args": {"command": "ls"}}));

    let history = json!({"contents": [user,
        {"role": "model", "parts": [{"functionCall": call}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "run_shell_command", "response": {"output": "a.txt"}}}]}]});
    let second: String = post(mock, path, &history)
        .text()
        .split("\r\n\r\n")
        .filter(|c| !c.is_empty())
        .map(|c| serde_json::from_str::<Value>(c.strip_prefix("data: ").unwrap()).unwrap())
        .map(|c| c["candidates"][0]["content"]["parts"][0]["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(second, r#"last={"output":"a.txt"}"#);
    assert!(
        second.contains(r#"last={\"output\":\"a.txt\"}"#) || second.contains("a.txt"),
        "{second}"
    );

    let router = json!({"contents": [user], "generationConfig": {"responseMimeType": "application/json",
        "responseJsonSchema": {"type": "OBJECT", "properties": {"complexity_score": {"type": "INTEGER"}}}}});
    let side = post(mock, "/v1beta/models/gemini-lite:generateContent", &router).json();
    let text = side["candidates"][0]["content"]["parts"][0]["text"].as_str().unwrap();
    assert_eq!(serde_json::from_str::<Value>(text).unwrap(), json!({"complexity_score": 0}));
    let count =
        post(mock, "/v1beta/models/gemini-x:countTokens", &json!({"contents": [user]})).json();
    assert!(count["totalTokens"].as_u64().unwrap() > 0);
    let unknown = post(mock, "/v1beta/models/gemini-x:embedContent", &json!({}));
    assert_eq!(
        (unknown.status, unknown.json()["error"]["status"].as_str()),
        (404, Some("NOT_FOUND"))
    );

    let recorded = mock.requests_for("http-gemini");
    assert!(recorded.iter().all(|r| r.api == Api::Gemini));
    let streamed: Vec<_> = recorded.iter().filter(|r| r.streaming).collect();
    assert_eq!(streamed.iter().map(|r| r.assistant_turns()).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(streamed[0].query.as_deref(), Some("alt=sse"));
}
