use proptest::prelude::*;

use super::*;
use crate::acp::{answer_permission, permission_request};

/// Real sessions recorded by herd-testkit's `acp_real.rs` (`> ` written by this client, `< `
/// read from the agent): one allowed shell call each.
const GEMINI: &str = include_str!("../../../tests/fixtures/acp/gemini_allow.txt");
const CODEX_ACP: &str = include_str!("../../../tests/fixtures/acp/codex_acp_allow.txt");
const CLAUDE_CODE_ACP: &str = include_str!("../../../tests/fixtures/acp/claude_code_acp_allow.txt");
/// A long gemini `--acp` run: 80 shell calls, each asked and allowed.
const GEMINI_LONG: &str = include_str!("../../../tests/fixtures/acp/gemini_long_run.txt");
/// protocols.md §3.3 and §2.5, verbatim (some lines there are shortened, so not all JSON).
const SAMPLES: &str = include_str!("../../../tests/fixtures/acp/protocols_samples.txt");

fn json_of(line: &[u8]) -> Value {
    serde_json::from_slice(line)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(line)))
}

fn lines_of(bytes: &[u8]) -> Vec<Value> {
    bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()).map(json_of).collect()
}

/// The config the transcript's `session/new` and `session/prompt` show.
fn config_of(transcript: &str) -> AcpConfig {
    let sent: Vec<Value> = transcript
        .lines()
        .filter_map(|l| l.strip_prefix("> "))
        .map(|l| json_of(l.as_bytes()))
        .collect();
    let new = sent.iter().find(|v| v["method"] == "session/new").unwrap();
    let prompt = sent.iter().find(|v| v["method"] == "session/prompt").unwrap();
    AcpConfig::new(
        new["params"]["cwd"].as_str().unwrap(),
        prompt["params"]["prompt"][0]["text"].as_str().unwrap(),
    )
}

struct Replay {
    events: Vec<AgentEvent>,
    requests: Vec<PermissionRequest>,
    result: Option<ResultInfo>,
    client: AcpClient,
}

/// Feeds a transcript's `< ` lines to a fresh client, allowing every permission request, and
/// checks that what the client writes is exactly the transcript's `> ` lines.
fn replay(transcript: &str) -> Replay {
    let mut client = AcpClient::new(config_of(transcript));
    let mut expected =
        transcript.lines().filter_map(|l| l.strip_prefix("> ")).map(|l| json_of(l.as_bytes()));
    let mut check = |bytes: &[u8]| {
        for got in lines_of(bytes) {
            assert_eq!(Some(got), expected.next());
        }
    };
    check(&client.start());
    let (mut events, mut requests, mut result) = (Vec::new(), Vec::new(), None);
    for line in transcript.lines().filter_map(|l| l.strip_prefix("< ")) {
        let step = client.feed(line.as_bytes());
        let mut written = step.stdin;
        for d in &step.events {
            if let Some(req) = permission_request(&d.event) {
                let allow = PermissionAnswer::Allow { input: req.input.clone() };
                assert_eq!(
                    Some(answer_permission(&req, &allow)),
                    client.answer(&req.request_id, &allow)
                );
                written.extend(answer_permission(&req, &allow));
                requests.push(req);
            }
        }
        check(&written);
        if step.result.is_some() {
            result = step.result;
        }
        events.extend(step.events.into_iter().map(|d| d.event));
    }
    assert_eq!(expected.next(), None, "the client wrote less than the transcript");
    Replay { events, requests, result, client }
}

fn calls(events: &[AgentEvent]) -> Vec<(&str, &Value)> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolCall { name, input, .. } => Some((name.as_str(), input)),
            _ => None,
        })
        .collect()
}

