//! Benchmark of `herd serve`: the latency from an agent's stdout line to a gRPC watcher (p50,
//! p99; 1 and 100 watchers at once), spawn latency through the daemon against in-process, and
//! the daemon's idle RSS. Agents are command-backend `sh` scripts, unconfined (`sandbox: off`).
//!
//! Run: `cargo bench -p herd-cli --bench daemon` (HERD_BENCH_LINES: lines per latency run,
//! HERD_BENCH_SPAWNS: spawns per side).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use herd_engine::GuardCommand;
use herd_engine::service::{Caller, Service, ServiceOptions, TaskSpec};
use herd_server::pb::{self, agent_event::Event};

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// A `herd serve` on `dir`'s state directory, SIGTERMed when dropped.
struct Daemon(Child);

impl Daemon {
    fn start(dir: &Path) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_herd"))
            .args([
                "--state-dir",
                "state",
                "serve",
                "--max-concurrent",
                "20",
                "--max-queue",
                "1000",
            ])
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("herd serve");
        let socket = dir.join("state/herd.sock");
        let start = Instant::now();
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            assert!(start.elapsed() < Duration::from_secs(20), "herd serve did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Self(child)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = self.0.wait();
    }
}

fn sh_task(script: &str) -> pb::SpawnSubagentRequest {
    pb::SpawnSubagentRequest {
        prompt: "bench".into(),
        cli: "command".into(),
        command: vec!["bash".into(), "-c".into(), script.into()],
        timeout_seconds: 600,
        ..Default::default()
    }
}

/// One run printing `lines` timestamps (bash's `EPOCHREALTIME`, µs, read by the shell itself just
/// before it writes the line: no process in between), `gap` apart, watched by `watchers` gRPC
/// clients at once: each line's latency to each watcher, ms.
async fn latency(socket: &Path, lines: usize, watchers: usize, gap: &str) -> Vec<f64> {
    let mut client = herd_server::client::connect_unix(socket).await.expect("connect");
    // The script waits for its watchers before printing (they subscribe in the first second).
    let script = format!(
        "sleep 1; for ((i = 0; i < {lines}; i++)); do echo \"t ${{EPOCHREALTIME/./}}\"; sleep {gap}; done"
    );
    let id = client.spawn_subagent(sh_task(&script)).await.expect("spawn").into_inner().subagent_id;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..watchers {
        let mut c = herd_server::client::connect_unix(socket).await.expect("connect");
        let id = id.clone();
        tasks.spawn(async move {
            let req = pb::WatchSubagentRequest { subagent_id: id, ..Default::default() };
            let mut s = c.watch_subagent(req).await.expect("watch").into_inner();
            let mut out = Vec::new();
            while let Some(e) = s.message().await.expect("stream") {
                let at = now_ns();
                if let Some(Event::Text(t)) = e.event {
                    for l in t.text.lines() {
                        if let Some(us) =
                            l.strip_prefix("t ").and_then(|v| v.trim().parse::<u128>().ok())
                        {
                            out.push(at.saturating_sub(us * 1000) as f64 / 1e6);
                        }
                    }
                }
            }
            out
        });
    }
    let mut all = Vec::new();
    while let Some(r) = tasks.join_next().await {
        all.extend(r.expect("watcher"));
    }
    all.sort_by(f64::total_cmp);
    all
}

/// `n` spawns of `true` through the daemon: time to the RPC's answer and to the agent's start
/// (its `started` event), ms each.
async fn spawn_daemon(socket: &Path, n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut c = herd_server::client::connect_unix(socket).await.expect("connect");
    let (mut answered, mut started) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let t = Instant::now();
        let id = c.spawn_subagent(sh_task("true")).await.expect("spawn").into_inner().subagent_id;
        answered.push(t.elapsed().as_secs_f64() * 1e3);
        let req = pb::WatchSubagentRequest { subagent_id: id, ..Default::default() };
        let mut s = c.watch_subagent(req).await.expect("watch").into_inner();
        let mut seen = false;
        while let Some(e) = s.message().await.expect("stream") {
            if !seen && matches!(&e.event, Some(Event::Status(st)) if st.status == "started") {
                started.push(t.elapsed().as_secs_f64() * 1e3);
                seen = true;
            }
        }
    }
    (answered, started)
}

