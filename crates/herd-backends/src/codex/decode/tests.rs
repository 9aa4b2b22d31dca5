use herd_core::FailureReason;
use proptest::prelude::*;

use super::*;
use crate::{Exit, Verdict};

/// Every JSONL line of protocols.md §2, verbatim.
const SAMPLES: &str = include_str!("../../../tests/fixtures/codex/protocols_samples.jsonl");
/// A long real run of codex 0.169.0 against herd-testkit's mock (see the fixture's README).
const RECORDED: &str = include_str!("../../../tests/fixtures/codex/recorded_run.jsonl");

fn decode_all(input: &str) -> (Vec<AgentEvent>, CodexDecoder) {
    let mut d = CodexDecoder::default();
    let mut out = Vec::new();
    for line in input.lines() {
        d.decode(line.as_bytes(), &mut out);
    }
    (out.into_iter().map(|d| d.event).collect(), d)
}

fn results(events: &[AgentEvent]) -> Vec<&ResultInfo> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Result(r) => Some(r),
            _ => None,
        })
        .collect()
}

#[test]
fn every_verbatim_sample_decodes_to_a_typed_event() {
    for input in [SAMPLES, RECORDED] {
        let (events, _) = decode_all(input);
        assert!(events.len() >= 40);
        for e in &events {
            assert!(
                !matches!(e, AgentEvent::Unknown { .. } | AgentEvent::DecodeError { .. }),
                "{e:?}"
            );
        }
    }
}

#[test]
fn shell_run_decodes_call_result_text_and_success() {
    // protocols.md §2.1 "Shell command … success" (model `mock-model`, hence the error item).
    let run =
        SAMPLES.lines().skip_while(|l| !l.contains("01a2015f-b450")).take(7).collect::<Vec<_>>();
    let (ev, d) = decode_all(&run.join("\n"));
    assert!(
        matches!(&ev[0], AgentEvent::Init { native_session_id: Some(t), .. } if t == "01a2015f-b450-75e0-8d55-53e6fa333817")
    );
    assert_eq!(ev[1], AgentEvent::System { subtype: "error".into() });
    assert_eq!(ev[2], AgentEvent::System { subtype: "turn.started".into() });
    assert_eq!(
        ev[3],
        AgentEvent::ToolCall {
            id: "item_1".into(),
            name: "Bash".into(),
            input: json!({"cmd": "/bin/bash -lc 'echo hello-from-bash'", "command": "echo hello-from-bash"}),
            cli_tool: Some("command_execution".into()),
        }
    );
    assert_eq!(
        ev[4],
        AgentEvent::ToolResult {
            tool_use_id: "item_1".into(),
            content: "hello-from-bash\n".into(),
            is_error: false
        }
    );
    assert!(
        matches!(&ev[5], AgentEvent::Text { text } if text.starts_with("MOCK DONE scenario=bash"))
    );
    let r = results(&ev)[0];
    assert_eq!((r.subtype.clone(), r.is_error), (ResultKind::Success, false));
    assert!(r.text.as_deref().unwrap().starts_with("MOCK DONE scenario=bash"));
    assert_eq!(r.native_session_id.as_deref(), Some("01a2015f-b450-75e0-8d55-53e6fa333817"));
    assert_eq!(r.usage, Usage { input_tokens: 24, output_tokens: 14, ..Usage::default() });
    assert!(r.errors.is_empty(), "warnings stay out of a success: {:?}", r.errors);
    // One response with the call, one with the answer.
    assert_eq!((d.turns(), r.num_turns), (2, Some(2)));
    assert_eq!(crate::codex::verdict(Some(r), Exit::Code(0)), Verdict::Completed);
}

