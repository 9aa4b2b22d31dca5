//! Benchmark: dispatch 2000 command-backend steps running `/bin/true`, 4 at a time, persistence
//! on (`herd run`), against a bare tokio pool (Semaphore(4) + tokio::process) running the same
//! 2000 processes; interleaved A B A B in the same run. Target: herd ≤ 1.3× the bare pool.
//! Both run unconfined (`sandbox: off`): `--bench sandbox` measures what the sandbox adds.
//!
//! Run: `cargo bench -p herd-cli --bench dispatch` (HERD_BENCH_STEPS to change the count).

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::resource::{UsageWho, getrusage};

/// CPU seconds (user + system) used so far by `who`.
fn cpu(who: UsageWho) -> f64 {
    getrusage(who).map_or(0.0, |u| {
        let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6;
        t(u.user_time()) + t(u.system_time())
    })
}

/// CPU of this process and of its waited-for children (herd waits for its guard, which waits
/// for every agent: the whole tree is counted).
fn cpu_all() -> f64 {
    cpu(UsageWho::RUSAGE_SELF) + cpu(UsageWho::RUSAGE_CHILDREN)
}

fn steps() -> usize {
    std::env::var("HERD_BENCH_STEPS").ok().and_then(|s| s.parse().ok()).unwrap_or(2000)
}

fn bare(rt: &tokio::runtime::Runtime, n: usize) -> Duration {
    rt.block_on(async {
        let sem = Arc::new(tokio::sync::Semaphore::new(4));
        let start = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..n {
            let permit = sem.clone().acquire_owned().await.expect("semaphore");
            set.spawn(async move {
                let st = tokio::process::Command::new("/bin/true")
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .status()
                    .await
                    .expect("spawn /bin/true");
                drop(permit);
                st.success()
            });
        }
        while let Some(r) = set.join_next().await {
            assert!(r.expect("join"));
        }
        start.elapsed()
    })
}

fn herd(plan: &std::path::Path, dir: &std::path::Path, round: usize) -> Duration {
    let state = dir.join(format!("state-{round}"));
    let start = Instant::now();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["run", plan.to_str().expect("utf-8 path"), "--max-concurrent", "4", "--json"])
        .env("HERD_STATE_DIR", &state)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("run herd");
    let took = start.elapsed();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    took
}

fn main() {
    let n = steps();
    let dir = tempfile::tempdir().expect("tempdir");
    // herd's own dispatch against a bare pool: both unconfined (what the sandbox adds to a run
    // is measured by `--bench sandbox`).
    std::fs::create_dir_all(dir.path().join(".herd")).expect(".herd");
    std::fs::write(dir.path().join(".herd/config.yml"), "sandbox: off\n").expect("config");
    let plan = dir.path().join("plan.yml");
    let mut yml = String::from(
        "name: dispatch\nstrategy: parallel\ndefaults: {cli: command, command: [/bin/true], prompt: go}\nsteps:\n",
    );
    for i in 0..n {
        yml.push_str(&format!("  - id: s{i}\n"));
    }
    std::fs::write(&plan, yml).expect("write plan");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("rt");
    println!("dispatch: {n} x /bin/true, 4 at a time, interleaved");
    const ROUNDS: usize = 5;
    let (mut b, mut h, mut bc, mut hc) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let c0 = cpu_all();
        b.push(bare(&rt, n));
        let c1 = cpu_all();
        h.push(herd(&plan, dir.path(), round));
        let c2 = cpu_all();
        bc.push(c1 - c0);
        hc.push(c2 - c1);
        println!(
            "  round {round}: bare {:>6.0} ms ({:.2} s CPU), herd {:>6.0} ms ({:.2} s CPU)",
            b[round].as_secs_f64() * 1e3,
            bc[round],
            h[round].as_secs_f64() * 1e3,
            hc[round],
        );
    }
    b.sort();
    h.sort();
    bc.sort_by(f64::total_cmp);
    hc.sort_by(f64::total_cmp);
    let mid = ROUNDS / 2;
    let (bm, hm) = (b[mid].as_secs_f64(), h[mid].as_secs_f64());
    println!("bare tokio pool: {:>7.0} ms ({:.2} ms/process)", bm * 1e3, bm * 1e3 / n as f64);
    println!("herd run:        {:>7.0} ms ({:.2} ms/step)", hm * 1e3, hm * 1e3 / n as f64);
    println!(
        "CPU (medians): bare {:.2} s, herd {:.2} s: {:.2}x",
        bc[mid],
        hc[mid],
        hc[mid] / bc[mid]
    );
    println!(
        "ratio {:.2}x (target <= 1.3x): {}",
        hm / bm,
        if hm / bm <= 1.3 { "PASS" } else { "FAIL" }
    );
}
