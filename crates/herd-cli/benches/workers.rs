//! Benchmark: plans served by `herd worker` processes through PostgreSQL against the same plan
//! run on one machine with SQLite (`herd run`, in-process), and the queue's claim latency.
//!
//! End to end: N command-backend steps running `/bin/true` (a parallel plan), each worker 4 at a
//! time, with 1, 2 and 4 worker processes, reported as steps claimed and completed per second
//! against `herd run` on SQLite with 4 at a time (the floor, measured in the same run).
//! The queue alone: K threads each claiming and completing steps through herd-store (no
//! processes started), the latency of each claim (p50/p99) and steps per second.
//! Both unconfined (`sandbox: off`). Needs PostgreSQL as the tests do (HERD_TEST_PG_URL or an
//! installed server for a throw-away cluster).
//!
//! Run: `cargo bench -p herd-cli --bench workers` (HERD_BENCH_STEPS to change N, default 300).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use herd_store::{Backend, NewOrchestration, NewStep, QueuedStep, StatePaths, Store};

fn steps() -> usize {
    std::env::var("HERD_BENCH_STEPS").ok().and_then(|s| s.parse().ok()).unwrap_or(300)
}

fn herd(dir: &Path, state: &Path, store: Option<&str>, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_herd"));
    c.args(args).env("HERD_STATE_DIR", state).current_dir(dir).stdin(Stdio::null());
    if let Some(url) = store {
        c.env("HERD_STORE_URL", url);
    }
    c
}

/// `herd run` of the plan; its wall time.
fn run(dir: &Path, state: &Path, store: Option<&str>) -> Duration {
    let start = Instant::now();
    let out = herd(dir, state, store, &["run", "plan.yml", "--max-concurrent", "4", "--json"])
        .output()
        .expect("run herd");
    let took = start.elapsed();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    took
}

/// The plan's own span in the store: its first claim to its last completion (what the workers
/// did, without `herd run`'s polling of the plan's status).
fn span(url: &str, dir: &Path) -> Duration {
    let s = Store::open(
        StatePaths::new(dir.join("reader")).with_store(Backend::Postgres(url.to_owned())),
    )
    .expect("open store");
    let plan = s.orchestrations(true, 1).expect("plans").pop().expect("a plan");
    let ev = s.plan_events(&plan.id).expect("events");
    let first = ev.iter().filter(|e| e.kind == "step_started").map(|e| e.ts).min().unwrap_or(0);
    let last = ev.iter().filter(|e| e.kind == "step_completed").map(|e| e.ts).max().unwrap_or(0);
    Duration::from_millis((last - first).max(0) as u64)
}