#[test]
fn failed_command_patch_and_mcp_results_are_errors() {
    let (ev, _) = decode_all(
        r#"{"type":"item.completed","item":{"id":"item_0","type":"command_execution","command":"/bin/bash -lc 'ls /nonexistent-path-xyz'","aggregated_output":"ls: cannot access","exit_code":2,"status":"failed"}}
{"type":"item.completed","item":{"id":"item_1","type":"mcp_tool_call","server":"mockmcp","tool":"echo","arguments":{"text":"hi mcp"},"result":null,"error":{"message":"MCP tool call requires approval, but approval policy is never"},"status":"failed"}}
{"type":"item.started","item":{"id":"item_2","type":"file_change","changes":[{"path":"/r/hello.txt","kind":"add"}],"status":"in_progress"}}
{"type":"item.completed","item":{"id":"item_2","type":"file_change","changes":[{"path":"/r/hello.txt","kind":"add"}],"status":"failed"}}"#,
    );
    // Completed without started: the call is announced first.
    assert!(
        matches!(&ev[0], AgentEvent::ToolCall { name, input, .. } if name == "Bash" && input["command"] == "ls /nonexistent-path-xyz")
    );
    assert!(matches!(&ev[1], AgentEvent::ToolResult { is_error: true, .. }));
    assert!(
        matches!(&ev[2], AgentEvent::ToolCall { name, input, .. } if name == "mcp__mockmcp__echo" && input["text"] == "hi mcp")
    );
    assert!(
        matches!(&ev[3], AgentEvent::ToolResult { is_error: true, content, .. } if content.contains("approval policy is never"))
    );
    assert!(
        matches!(&ev[4], AgentEvent::ToolCall { name, input, .. } if name == "Edit" && input["file_path"] == "/r/hello.txt")
    );
    assert_eq!(
        ev[5],
        AgentEvent::ToolResult {
            tool_use_id: "item_2".into(),
            content: "add /r/hello.txt".into(),
            is_error: true
        }
    );
    assert_eq!(ev.len(), 6);
}

#[test]
fn mcp_success_and_reasoning() {
    let mcp = SAMPLES.lines().filter(|l| l.contains("ECHO: hi mcp")).collect::<Vec<_>>().join("\n");
    let (ev, _) = decode_all(&mcp);
    assert!(matches!(&ev[0], AgentEvent::ToolCall { name, .. } if name == "mcp__mockmcp__echo"));
    assert!(
        matches!(&ev[1], AgentEvent::ToolResult { content, is_error: false, .. } if content == "ECHO: hi mcp")
    );
    let think = SAMPLES.lines().find(|l| l.contains("\"type\":\"reasoning\"")).unwrap();
    let (ev, d) = decode_all(think);
    assert_eq!(ev[0], AgentEvent::Thinking { text: "Mock reasoning: I should run echo.".into() });
    assert_eq!(d.turns(), 1);
}

#[test]
fn api_errors_fail_with_their_status() {
    // 400 (protocols.md §2.4), then 401 and 429 as captured from codex 0.169.0 against the mock.
    let cases = [
        (
            r#"{"type":"turn.failed","error":{"message":"{\"error\": {\"type\": \"invalid_request_error\", \"message\": \"mock: forced 400\", \"code\": \"invalid_request_error\"}}"}}"#,
            None,
        ),
        (
            r#"{"type":"turn.failed","error":{"message":"unexpected status 401 Unauthorized: mock: forced 401, url: http://127.0.0.1:34613/v1/responses, request id: req_mock_0"}}"#,
            Some(401),
        ),
        (
            r#"{"type":"turn.failed","error":{"message":"exceeded retry limit, last status: 429 Too Many Requests, request id: req_mock_1"}}"#,
            Some(429),
        ),
        (
            r#"{"type":"turn.failed","error":{"message":"{\"error\":{\"code\":503,\"message\":\"x\"}}"}}"#,
            Some(503),
        ),
    ];
    for (line, status) in cases {
        let (ev, _) = decode_all(line);
        let r = results(&ev)[0];
        assert!(r.is_error && r.subtype == ResultKind::ErrorDuringExecution);
        assert_eq!(r.api_error_status, status, "{line}");
        let Verdict::Failed(FailureReason::ApiError { status: s, message }) =
            crate::codex::verdict(Some(r), Exit::Code(1))
        else {
            panic!()
        };
        assert_eq!(s, status);
        assert!(!message.is_empty());
    }
}

#[test]
fn retries_then_failure() {
    let run =
        SAMPLES.lines().skip_while(|l| !l.contains("01a20161-7225")).take(9).collect::<Vec<_>>();
    let (ev, _) = decode_all(&run.join("\n"));
    let retries: Vec<_> = ev.iter().filter(|e| matches!(e, AgentEvent::ApiRetry { .. })).collect();
    assert_eq!(retries.len(), 5);
    assert!(matches!(
        retries[4],
        AgentEvent::ApiRetry { attempt: Some(5), max_retries: Some(5), .. }
    ));
    let r = results(&ev)[0];
    assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
    assert!(r.errors[0].contains("high demand"));
    assert_eq!(r.api_error_status, None);
}