#[test]
fn replays_a_gemini_session_byte_for_byte() {
    let r = replay(GEMINI);
    let result = r.result.unwrap();
    assert_eq!((result.subtype.clone(), result.is_error), (ResultKind::Success, false));
    assert!(result.text.as_deref().unwrap().starts_with("MOCK DONE last="));
    assert_eq!(result.native_session_id.as_deref(), r.client.session_id());
    assert_eq!(result.usage.input_tokens, 24);
    assert_eq!((result.num_turns, result.terminal_reason.as_deref()), (Some(2), Some("end_turn")));
    assert_eq!(r.requests.len(), 1);
    let req = &r.requests[0];
    assert_eq!((req.tool.claude.as_str(), req.tool.native.as_str()), ("Bash", "run_shell_command"));
    assert!(req.input["command"].as_str().unwrap().starts_with("touch "));
    assert_eq!(req.request_id, "0");
    assert_eq!(req.allow_option().unwrap().id, "proceed_once");
    // gemini sends no tool_call update: the request announces the call, the update ends it.
    let c = calls(&r.events);
    assert_eq!(c.len(), 1);
    assert!(r.events.iter().any(|e| matches!(e, AgentEvent::ToolResult { is_error: false, .. })));
    assert!(matches!(
        r.events.iter().find(|e| matches!(e, AgentEvent::Init { .. })),
        Some(AgentEvent::Init { native_session_id: Some(_), .. })
    ));
    assert!(r.client.is_done());
}

#[test]
fn replays_a_codex_acp_session_byte_for_byte() {
    let r = replay(CODEX_ACP);
    assert_eq!(r.result.unwrap().subtype, ResultKind::Success);
    let req = &r.requests[0];
    // A string id (a UUID), echoed as a string.
    assert!(req.request_id.starts_with('"'));
    assert_eq!(req.tool.claude, "Bash");
    assert!(req.input["command"].as_str().unwrap().starts_with("touch "), "{}", req.input);
    assert_eq!(req.reject_option().unwrap().id, "abort");
    let c = calls(&r.events);
    assert_eq!(c[0].0, "Bash");
}

#[test]
fn replays_a_claude_code_acp_session_byte_for_byte() {
    let r = replay(CLAUDE_CODE_ACP);
    assert_eq!(r.result.unwrap().subtype, ResultKind::Success);
    // The request names no tool; the earlier tool_call update did (`_meta.claudeCode`).
    let req = &r.requests[0];
    assert_eq!((req.tool.claude.as_str(), req.tool.native.as_str()), ("Bash", "Bash"));
    assert!(req.tool_use_id.as_deref().is_some_and(|t| t.starts_with("toolu_mock_")));
    // Announced without input, then again with it.
    let c = calls(&r.events);
    assert_eq!(c.len(), 2);
    assert!(c[1].1["command"].as_str().unwrap().starts_with("touch "));
}

#[test]
fn replays_a_long_gemini_run() {
    let r = replay(GEMINI_LONG);
    let result = r.result.unwrap();
    assert_eq!(result.subtype, ResultKind::Success);
    assert_eq!(result.text.as_deref(), Some("All 80 steps done."));
    assert_eq!((r.requests.len(), calls(&r.events).len()), (80, 80));
    assert_eq!(r.client.turns(), 81);
}

#[test]
fn protocol_samples_never_confuse_the_client() {
    let mut client = AcpClient::new(AcpConfig::new("/repo", "SCENARIO=touch go"));
    client.start();
    let mut requests = 0;
    for line in SAMPLES.lines().filter_map(|l| l.strip_prefix("< ")) {
        for d in client.feed(line.as_bytes()).events {
            requests += usize::from(permission_request(&d.event).is_some());
        }
    }
    assert_eq!(requests, 2);
}

fn feed(client: &mut AcpClient, v: Value) -> Step {
    client.feed(v.to_string().as_bytes())
}

fn started(config: AcpConfig) -> AcpClient {
    let mut c = AcpClient::new(config);
    c.start();
    c
}

#[test]
fn resume_loads_the_session_and_skips_its_replay() {
    let mut c = started(AcpConfig { resume: Some("s-1".into()), ..AcpConfig::new("/r", "again") });
    let s = feed(
        &mut c,
        json!({"jsonrpc": "2.0", "id": 1, "result": {"agentCapabilities": {"loadSession": true}}}),
    );
    let load = &lines_of(&s.stdin)[0];
    assert_eq!(load["method"], "session/load");
    assert_eq!(load["params"], json!({"cwd": "/r", "mcpServers": [], "sessionId": "s-1"}));
    let replayed = feed(
        &mut c,
        json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s-1", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "old"}}}}),
    );
    assert_eq!(
        replayed.events[0].event,
        AgentEvent::System { subtype: "session/update (replay)".into() }
    );
    let s = feed(&mut c, json!({"jsonrpc": "2.0", "id": 2, "result": null}));
    assert!(
        matches!(&s.events[0].event, AgentEvent::Init { native_session_id: Some(id), .. } if id == "s-1")
    );
    assert_eq!(lines_of(&s.stdin)[0]["method"], "session/prompt");
    assert_eq!(c.turns(), 0);

    let mut c = started(AcpConfig { resume: Some("s-1".into()), ..AcpConfig::new("/r", "again") });
    let s = feed(&mut c, json!({"jsonrpc": "2.0", "id": 1, "result": {"agentCapabilities": {}}}));
    let r = s.result.unwrap();
    assert!(r.is_error && r.errors[0].contains("cannot load sessions"));
    assert!(s.stdin.is_empty());
}