/// `n` workers (each its own state directory), registered and waiting.
fn workers(dir: &Path, url: &str, n: usize, round: usize) -> Vec<Child> {
    let kids: Vec<Child> = (0..n)
        .map(|i| {
            herd(
                dir,
                &dir.join(format!("w{round}-{i}")),
                Some(url),
                &["worker", "--max-concurrent", "4"],
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start worker")
        })
        .collect();
    let s = Store::open(
        StatePaths::new(dir.join("reader")).with_store(Backend::Postgres(url.to_owned())),
    )
    .expect("open store");
    let t = Instant::now();
    while s.workers().expect("workers").iter().filter(|w| w.status == "active").count() < n {
        assert!(t.elapsed() < Duration::from_secs(30), "workers did not register");
        std::thread::sleep(Duration::from_millis(20));
    }
    kids
}

fn stop(kids: Vec<Child>) {
    for mut k in kids {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(k.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = k.wait();
    }
}

fn per_s(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64()
}

/// The queue alone: `k` threads claiming and completing `n` steps; (steps/s, claim latencies).
fn queue(url: &str, dir: &Path, n: usize, k: usize, round: usize) -> (f64, Vec<Duration>) {
    let open = || {
        Store::open(StatePaths::new(dir.join("q")).with_store(Backend::Postgres(url.to_owned())))
            .expect("open store")
    };
    let mut s = open();
    let session = format!("q{round}-{k}");
    s.create_session(&session, "bench", dir).expect("session");
    let id = format!("pln_q{round}_{k}");
    let o = NewOrchestration {
        id: id.clone(),
        session,
        name: "queue".into(),
        strategy: "parallel".into(),
        plan: "{}".into(),
        source_file: None,
        steps: (0..n)
            .map(|i| NewStep {
                key: format!("s{i}"),
                name: format!("s{i}"),
                prompt: "p".into(),
                model: None,
                cwd: None,
                tools: None,
                depends_on: vec![],
                contract: "{}".into(),
            })
            .collect(),
        owner_pid: std::process::id(),
        owner_start_time: None,
    };
    s.submit_orchestration(&o, "steps: []", &vec![QueuedStep::default(); n], None).expect("submit");
    let start = Instant::now();
    let lat: Vec<Duration> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..k)
            .map(|t| {
                sc.spawn(move || {
                    let s = open();
                    let me = format!("bench-{t}");
                    let mut lat = Vec::new();
                    loop {
                        let t0 = Instant::now();
                        let Some(c) = s.claim_step(&me, &[], 60_000, "run").expect("claim") else {
                            break;
                        };
                        lat.push(t0.elapsed());
                        assert!(s.finish_claim(&c, "completed", None).expect("finish"));
                    }
                    lat
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().expect("claimer")).collect()
    });
    let took = start.elapsed();
    assert_eq!(lat.len(), n, "every step claimed once");
    (per_s(n, took), lat)
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}

fn main() {
    let n = steps();
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    std::fs::create_dir_all(dir.join(".herd")).expect(".herd");
    std::fs::write(dir.join(".herd/config.yml"), "sandbox: off\n").expect("config");
    let mut yml = String::from(
        "name: bench\nstrategy: parallel\ndefaults: {cli: command, command: [/bin/true], prompt: go}\nsteps:\n",
    );
    for i in 0..n {
        yml.push_str(&format!("  - id: s{i}\n"));
    }
    std::fs::write(dir.join("plan.yml"), yml).expect("write plan");

    println!(
        "workers: {n} x /bin/true, 4 at a time per worker (SQLite: one herd run, 4 at a time)"
    );
    const ROUNDS: usize = 3;
    let counts = [1usize, 2, 4];
    let mut lite = Vec::new();
    let mut pg_wall: Vec<Vec<Duration>> = vec![Vec::new(); counts.len()];
    let mut pg_span: Vec<Vec<Duration>> = vec![Vec::new(); counts.len()];
    for round in 0..ROUNDS {
        lite.push(run(dir, &dir.join(format!("lite-{round}")), None));
        let mut line =
            format!("  round {round}: sqlite {:>6.0} ms", lite[round].as_secs_f64() * 1e3);
        for (c, &k) in counts.iter().enumerate() {
            let db = herd_testkit::pg_db();
            let kids = workers(dir, &db.url, k, round);
            let wall = run(dir, &dir.join(format!("sub-{round}-{k}")), Some(&db.url));
            let sp = span(&db.url, dir);
            stop(kids);
            line.push_str(&format!(
                ", pg x{k} {:>6.0} ms (span {:>6.0})",
                wall.as_secs_f64() * 1e3,
                sp.as_secs_f64() * 1e3
            ));
            pg_wall[c].push(wall);
            pg_span[c].push(sp);
        }
        println!("{line}");
    }
    let mid = ROUNDS / 2;
    lite.sort();
    let floor = per_s(n, lite[mid]);
    println!("sqlite herd run (floor): {floor:>7.1} steps/s");
    for (c, &k) in counts.iter().enumerate() {
        pg_wall[c].sort();
        pg_span[c].sort();
        let (w, s) = (per_s(n, pg_wall[c][mid]), per_s(n, pg_span[c][mid]));
        println!(
            "postgres, {k} worker(s):  {w:>7.1} steps/s submit-to-end ({:.2}x sqlite), \
             {s:>7.1} steps/s first claim to last completion ({:.2}x)",
            w / floor,
            s / floor
        );
    }

    println!("queue alone: {n} steps claimed and completed through herd-store, no processes");
    for k in [1usize, 2, 4] {
        let db = herd_testkit::pg_db();
        let (rate, mut lat) = queue(&db.url, dir, n, k, 0);
        lat.sort();
        println!(
            "  {k} claimer(s): {rate:>7.1} steps/s, claim latency p50 {:.2} ms, p99 {:.2} ms",
            pct(&lat, 0.5),
            pct(&lat, 0.99)
        );
    }
}
