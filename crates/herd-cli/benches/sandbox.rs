//! Benchmark: what the sandbox adds to the start of each run. N command steps (`/bin/true`),
//! one at a time, through `herd run` with the sandbox (default) and with `sandbox: off`, and in
//! a git repository (the sandbox plus the ref check); beside them the same N spawns bare
//! (`/bin/true`, and bwrap with herd's own command line running herd's init and `/bin/true`).
//! Rounds interleave every variant (A B C D E A B …); medians per step. Target: the sandbox
//! adds < 20 ms per run.
//!
//! Run: `cargo bench -p herd-cli --bench sandbox` (HERD_BENCH_STEPS, HERD_BENCH_ROUNDS).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use herd_backends::Invocation;
use herd_engine::sandbox::{self, Availability, Mount, MountKind, SandboxPlan};

fn env_usize(k: &str, default: usize) -> usize {
    std::env::var(k).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

fn spawn_n(n: usize, program: &Path, args: &[String]) -> Duration {
    let start = Instant::now();
    for _ in 0..n {
        let ok = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("spawn");
        assert!(ok.success(), "{} failed", program.display());
    }
    start.elapsed()
}

/// `herd run plan.yml` in `dir` (its own state dir per round).
fn herd(dir: &Path, round: usize) -> Duration {
    let state = dir.join(format!("state-{round}"));
    let start = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["run", "plan.yml", "--max-concurrent", "1", "--json"])
        .env("HERD_STATE_DIR", &state)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("run herd");
    let took = start.elapsed();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    took
}

fn project(root: &Path, name: &str, n: usize, config: Option<&str>, git: bool) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).expect("dir");
    let mut yml = String::from(
        "name: sandbox\nstrategy: sequential\ndefaults: {cli: command, command: [/bin/true], prompt: go}\nsteps:\n",
    );
    for i in 0..n {
        yml.push_str(&format!("  - id: s{i}\n"));
    }
    std::fs::write(dir.join("plan.yml"), yml).expect("plan");
    if let Some(c) = config {
        std::fs::create_dir_all(dir.join(".herd")).expect(".herd");
        std::fs::write(dir.join(".herd/config.yml"), c).expect("config");
    }
    if git {
        let git = |args: &[&str]| {
            let ok = Command::new("git")
                .args(args)
                .current_dir(&dir)
                .env("GIT_AUTHOR_NAME", "b")
                .env("GIT_AUTHOR_EMAIL", "b@b")
                .env("GIT_COMMITTER_NAME", "b")
                .env("GIT_COMMITTER_EMAIL", "b@b")
                .output()
                .expect("git");
            assert!(ok.status.success());
        };
        git(&["init", "-q", "-b", "main"]);
        git(&["add", "plan.yml"]);
        git(&["commit", "-qm", "plan"]);
    }
    dir
}

fn main() {
    let n = env_usize("HERD_BENCH_STEPS", 100);
    let rounds = env_usize("HERD_BENCH_ROUNDS", 7);
    let bwrap = match sandbox::availability() {
        Availability::Bwrap(p) => p.clone(),
        Availability::Missing(why) => panic!("no sandbox to measure: {why}"),
    };
    let root = tempfile::tempdir().expect("tempdir");
    let on = project(root.path(), "on", n, None, false);
    let off = project(root.path(), "off", n, Some("sandbox: off\n"), false);
    let repo = project(root.path(), "repo", n, None, true);
    let truth = PathBuf::from("/bin/true");
    // bwrap as herd calls it (the argv builder itself): the init as pid 1 running /bin/true.
    let plan = SandboxPlan {
        bwrap: bwrap.clone(),
        init: PathBuf::from(env!("CARGO_BIN_EXE_herd")),
        cwd: on.clone(),
        mounts: vec![
            Mount { path: "/tmp".into(), kind: MountKind::Tmpfs },
            Mount { path: on.clone(), kind: MountKind::Writable },
        ],
        tmpdir: false,
    };
    let wrapped = sandbox::confine(Invocation { program: truth.clone(), args: Vec::new() }, &plan);

    println!("sandbox: {n} x /bin/true per variant, one at a time, {rounds} interleaved rounds");
    let names = [
        "bare /bin/true",
        "bare bwrap+init",
        "herd, sandbox off",
        "herd, sandbox",
        "herd, sandbox, git repo",
    ];
    let mut t: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for round in 0..rounds {
        let ms = |d: Duration| d.as_secs_f64() * 1e3 / n as f64;
        t[0].push(ms(spawn_n(n, &truth, &[])));
        t[1].push(ms(spawn_n(n, &wrapped.program, &wrapped.args)));
        t[2].push(ms(herd(&off, round)));
        t[3].push(ms(herd(&on, round)));
        t[4].push(ms(herd(&repo, round)));
        let row: Vec<String> = t.iter().map(|v| format!("{:6.2}", v[round])).collect();
        println!("  round {round}: {} ms/step", row.join(" | "));
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let m: Vec<f64> = t.iter_mut().map(median).collect();
    for (name, v) in names.iter().zip(&m) {
        println!("{name:<26} {v:7.2} ms/step (median)");
    }
    let added = m[3] - m[2];
    println!("bwrap + init over a bare spawn:   {:6.2} ms", m[1] - m[0]);
    println!("ref check in a git repository:    {:6.2} ms", m[4] - m[3]);
    println!(
        "sandbox added per run: {added:.2} ms (target < 20 ms): {}",
        if added < 20.0 { "PASS" } else { "FAIL" }
    );
}