/// The same `n` spawns with the engine service in this process.
async fn spawn_local(dir: &Path, n: usize) -> (Vec<f64>, Vec<f64>) {
    let guard = GuardCommand {
        program: env!("CARGO_BIN_EXE_herd").into(),
        args: vec![herd_engine::guard::GUARD_ARG.into()],
    };
    let svc = Service::open_with(&dir.join("local-state"), guard, ServiceOptions::default())
        .expect("service");
    let caller = Caller::top(dir, "bench");
    let (mut answered, mut started) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let spec = TaskSpec {
            prompt: "bench".into(),
            cli: Some(herd_core::BackendKind::Command),
            command: vec!["sh".into(), "-c".into(), "true".into()],
            ..TaskSpec::default()
        };
        let t = Instant::now();
        let id = svc.spawn(&caller, spec).await.expect("spawn").id;
        answered.push(t.elapsed().as_secs_f64() * 1e3);
        let mut w = svc.watch(id.as_str(), 1).expect("watch");
        let mut seen = false;
        while let Some(e) = w.next().await {
            if !seen
                && matches!(e.expect("event").event, herd_core::AgentEvent::SubagentStarted { .. })
            {
                started.push(t.elapsed().as_secs_f64() * 1e3);
                seen = true;
            }
        }
    }
    svc.shutdown().await.expect("shutdown");
    (answered, started)
}

fn summary(label: &str, mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let (p50, p99) = (percentile(&v, 0.5), percentile(&v, 0.99));
    println!(
        "{label:<44} n={:<6} p50 {p50:>7.2} ms  p99 {p99:>7.2} ms  max {:>7.2} ms",
        v.len(),
        v.last().copied().unwrap_or(f64::NAN)
    );
    p50
}

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join(".herd")).expect("mkdir");
    std::fs::write(dir.path().join(".herd/config.yml"), "sandbox: off\n").expect("config");
    let lines = env_usize("HERD_BENCH_LINES", 200);
    let spawns = env_usize("HERD_BENCH_SPAWNS", 50);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let daemon = Daemon::start(dir.path());
    std::thread::sleep(Duration::from_millis(500));
    let idle_start = rss_kib(daemon.0.id());
    let socket = dir.path().join("state/herd.sock");

    println!("herd serve benchmark ({lines} lines per latency run, {spawns} spawns per side)");
    let one = rt.block_on(latency(&socket, lines, 1, "0.01"));
    summary("stdout line -> gRPC watcher, 1 watcher", one);
    let hundred = rt.block_on(latency(&socket, lines, 100, "0.01"));
    summary("stdout line -> gRPC watcher, 100 watchers", hundred);

    let (d_answer, d_start) = rt.block_on(spawn_daemon(&socket, spawns));
    let (l_answer, l_start) = rt.block_on(spawn_local(dir.path(), spawns));
    let da = summary("spawn via daemon: RPC answered", d_answer);
    let la = summary("spawn in-process: spawn() returned", l_answer);
    let ds = summary("spawn via daemon: agent started", d_start);
    let ls = summary("spawn in-process: agent started", l_start);
    println!(
        "ratio daemon/in-process (p50): answered {:.2}x, agent started {:.2}x",
        da / la,
        ds / ls
    );

    std::thread::sleep(Duration::from_secs(1));
    println!(
        "daemon RSS: idle at start {} KiB, idle after the runs {} KiB",
        idle_start,
        rss_kib(daemon.0.id())
    );
    drop(daemon);
}
