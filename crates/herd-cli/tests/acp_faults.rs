//! ACP agents that do not speak the protocol (fault injection: a shell script stands in for
//! the agent): one that never answers `initialize`, one that answers garbage, one that exits
//! before its session opens. Each fails `protocol_error` in bounded time and leaves nothing.

mod common;

use std::time::{Duration, Instant};

use common::{World, procs_with_cmdline};

/// `herd task … --cli acp -- sh -c SCRIPT` with a 2 s handshake limit.
fn run(w: &World, script: &str) -> (i32, serde_json::Value, Duration) {
    std::fs::create_dir_all(w.work.join(".herd")).unwrap();
    std::fs::write(w.work.join(".herd/config.yml"), "handshake_timeout: 2s\n").unwrap();
    let start = Instant::now();
    let (code, v) = w.json(&["task", "go", "--json", "--cli", "acp", "--", "sh", "-c", script]);
    (code, v, start.elapsed())
}

fn assert_protocol_error(v: &serde_json::Value, owed: &str) {
    assert_eq!(v["status"], "failed", "{v}");
    let reason = v["failure_reason"].as_str().unwrap();
    assert!(reason.starts_with("protocol_error: "), "{reason}");
    assert!(reason.contains(owed), "{reason}");
}

#[test]
fn an_agent_that_never_answers_initialize_times_out() {
    let w = World::new();
    let (code, v, took) = run(&w, "sleep 73.11");
    assert_eq!(code, 1, "{v}");
    assert_protocol_error(&v, "did not send its answer to initialize within 2s");
    assert!(took < Duration::from_secs(15), "took {took:?}");
    assert!(procs_with_cmdline("sleep 73.11").is_empty());
}

#[test]
fn an_agent_that_answers_garbage_times_out_and_its_output_is_kept() {
    let w = World::new();
    let script = "echo 'not json at all'; echo '{\"jsonrpc\":\"2.0\",\"id\":99,\"result\":{}}'; \
                  echo '{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"nonsense\"}'; sleep 73.12";
    let (code, v, took) = run(&w, script);
    assert_eq!(code, 1, "{v}");
    // `initialize` got an answer (a useless one): session/new is what it then never sent.
    assert_protocol_error(&v, "its answer to session/new within 2s");
    assert!(took < Duration::from_secs(15), "took {took:?}");
    assert!(procs_with_cmdline("sleep 73.12").is_empty());
    // What it said is kept: the line that is not JSON as a decode error, the answer to a
    // request herd never sent raw.
    let events = w.events(v["id"].as_str().unwrap());
    let kind = |k: &str, field: &str, has: &str| {
        events.iter().any(|e| e["kind"] == k && e[field].as_str().unwrap().contains(has))
    };
    assert!(kind("decode_error", "preview", "not json at all"), "{events:?}");
    assert!(kind("unknown", "raw", "\"id\":99"), "{events:?}");
}

#[test]
fn an_agent_that_exits_before_its_session_opens_is_a_protocol_error() {
    let w = World::new();
    let (code, v, _) = run(&w, "read line; exit 0");
    assert_eq!(code, 1, "{v}");
    assert_protocol_error(&v, "the agent ended before it sent its answer to initialize");
}
