use herd_core::FailureReason;
use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::{Exit, Verdict};

/// Every stream-json line of protocols.md §3, verbatim.
const SAMPLES: &str = include_str!("../../../tests/fixtures/gemini/protocols_samples.jsonl");
/// A long real yolo run of gemini 0.61.0 against herd-testkit's mock (120 shell calls).
const RECORDED: &str = include_str!("../../../tests/fixtures/gemini/recorded_run.jsonl");

fn decode_all(input: &str) -> (Vec<AgentEvent>, GeminiDecoder) {
    let mut d = GeminiDecoder::default();
    let mut out = Vec::new();
    for line in input.lines() {
        d.decode(line.as_bytes(), &mut out);
    }
    (out.into_iter().map(|d| d.event).collect(), d)
}

fn result(events: &[AgentEvent]) -> &ResultInfo {
    let r: Vec<&ResultInfo> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Result(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(r.len(), 1, "{events:#?}");
    r[0]
}

/// The lines of the run whose `init` has `session`.
fn run_of(session: &str) -> String {
    let mut lines = SAMPLES.lines().skip_while(|l| !l.contains(session));
    let mut out = vec![lines.next().unwrap()];
    out.extend(lines.take_while(|l| !l.starts_with(r#"{"type":"init""#)));
    out.join("\n")
}

#[test]
fn every_verbatim_sample_decodes_to_a_typed_event() {
    for input in [SAMPLES, RECORDED] {
        let (events, _) = decode_all(input);
        assert!(events.len() >= 20);
        for e in &events {
            assert!(
                !matches!(e, AgentEvent::Unknown { .. } | AgentEvent::DecodeError { .. }),
                "{e:?}"
            );
        }
    }
}

#[test]
fn shell_run_decodes_to_bash_call_result_and_answer() {
    let (ev, d) = decode_all(&run_of("76392c84-fe63-4377-94a0-9ead84f4dd4c"));
    assert!(matches!(&ev[0], AgentEvent::Init { native_session_id: Some(s), model: Some(m), .. }
        if s == "76392c84-fe63-4377-94a0-9ead84f4dd4c" && m == "auto"));
    assert_eq!(ev[1], AgentEvent::UserText { text: "SCENARIO=bash first".into() });
    assert_eq!(ev[2], AgentEvent::Text { text: "Calling run_shell_command.".into() });
    assert_eq!(
        ev[3],
        AgentEvent::ToolCall {
            id: "run_shell_command__run_shell_command_1795320098501_0".into(),
            name: "Bash".into(),
            input: json!({"command": "echo hello-from-bash", "description": "Print greeting"}),
            cli_tool: Some("run_shell_command".into()),
        }
    );
    assert_eq!(
        ev[4],
        AgentEvent::ToolResult {
            tool_use_id: "run_shell_command__run_shell_command_1795320098501_0".into(),
            content: "hello-from-bash".into(),
            is_error: false,
        }
    );
    let r = result(&ev);
    assert_eq!((r.subtype.clone(), r.is_error), (ResultKind::Success, false));
    // The answer is the text after the last tool call, deltas joined.
    let text = r.text.as_deref().unwrap();
    assert!(text.starts_with("MOCK DONE scenario=bash steps=1"), "{text}");
    assert!(!text.contains("Calling run_shell_command"));
    assert_eq!(r.usage, Usage { input_tokens: 36, output_tokens: 15, ..Usage::default() });
    assert_eq!((r.duration_ms, d.turns(), r.num_turns), (Some(2786), 2, Some(2)));
    assert_eq!(crate::gemini::verdict(Some(r), Exit::Code(0)), Verdict::Completed);
}

#[test]
fn write_file_maps_to_write() {
    let (ev, _) = decode_all(&run_of("aa1a53ce-034a-499f-bb94-821aa3a533e9"));
    assert!(ev.iter().any(|e| matches!(e, AgentEvent::ToolCall { name, input, .. }
        if name == "Write" && input["file_path"] == "/repo/hello.txt")));
    // A successful write_file result has no `output`.
    assert!(ev.iter().any(|e| matches!(e, AgentEvent::ToolResult { is_error: false, content, .. } if content.is_empty())));
}

#[test]
fn refused_tools_are_error_results() {
    let lines: Vec<&str> = SAMPLES
        .lines()
        .filter(|l| l.contains("\"status\":\"error\"") && l.contains("tool_result"))
        .collect();
    assert_eq!(lines.len(), 2);
    let (ev, _) = decode_all(&lines.join("\n"));
    assert!(
        matches!(&ev[0], AgentEvent::ToolResult { is_error: true, content, .. } if content.starts_with("Tool \"run_shell_command\" not found"))
    );
    assert!(
        matches!(&ev[1], AgentEvent::ToolResult { is_error: true, content, .. } if content == "Tool execution denied by policy.")
    );
}

#[test]
fn turn_limit_and_api_errors() {
    let limit = SAMPLES.lines().find(|l| l.contains("FatalTurnLimitedError")).unwrap();
    let (ev, _) = decode_all(limit);
    let r = result(&ev);
    assert_eq!((r.subtype.clone(), r.is_error), (ResultKind::ErrorMaxTurns, true));
    assert_eq!(r.terminal_reason.as_deref(), Some("FatalTurnLimitedError"));
    assert_eq!(
        crate::gemini::verdict(Some(r), Exit::Code(53)),
        Verdict::Failed(FailureReason::MaxTurns)
    );

    let api = SAMPLES.lines().find(|l| l.contains("mock: forced 400")).unwrap();
    let (ev, _) = decode_all(api);
    let r = result(&ev);
    assert_eq!(r.api_error_status, Some(400));
    assert!(r.errors[0].contains("mock: forced 400"));
    let Verdict::Failed(FailureReason::ApiError { status: Some(400), message }) =
        crate::gemini::verdict(Some(r), Exit::Code(144))
    else {
        panic!()
    };
    assert!(message.contains("INVALID_ARGUMENT"));
    assert_eq!(
        crate::gemini::verdict(None, Exit::Code(0)),
        Verdict::Failed(FailureReason::NoResult { exit_code: Some(0) })
    );
}

#[test]
fn warnings_are_system_events_and_kept_on_failure() {
    let (ev, _) = decode_all(
        r#"{"type":"error","timestamp":"t","severity":"warning","message":"Loop detected, stopping execution"}
{"type":"result","timestamp":"t","status":"error","error":{"type":"unknown","message":"boom"},"stats":{}}"#,
    );
    assert_eq!(ev[0], AgentEvent::System { subtype: "warning".into() });
    let r = result(&ev);
    assert_eq!(r.errors, ["Loop detected, stopping execution", "boom"]);
    assert_eq!(r.subtype, ResultKind::ErrorDuringExecution);
    assert_eq!(
        crate::gemini::verdict(Some(r), Exit::Code(1)),
        Verdict::Failed(FailureReason::AgentError { message: "boom".into() })
    );
}

#[test]
fn recorded_run_adds_up() {
    let (ev, d) = decode_all(RECORDED);
    let calls = ev
        .iter()
        .filter(|e| matches!(e, AgentEvent::ToolCall { name, .. } if name == "Bash"))
        .count();
    let ok =
        ev.iter().filter(|e| matches!(e, AgentEvent::ToolResult { is_error: false, .. })).count();
    assert_eq!((calls, ok), (120, 120));
    assert_eq!(d.turns(), 121);
    let r = result(&ev);
    assert!(r.text.as_deref().unwrap().starts_with("All 120 steps done."));
    assert!(r.usage.input_tokens > 0 && r.usage.output_tokens > 0);
}

#[test]
fn garbage_and_unknown_shapes_are_kept() {
    let (ev, _) = decode_all("{oops\n{\"type\":\"thought\",\"content\":\"x\"}\n\"str\"\n");
    assert!(matches!(ev[0], AgentEvent::DecodeError { .. }));
    assert!(matches!(ev[1], AgentEvent::Unknown { .. }));
    assert!(matches!(ev[2], AgentEvent::Unknown { .. }));
}

proptest! {
    #[test]
    fn never_panics_on_bytes(data in proptest::collection::vec(any::<u8>(), 0..400)) {
        let mut d = GeminiDecoder::default();
        let mut out = Vec::new();
        for line in data.split(|&b| b == b'\n') {
            d.decode(line, &mut out);
        }
        let _ = (d.turns(), d.usage());
    }

    #[test]
    fn never_panics_on_mutated_samples(idx in 0usize..64, cut in 0usize..400, byte in any::<u8>()) {
        let line = SAMPLES.lines().nth(idx % SAMPLES.lines().count()).unwrap().as_bytes();
        let mut v = line.to_vec();
        let at = cut % (v.len() + 1);
        v.insert(at, byte);
        let mut d = GeminiDecoder::default();
        let mut out = Vec::new();
        d.decode(&v, &mut out);
        d.decode(&line[..at], &mut out);
        prop_assert!(!out.is_empty());
    }
}