#[test]
fn history_streamed_after_the_loads_answer_is_still_replay() {
    // gemini 0.61.0 answers session/load, then streams the history (measured).
    let mut c = started(AcpConfig {
        resume: Some("s-1".into()),
        mode: Some("default".into()),
        ..AcpConfig::new("/r", "again")
    });
    feed(
        &mut c,
        json!({"jsonrpc": "2.0", "id": 1, "result": {"agentCapabilities": {"loadSession": true}}}),
    );
    feed(&mut c, json!({"jsonrpc": "2.0", "id": 2, "result": {}}));
    let chunk = |text: &str| json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s-1", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}});
    let old = feed(&mut c, chunk("first-answer"));
    assert_eq!(
        old.events[0].event,
        AgentEvent::System { subtype: "session/update (replay)".into() }
    );
    let s = feed(&mut c, json!({"jsonrpc": "2.0", "id": 3, "result": {}}));
    assert_eq!(lines_of(&s.stdin)[0]["method"], "session/prompt");
    feed(&mut c, chunk("second-answer"));
    let end =
        feed(&mut c, json!({"jsonrpc": "2.0", "id": 4, "result": {"stopReason": "end_turn"}}));
    assert_eq!(end.result.unwrap().text.as_deref(), Some("second-answer"));
}

#[test]
fn mode_is_set_before_the_prompt() {
    let mut c = started(AcpConfig { mode: Some("default".into()), ..AcpConfig::new("/r", "p") });
    feed(&mut c, json!({"jsonrpc": "2.0", "id": 1, "result": {}}));
    let s = feed(
        &mut c,
        json!({"jsonrpc": "2.0", "id": 2, "result": {"sessionId": "S", "models": {"currentModelId": "m1"}}}),
    );
    assert!(matches!(&s.events[0].event, AgentEvent::Init { model: Some(m), .. } if m == "m1"));
    let set = &lines_of(&s.stdin)[0];
    assert_eq!(
        (set["method"].as_str(), set["params"]["modeId"].as_str()),
        (Some("session/set_mode"), Some("default"))
    );
    let s = feed(&mut c, json!({"jsonrpc": "2.0", "id": 3, "result": {}}));
    let prompt = &lines_of(&s.stdin)[0];
    assert_eq!(
        prompt["params"],
        json!({"sessionId": "S", "prompt": [{"type": "text", "text": "p"}]})
    );
    assert_eq!(prompt["id"], 4);
}

/// A client whose prompt (id 3) is running in session `S`.
fn prompting() -> AcpClient {
    let mut c = started(AcpConfig::new("/r", "p"));
    feed(&mut c, json!({"jsonrpc": "2.0", "id": 1, "result": {}}));
    feed(&mut c, json!({"jsonrpc": "2.0", "id": 2, "result": {"sessionId": "S"}}));
    c
}

#[test]
fn stop_reasons_and_errors_end_the_prompt() {
    for (stop, kind, is_error) in [
        ("end_turn", ResultKind::Success, false),
        ("max_turn_requests", ResultKind::ErrorMaxTurns, true),
        ("cancelled", ResultKind::ErrorDuringExecution, true),
        ("refusal", ResultKind::ErrorDuringExecution, true),
    ] {
        let mut c = prompting();
        let r = feed(&mut c, json!({"jsonrpc": "2.0", "id": 3, "result": {"stopReason": stop, "usage": {"inputTokens": 10, "outputTokens": 2, "cachedReadTokens": 4}}})).result.unwrap();
        assert_eq!(
            (r.subtype, r.is_error, r.terminal_reason.as_deref()),
            (kind, is_error, Some(stop))
        );
        assert_eq!(
            r.usage,
            Usage {
                input_tokens: 6,
                output_tokens: 2,
                cache_read_input_tokens: 4,
                ..Usage::default()
            }
        );
        // Once only.
        assert!(
            feed(&mut c, json!({"jsonrpc": "2.0", "id": 3, "result": {"stopReason": stop}}))
                .result
                .is_none()
        );
    }
    let mut c = prompting();
    let r = feed(&mut c, json!({"jsonrpc": "2.0", "id": 3, "error": {"code": 500, "message": "{\"error\":{\"code\":500,\"message\":\"x\"}}"}})).result.unwrap();
    assert_eq!((r.is_error, r.api_error_status), (true, Some(500)));
    let mut c = started(AcpConfig::new("/r", "p"));
    let r = feed(&mut c, json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "Internal error", "data": "no auth"}})).result.unwrap();
    assert_eq!(r.errors, ["initialize failed: Internal error (no auth)"]);
}

