use super::*;
use crate::{Backend, Exit, Verdict};
use herd_core::FailureReason;
use proptest::prelude::*;

const SAMPLES: &str = include_str!("../../../tests/fixtures/claude/protocols_samples.jsonl");

fn decode_all(input: &str) -> (Vec<Decoded>, ClaudeDecoder) {
    let mut d = ClaudeDecoder::default();
    let mut out = Vec::new();
    for line in input.lines() {
        d.decode(line.as_bytes(), &mut out);
    }
    (out, d)
}

fn sample(prefix: &str) -> &'static str {
    SAMPLES.lines().find(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no sample {prefix}"))
}

fn results(events: &[Decoded]) -> Vec<&ResultInfo> {
    events
        .iter()
        .filter_map(|d| match &d.event {
            AgentEvent::Result(r) => Some(r),
            _ => None,
        })
        .collect()
}

#[test]
fn every_verbatim_sample_decodes_to_a_typed_event() {
    let (events, _) = decode_all(SAMPLES);
    assert!(events.len() >= 50);
    for d in &events {
        assert!(
            !matches!(d.event, AgentEvent::Unknown { .. } | AgentEvent::DecodeError { .. }),
            "untyped: {:?}",
            d.event
        );
    }
}

#[test]
fn init_carries_the_native_session_and_tools() {
    let (ev, _) = decode_all(sample(r#"{"type":"system","subtype":"init""#));
    let AgentEvent::Init { native_session_id, model, tools } = &ev[0].event else { panic!() };
    assert_eq!(native_session_id.as_deref(), Some("1f7440f0-796a-4f1c-8ae9-25e4bd07aad7"));
    assert_eq!(model.as_deref(), Some("claude-opus-4-8[1m]"));
    assert!(tools.contains(&"Bash".to_owned()));
}

#[test]
fn text_tool_use_and_tool_result_of_one_message_count_one_turn() {
    let lines: Vec<&str> = SAMPLES
        .lines()
        .filter(|l| l.contains("msg_mock_0_60998") && l.starts_with(r#"{"type":"assistant""#))
        .collect();
    let bash_result = sample(
        r#"{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_mock_bash_0""#,
    );
    let (ev, d) = decode_all(&format!("{}\n{bash_result}", lines.join("\n")));
    assert_eq!(d.turns(), 1);
    assert_eq!(ev[0].event, AgentEvent::Text { text: "Calling Bash.".into() });
    let AgentEvent::ToolCall { id, name, input, .. } = &ev[1].event else { panic!("{:?}", ev[1]) };
    assert_eq!((id.as_str(), name.as_str()), ("toolu_mock_bash_0", "Bash"));
    assert_eq!(input["command"], "echo hello-from-bash");
    assert_eq!(
        ev[2].event,
        AgentEvent::ToolResult {
            tool_use_id: "toolu_mock_bash_0".into(),
            content: "hello-from-bash".into(),
            is_error: false
        }
    );
}

#[test]
fn success_result_captures_usage_cost_turns_and_session() {
    let (ev, _) = decode_all(sample(r#"{"type":"result","subtype":"success","is_error":false"#));
    let r = results(&ev)[0];
    assert_eq!(r.subtype, ResultKind::Success);
    assert!(!r.is_error);
    assert_eq!(r.num_turns, Some(2));
    assert_eq!(r.cost_usd, Some(0.000745));
    assert_eq!(r.usage.input_tokens, 24);
    assert_eq!(r.usage.output_tokens, 25);
    assert_eq!(r.native_session_id.as_deref(), Some("1f7440f0-796a-4f1c-8ae9-25e4bd07aad7"));
    assert!(r.text.as_deref().unwrap().starts_with("MOCK DONE scenario=write"));
    assert_eq!(crate::claude::Claude.verdict(Some(r), Exit::Code(0)), Verdict::Completed);
}

#[test]
fn permission_denials_are_kept() {
    let line = SAMPLES
        .lines()
        .find(|l| l.starts_with(r#"{"type":"result""#) && l.contains("toolu_mock_touch_0"))
        .unwrap();
    let (ev, _) = decode_all(line);
    let r = results(&ev)[0];
    assert_eq!(r.permission_denials.len(), 1);
    assert_eq!(r.permission_denials[0].tool_name, "Bash");
    assert_eq!(r.permission_denials[0].tool_input["command"], "touch /repo/touched.txt");
}

#[test]
fn max_turns_api_errors_and_interrupts_fail_with_their_reason() {
    let claude = crate::claude::Claude;
    let (ev, _) = decode_all(sample(r#"{"type":"result","subtype":"error_max_turns""#));
    assert_eq!(
        claude.verdict(Some(results(&ev)[0]), Exit::Code(1)),
        Verdict::Failed(FailureReason::MaxTurns)
    );

    let line500 = SAMPLES.lines().find(|l| l.contains(r#""api_error_status":500"#)).unwrap();
    let (ev, _) = decode_all(line500);
    let Verdict::Failed(FailureReason::ApiError { status, message }) =
        claude.verdict(Some(results(&ev)[0]), Exit::Code(1))
    else {
        panic!()
    };
    assert_eq!(status, Some(500));
    assert!(message.starts_with("API Error: 500 mock: forced 500"), "{message}");

    let aborted =
        SAMPLES.lines().find(|l| l.contains(r#""terminal_reason":"aborted_tools""#)).unwrap();
    let (ev, _) = decode_all(aborted);
    assert!(matches!(
        claude.verdict(Some(results(&ev)[0]), Exit::Code(0)),
        Verdict::Failed(FailureReason::AgentError { .. })
    ));
}

#[test]
fn exit_code_zero_without_result_is_not_success() {
    assert_eq!(
        crate::claude::Claude.verdict(None, Exit::Code(0)),
        Verdict::Failed(FailureReason::NoResult { exit_code: Some(0) })
    );
}

#[test]
fn internal_subagent_lines_keep_parent_tool_use_id() {
    let (ev, d) = decode_all(
        &SAMPLES
            .lines()
            .filter(|l| l.contains("toolu_mock_agent_0") || l.contains("aee78c7de1b291e34"))
            .collect::<Vec<_>>()
            .join("\n"),
    );
    let nested: Vec<_> = ev
        .iter()
        .filter(|e| e.parent_tool_use_id.as_deref() == Some("toolu_mock_agent_0"))
        .collect();
    assert!(
        nested
            .iter()
            .any(|e| matches!(&e.event, AgentEvent::ToolCall { name, .. } if name == "Bash"))
    );
    assert!(nested.iter().any(|e| matches!(&e.event, AgentEvent::UserText { .. })));
    assert!(ev.iter().any(|e| matches!(&e.event, AgentEvent::Task { subtype, status, .. } if subtype == "task_updated" && status.as_deref() == Some("completed"))));
    // Only the top-level assistant message counts as a turn.
    assert_eq!(d.turns(), 1);
}

#[test]
fn control_requests_are_typed() {
    let (ev, _) = decode_all(sample(r#"{"type":"control_request","request_id":"b8d0165a"#));
    let AgentEvent::ControlRequest { request_id, subtype, request } = &ev[0].event else {
        panic!()
    };
    assert_eq!(request_id, "b8d0165a-4935-4cfe-829c-f031b49b8f12");
    assert_eq!(subtype, "can_use_tool");
    assert_eq!(request["tool_name"], "Bash");
}

#[test]
fn garbage_is_reported_not_fatal() {
    let (ev, _) = decode_all(
        "not json at all\n{\"type\":\"assistant\",\"mess\n{\"type\":\"brand_new\",\"x\":1}\n[1,2]\n\n   \n",
    );
    assert!(
        matches!(&ev[0].event, AgentEvent::DecodeError { preview, .. } if preview == "not json at all")
    );
    assert!(matches!(&ev[1].event, AgentEvent::DecodeError { .. }));
    assert!(matches!(&ev[2].event, AgentEvent::Unknown { raw } if raw.contains("brand_new")));
    assert!(matches!(&ev[3].event, AgentEvent::Unknown { .. }));
    assert_eq!(ev.len(), 4, "blank lines produce nothing");
}

#[test]
fn drifted_field_types_do_not_lose_the_result() {
    let (ev, _) = decode_all(
        r#"{"type":"result","subtype":"success","is_error":false,"num_turns":"two","total_cost_usd":null,"usage":{"input_tokens":"x"},"result":"ok","new_field":{"a":1}}"#,
    );
    let r = results(&ev)[0];
    assert_eq!(r.text.as_deref(), Some("ok"));
    assert_eq!(r.num_turns, None);
    assert_eq!(crate::claude::Claude.verdict(Some(r), Exit::Code(0)), Verdict::Completed);
}

proptest! {
    #[test]
    fn never_panics_on_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut d = ClaudeDecoder::default();
        let mut out = Vec::new();
        d.decode(&bytes, &mut out);
    }

    #[test]
    fn never_panics_on_mangled_samples(idx in 0usize..50, cut in 0usize..4000, byte in any::<u8>()) {
        let line = SAMPLES.lines().nth(idx % SAMPLES.lines().count()).unwrap().as_bytes();
        let mut v = line[..cut.min(line.len())].to_vec();
        if !v.is_empty() { let i = cut % v.len(); v[i] = byte; }
        let mut d = ClaudeDecoder::default();
        let mut out = Vec::new();
        d.decode(&v, &mut out);
        prop_assert!(out.len() <= 8);
    }
}
