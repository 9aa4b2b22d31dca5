//! What an agent's output can cost herd: memory stays bounded whatever it prints, stored output
//! stops at `max_stored_output` with an event saying so, a line over the limit cuts the result
//! visibly, and plan files that are not regular files (or too big) are refused, never read.

mod common;

use std::time::{Duration, Instant};

use common::World;
use nix::sys::resource::{UsageWho, getrusage};

/// Peak resident memory of the largest child this test process has waited for, in bytes.
fn peak_child_rss() -> u64 {
    // Linux reports ru_maxrss in KiB.
    getrusage(UsageWho::RUSAGE_CHILDREN).unwrap().max_rss() as u64 * 1024
}

#[test]
fn fifty_megabytes_of_output_keep_herd_under_a_hundred_megabytes() {
    let w = World::new();
    // 50 MB on stderr and 50 MB on stdout, in short lines: one row per line used to cost
    // gigabytes of memory and hundreds of megabytes of database.
    let script = "yes 'a line of output with some padding to make it longer' | head -c 50000000 >&2; \
                  yes 'a line of output with some padding to make it longer' | head -c 50000000";
    let (code, v) =
        w.json(&["task", "flood", "--cli", "command", "--json", "--", "sh", "-c", script]);
    assert_eq!(code, 0, "{v}");
    let peak = peak_child_rss();
    assert!(peak < 100 << 20, "herd peaked at {} MiB", peak >> 20);
    assert_eq!(v["result_truncated"], true, "the result keeps what fits and says so");
    // Everything past the bound (64 MiB by default) is dropped with an event, not stored.
    let events = w.events(v["id"].as_str().unwrap());
    let limit: Vec<_> = events.iter().filter(|e| e["kind"] == "output_limit").collect();
    assert_eq!(limit.len(), 1, "announced once");
    assert_eq!(limit[0]["limit_bytes"], 64 << 20);
    assert_eq!(events.last().unwrap()["kind"], "subagent_closed", "the end is still recorded");
    let db = std::fs::metadata(w.state.join("herd.db")).unwrap().len()
        + std::fs::metadata(w.state.join("herd.db-wal")).map_or(0, |m| m.len());
    assert!(db < 100 << 20, "the database grew to {} MiB", db >> 20);
}

#[test]
fn stored_output_and_files_beside_a_run_stop_at_the_configured_bound() {
    let w = World::new();
    std::fs::create_dir_all(w.work.join(".herd")).unwrap();
    std::fs::write(w.work.join(".herd/config.yml"), "max_stored_output: 2MiB\n").unwrap();
    let script = "yes 'stderr text' | head -c 10000000 >&2; yes 'stdout text' | head -c 10000000";
    let (code, v) = w.json(&["task", "x", "--cli", "command", "--json", "--", "sh", "-c", script]);
    assert_eq!(code, 0, "{v}");
    let id = v["id"].as_str().unwrap();
    let events = w.events(id);
    assert!(events.iter().any(|e| e["kind"] == "output_limit" && e["limit_bytes"] == 2 << 20));
    // Lines read together are stored together: far fewer rows than lines.
    let texts = events.iter().filter(|e| e["kind"] == "text" || e["kind"] == "stderr").count();
    assert!(texts < 2000, "{texts} rows for about 1.5 million lines");
    let stored: usize = events.iter().map(|e| e.to_string().len()).sum();
    assert!(stored < 3 << 20, "{stored} bytes of events stored past a 2 MiB bound");
    let transcripts = w.state.join("transcripts");
    for name in [format!("{id}.jsonl"), format!("{id}.stderr.log")] {
        let len = std::fs::metadata(transcripts.join(&name)).unwrap().len();
        assert!(len <= 2 << 20, "{name} is {len} bytes");
    }
    let meta: serde_json::Value = serde_json::from_slice(
        &std::fs::read(transcripts.join(format!("{id}.meta.json"))).unwrap(),
    )
    .unwrap();
    assert!(meta["output_dropped_events"].as_u64().unwrap() > 0, "{meta}");
    assert_eq!(meta["files_cut"], true, "{meta}");
    // A bound below a useful minimum is refused, naming the file and field.
    std::fs::write(w.work.join(".herd/config.yml"), "max_stored_output: 10K\n").unwrap();
    let out = w.run(&["task", "x", "--cli", "command", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("config.yml") && err.contains("max_stored_output"), "{err}");
}

#[test]
fn a_line_over_the_limit_cuts_the_result_visibly() {
    let w = World::new();
    // One 20 MB line (the line limit is 8 MiB): it used to vanish from the result silently.
    let script = "echo before; head -c 20000000 /dev/zero | tr '\\0' x; echo; echo after";
    let (code, v) = w.json(&["task", "x", "--cli", "command", "--json", "--", "sh", "-c", script]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["result_truncated"], true, "{}", v["result_truncated"]);
    assert_eq!(v["result"], "before\nafter", "what fits is kept");
    let events = w.events(v["id"].as_str().unwrap());
    assert!(events.iter().any(|e| e["kind"] == "line_too_long"));
}

#[test]
fn plan_files_must_be_regular_files_of_bounded_size() {
    let w = World::new();
    // A device that never ends, and a FIFO nobody writes to: refused at once, never read.
    for path in ["/dev/zero".to_owned(), {
        let fifo = w.work.join("plan.fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        fifo.display().to_string()
    }] {
        let started = Instant::now();
        let out = w.run(&["run", &path]);
        assert_eq!(out.status.code(), Some(2), "{path}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("not a regular file") && err.contains(&path), "{err}");
        assert!(started.elapsed() < Duration::from_secs(10), "{path} was read");
    }
    let big = w.work.join("big.yml");
    std::fs::write(&big, format!("name: big\n# {}\nsteps: []\n", "x".repeat(5 << 20))).unwrap();
    let out = w.run(&["run", big.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("the limit is"), "too big");
    // An agent definition that is not a regular file is refused the same way.
    std::fs::create_dir_all(w.work.join(".herd/agents")).unwrap();
    let fifo = w.work.join(".herd/agents/pipe.yml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let out = w.run(&["agents", "validate", fifo.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stdout).contains("not a regular file"));
}

#[test]
fn herds_own_variables_cannot_be_set_for_a_child() {
    let w = World::new();
    for var in ["HERD_DEPTH=0", "HERD_MAX_DEPTH=9", "HERD_POLICY_LAYERS=[]", "HERD_SUBAGENT_ID=x"] {
        let out = w.run(&["task", "x", "--cli", "command", "--env", var, "--", "env"]);
        assert_eq!(out.status.code(), Some(2), "{var}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("herd sets this variable for its children itself"), "{var}: {err}");
    }
    let (_, ps) = w.json(&["ps", "--all", "--json"]);
    assert_eq!(ps, serde_json::json!([]), "nothing was started");
    // `--limit 0` lists every run, not none.
    w.run(&["task", "x", "--cli", "command", "--", "true"]);
    let (_, ps) = w.json(&["ps", "--all", "--limit", "0", "--json"]);
    assert_eq!(ps.as_array().unwrap().len(), 1);
}
