//! Benchmark: decode + persist a recorded 100k-line claude stream through herd's real path
//! (bounded splitter → claude decoder → group-commit writer → SQLite), against bare
//! `serde_json::Value` parsing of the same lines, interleaved in the same run.
//!
//! Run: `cargo bench -p herd-engine --bench decode_persist` (targets: ≥ 100k events/s persisted,
//! ≥ 0.5 of bare parsing).

use std::time::{Duration, Instant};

use herd_backends::BackendKind;
use herd_core::SubagentId;
use herd_engine::lines::{LineSplitter, Piece};
use herd_store::{NewSubagent, StatePaths, Store, Writer};

const LINES: usize = 100_000;
const ROUNDS: usize = 3;

fn stream() -> Vec<u8> {
    let samples = include_str!("../../herd-backends/tests/fixtures/claude/protocols_samples.jsonl");
    let lines: Vec<&str> = samples.lines().collect();
    let mut out = Vec::new();
    for i in 0..LINES {
        out.extend_from_slice(lines[i % lines.len()].as_bytes());
        out.push(b'\n');
    }
    out
}

fn bare(stream: &[u8]) -> (Duration, usize) {
    let start = Instant::now();
    let mut n = 0;
    for line in stream.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let v: serde_json::Value = serde_json::from_slice(line).expect("fixture lines are JSON");
        n += usize::from(!v.is_null());
    }
    (start.elapsed(), n)
}

fn herd(stream: &[u8], round: usize) -> (Duration, usize) {
    let dir = tempfile::tempdir().unwrap();
    let paths = StatePaths::new(dir.path());
    let mut store = Store::open(paths.clone()).unwrap();
    store.create_session("bench", "bench", dir.path()).unwrap();
    let id = SubagentId::generate();
    store
        .create_subagent(&NewSubagent {
            id: id.clone(),
            parent_session_id: "bench".into(),
            name: format!("bench-{round}"),
            cli: "claude".into(),
            prompt: "bench".into(),
            model: None,
            working_directory: "/".into(),
            max_turns: None,
            timeout_ms: None,
            spec: serde_json::json!({}),
            owner_pid: std::process::id(),
            owner_start_time: None,
        })
        .unwrap();
    let writer = Writer::start(&paths).unwrap();
    let handle = writer.handle();
    let mut decoder = herd_backends::backend(BackendKind::Claude)
        .decoder(&Default::default(), std::path::Path::new("/"));
    let mut splitter = LineSplitter::new(8 << 20);
    let mut events = 0usize;
    let start = Instant::now();
    for chunk in stream.chunks(64 * 1024) {
        let mut batch = Vec::new();
        splitter.push(chunk, |p| {
            if let Piece::Line(l) = p {
                decoder.decode(l, &mut batch);
            }
        });
        events += batch.len();
        handle.append_blocking(&id, batch).unwrap();
    }
    handle.flush_blocking().unwrap();
    let took = start.elapsed();
    let persisted = store.events_after(&id, 0, usize::MAX >> 1).unwrap().len();
    assert_eq!(persisted, events + 1, "every decoded event is in the store");
    drop(handle);
    drop(writer);
    (took, events)
}

/// The decode stage alone (splitter + decoder + payload serialization), for the breakdown.
fn decode_only(stream: &[u8]) -> Duration {
    let mut decoder = herd_backends::backend(BackendKind::Claude)
        .decoder(&Default::default(), std::path::Path::new("/"));
    let mut splitter = LineSplitter::new(8 << 20);
    let start = Instant::now();
    let mut n = 0usize;
    for chunk in stream.chunks(64 * 1024) {
        let mut batch = Vec::new();
        splitter.push(chunk, |p| {
            if let Piece::Line(l) = p {
                decoder.decode(l, &mut batch);
            }
        });
        for d in &batch {
            n += serde_json::to_string(&d.event).map(|s| s.len()).unwrap_or(0);
        }
    }
    assert!(n > 0);
    start.elapsed()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let stream = stream();
    println!(
        "decode_persist: {LINES} lines, {} MB, {ROUNDS} interleaved rounds",
        stream.len() / 1_000_000
    );
    let (mut bare_rates, mut herd_rates, mut event_rates) = (vec![], vec![], vec![]);
    for round in 0..ROUNDS {
        let (tb, nb) = bare(&stream);
        let (th, events) = herd(&stream, round);
        bare_rates.push(nb as f64 / tb.as_secs_f64());
        herd_rates.push(LINES as f64 / th.as_secs_f64());
        event_rates.push(events as f64 / th.as_secs_f64());
        println!(
            "  round {round}: bare {:>7.0} ms, herd {:>7.0} ms ({events} events)",
            tb.as_secs_f64() * 1e3,
            th.as_secs_f64() * 1e3
        );
    }
    let d = decode_only(&stream);
    println!(
        "  (decode + serialize alone: {:.0} ms; the rest is the SQLite writer, in parallel)",
        d.as_secs_f64() * 1e3
    );
    let (b, h, e) = (median(bare_rates), median(herd_rates), median(event_rates));
    let ratio = h / b;
    println!("bare serde_json::Value:  {b:>10.0} lines/s");
    println!("herd decode+persist:     {h:>10.0} lines/s, {e:>10.0} events/s");
    println!(
        "ratio herd/bare: {ratio:.2} (target >= 0.5: {}); events/s target >= 100000: {}",
        if ratio >= 0.5 { "PASS" } else { "FAIL" },
        if e >= 100_000.0 { "PASS" } else { "FAIL" }
    );
}