fn permission(id: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": PERMISSION_METHOD, "params": {"sessionId": "S",
        "toolCall": {"toolCallId": "tc1", "kind": "edit", "status": "pending", "title": "Edit a.txt",
                     "locations": [{"path": "/r/a.txt"}]},
        "options": [{"optionId": "yes", "kind": "allow_once", "name": "Yes"},
                    {"optionId": "no", "kind": "reject_once", "name": "No"}]}})
}

#[test]
fn permission_answers_pick_the_offered_options() {
    let mut c = prompting();
    let s = feed(&mut c, permission(json!(7)));
    assert!(
        matches!(&s.events[0].event, AgentEvent::ToolCall { name, input, .. } if name == "Edit" && input["file_path"] == "/r/a.txt")
    );
    let req = permission_request(&s.events[1].event).unwrap();
    assert_eq!((req.request_id.as_str(), req.title.as_deref()), ("7", Some("Edit a.txt")));
    assert_eq!(c.pending_permissions().count(), 1);
    let deny = PermissionAnswer::Deny { message: "no".into() };
    let answer = lines_of(&c.answer("7", &deny).unwrap())[0].clone();
    assert_eq!(
        answer,
        json!({"jsonrpc": "2.0", "id": 7, "result": {"outcome": {"outcome": "selected", "optionId": "no"}}})
    );
    assert!(c.answer("7", &deny).is_none(), "answered once");
    // No fitting option: cancelled.
    let mut req = req;
    req.options.clear();
    let allow = PermissionAnswer::Allow { input: json!({}) };
    assert_eq!(
        lines_of(&answer_permission(&req, &allow))[0]["result"]["outcome"],
        json!({"outcome": "cancelled"})
    );
}

#[test]
fn cancel_answers_pending_requests_then_notifies() {
    let mut c = AcpClient::new(AcpConfig::new("/r", "p"));
    assert!(c.cancel().is_empty(), "no session yet: nothing to cancel");
    let mut c = prompting();
    feed(&mut c, permission(json!("abc")));
    let out = lines_of(&c.cancel());
    assert_eq!(
        out[0],
        json!({"jsonrpc": "2.0", "id": "abc", "result": {"outcome": {"outcome": "cancelled"}}})
    );
    assert_eq!(
        out[1],
        json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "S"}})
    );
    assert!(c.cancel().is_empty(), "once");
    // A request arriving after the cancel is answered cancelled at once.
    let s = feed(&mut c, permission(json!(9)));
    assert_eq!(lines_of(&s.stdin)[0]["result"]["outcome"]["outcome"], "cancelled");
    let r = feed(&mut c, json!({"jsonrpc": "2.0", "id": 3, "result": {"stopReason": "cancelled"}}))
        .result
        .unwrap();
    assert_eq!(r.terminal_reason.as_deref(), Some("cancelled"));
}