#[test]
fn turns_count_responses_not_items() {
    // Text + call in one response, parallel calls in the next, then the answer: 3 responses.
    let lines = [
        r#"{"type":"turn.started"}"#,
        r#"{"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":"Calling."}}"#,
        r#"{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"a","status":"in_progress"}}"#,
        r#"{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"a","exit_code":0,"status":"completed"}}"#,
        r#"{"type":"item.started","item":{"id":"item_2","type":"command_execution","command":"b","status":"in_progress"}}"#,
        r#"{"type":"item.started","item":{"id":"item_3","type":"command_execution","command":"c","status":"in_progress"}}"#,
        r#"{"type":"item.updated","item":{"id":"item_3","type":"command_execution","command":"c","status":"in_progress"}}"#,
        r#"{"type":"item.completed","item":{"id":"item_2","type":"command_execution","command":"b","exit_code":0,"status":"completed"}}"#,
        r#"{"type":"item.completed","item":{"id":"item_3","type":"command_execution","command":"c","exit_code":0,"status":"completed"}}"#,
        r#"{"type":"item.completed","item":{"id":"item_4","type":"agent_message","text":"done"}}"#,
        r#"{"type":"turn.completed","usage":{"input_tokens":100,"cached_input_tokens":40,"cache_write_input_tokens":5,"output_tokens":7,"reasoning_output_tokens":3}}"#,
    ];
    let (ev, d) = decode_all(&lines.join("\n"));
    assert_eq!(d.turns(), 3);
    assert_eq!(ev.iter().filter(|e| matches!(e, AgentEvent::ToolCall { .. })).count(), 3);
    assert!(ev.contains(&AgentEvent::System { subtype: "item.updated".into() }));
    let r = results(&ev)[0];
    assert_eq!(r.text.as_deref(), Some("done"));
    assert_eq!(
        r.usage,
        Usage {
            input_tokens: 60,
            output_tokens: 7,
            cache_creation_input_tokens: 5,
            cache_read_input_tokens: 40
        }
    );
}

#[test]
fn recorded_run_adds_up() {
    let (ev, d) = decode_all(RECORDED);
    let calls = ev.iter().filter(|e| matches!(e, AgentEvent::ToolCall { .. })).count();
    let outputs =
        ev.iter().filter(|e| matches!(e, AgentEvent::ToolResult { is_error: false, .. })).count();
    assert!(calls >= 50 && calls == outputs, "{calls} calls, {outputs} results");
    let r = results(&ev);
    assert_eq!(r.len(), 1);
    assert!(!r[0].is_error);
    // Every call is its own response, plus the final answer.
    assert_eq!(d.turns() as usize, calls + 1);
}

#[test]
fn garbage_and_unknown_shapes_are_kept() {
    let (ev, _) = decode_all(
        "not json\n{\"type\":\"brand.new\",\"x\":1}\n[1,2]\n{\"type\":\"item.completed\"}\n\n{\"type\":\"item.completed\",\"item\":{\"id\":\"i\",\"type\":\"collab_tool_call\"}}",
    );
    assert!(matches!(ev[0], AgentEvent::DecodeError { .. }));
    assert_eq!(ev[1], AgentEvent::Unknown { raw: "{\"type\":\"brand.new\",\"x\":1}".into() });
    assert!(matches!(ev[2], AgentEvent::Unknown { .. }));
    assert!(matches!(ev[3], AgentEvent::Unknown { .. }));
    assert!(matches!(ev[4], AgentEvent::Unknown { .. }));
    assert_eq!(ev.len(), 5);
}

proptest! {
    #[test]
    fn never_panics_on_bytes(data in proptest::collection::vec(any::<u8>(), 0..400)) {
        let mut d = CodexDecoder::default();
        let mut out = Vec::new();
        for line in data.split(|&b| b == b'\n') {
            d.decode(line, &mut out);
        }
        let _ = (d.turns(), d.usage());
    }

    #[test]
    fn never_panics_on_mutated_samples(idx in 0usize..41, cut in 0usize..400, byte in any::<u8>()) {
        let line = SAMPLES.lines().nth(idx % SAMPLES.lines().count()).unwrap().as_bytes();
        let mut v = line.to_vec();
        let at = cut % (v.len() + 1);
        v.insert(at, byte);
        let mut d = CodexDecoder::default();
        let mut out = Vec::new();
        d.decode(&v, &mut out);
        d.decode(&line[..at], &mut out);
        prop_assert!(!out.is_empty());
    }

    #[test]
    fn any_json_object_decodes_to_events(ty in "[a-z.]{0,16}", k in "[a-z_]{1,10}", n in any::<i64>()) {
        let line = json!({"type": ty, k: n, "item": {"id": n, "type": ty}}).to_string();
        let mut d = CodexDecoder::default();
        let mut out = Vec::new();
        d.decode(line.as_bytes(), &mut out);
        prop_assert!(!out.is_empty());
    }
}