#[test]
fn updates_become_events() {
    let mut c = prompting();
    let upd = |u: Value| json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "S", "update": u}});
    let kinds = |s: Step| s.events.into_iter().map(|d| d.event).collect::<Vec<_>>();
    assert_eq!(
        kinds(feed(
            &mut c,
            upd(
                json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hmm"}})
            )
        )),
        [AgentEvent::Thinking { text: "hmm".into() }]
    );
    let plan = kinds(feed(
        &mut c,
        upd(
            json!({"sessionUpdate": "plan", "entries": [{"content": "a", "status": "pending", "priority": "high"}, {"content": "b", "status": "completed"}]}),
        ),
    ));
    assert!(
        matches!(&plan[0], AgentEvent::Task { subtype, description: Some(d), .. } if subtype == "plan" && d == "[pending] a\n[completed] b")
    );
    let ev = kinds(feed(
        &mut c,
        upd(
            json!({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "ls -la", "kind": "execute", "status": "pending"}),
        ),
    ));
    assert_eq!(
        ev,
        [AgentEvent::ToolCall {
            id: "t1".into(),
            name: "Bash".into(),
            input: json!({"command": "ls -la"}),
            cli_tool: Some("execute".into()),
        }]
    );
    assert_eq!(
        kinds(feed(
            &mut c,
            upd(
                json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "in_progress"})
            )
        )),
        [AgentEvent::System { subtype: "tool_call_update".into() }]
    );
    let done = kinds(feed(
        &mut c,
        upd(
            json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "failed", "rawOutput": {"aggregated_output": "boom", "exit_code": 2}}),
        ),
    ));
    assert_eq!(
        done,
        [AgentEvent::ToolResult {
            tool_use_id: "t1".into(),
            content: "boom".into(),
            is_error: true
        }]
    );
    assert_eq!(
        kinds(feed(&mut c, upd(json!({"sessionUpdate": "usage_update", "used": 1, "size": 2})))),
        [AgentEvent::System { subtype: "usage_update".into() }]
    );
    assert!(matches!(
        kinds(feed(&mut c, upd(json!({"no": "kind"}))))[0],
        AgentEvent::Unknown { .. }
    ));
    assert!(matches!(
        kinds(feed(
            &mut c,
            upd(json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "image"}}))
        ))[0],
        AgentEvent::Unknown { .. }
    ));
    assert_eq!(c.turns(), 1);
    let m = kinds(feed(
        &mut c,
        upd(
            json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "ok"}}),
        ),
    ));
    assert_eq!(m, [AgentEvent::Text { text: "ok".into() }]);
    assert_eq!(c.turns(), 2);
}

#[test]
fn odd_lines_are_kept_and_unserved_requests_refused() {
    let mut c = prompting();
    let s = feed(
        &mut c,
        json!({"jsonrpc": "2.0", "id": 5, "method": "fs/read_text_file", "params": {}}),
    );
    assert_eq!(lines_of(&s.stdin)[0]["error"]["code"], -32601);
    assert_eq!(s.events[0].event, AgentEvent::System { subtype: "fs/read_text_file".into() });
    assert!(matches!(
        feed(&mut c, json!({"jsonrpc": "2.0", "id": 99, "result": {}})).events[0].event,
        AgentEvent::Unknown { .. }
    ));
    assert!(matches!(c.feed(b"not json").events[0].event, AgentEvent::DecodeError { .. }));
    assert!(matches!(c.feed(b"[1]").events[0].event, AgentEvent::Unknown { .. }));
    assert!(c.feed(b"   ").events.is_empty());
    // The Decoder face: events out, stdin kept for take_stdin.
    let mut out = Vec::new();
    c.decode(
        json!({"jsonrpc": "2.0", "id": 6, "method": "terminal/create", "params": {}})
            .to_string()
            .as_bytes(),
        &mut out,
    );
    assert_eq!(out.len(), 1);
    assert!(!c.take_stdin().is_empty());
    assert!(c.take_stdin().is_empty());
}

proptest! {
    #[test]
    fn never_panics_on_bytes(data in proptest::collection::vec(any::<u8>(), 0..400)) {
        let mut c = AcpClient::new(AcpConfig::new("/r", "p"));
        c.start();
        for line in data.split(|&b| b == b'\n') {
            let _ = c.feed(line);
        }
        let _ = (c.cancel(), c.turns(), c.usage());
    }

    #[test]
    fn never_panics_on_mutated_sessions(idx in 0usize..64, cut in 0usize..2000, byte in any::<u8>()) {
        let lines: Vec<&str> = CLAUDE_CODE_ACP.lines().chain(CODEX_ACP.lines()).filter_map(|l| l.strip_prefix("< ")).collect();
        let mut c = prompting();
        let line = lines[idx % lines.len()].as_bytes();
        let mut v = line.to_vec();
        let at = cut % (v.len() + 1);
        v.insert(at, byte);
        let _ = c.feed(&v);
        let _ = c.feed(&line[..at]);
        for l in &lines {
            let _ = c.feed(l.as_bytes());
        }
    }
}
