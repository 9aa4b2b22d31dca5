//! Helpers for herd's end-to-end tests: an isolated world per test (HOME, work dir, state dir),
//! the `herd` command wired to the testkit mock, and /proc scans for leftover processes.

#![allow(dead_code)]

pub mod browser;
pub mod daemon;
pub mod mcp;
pub mod web;
pub mod workers;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use herd_testkit::{MockServer, Script};
use serde_json::{Value, json};

pub struct World {
    _dir: tempfile::TempDir,
    pub home: PathBuf,
    pub work: PathBuf,
    pub state: PathBuf,
    pub claude: Option<PathBuf>,
}

impl World {
    /// A fresh world; `claude` is `None` (after a loud notice) when the real CLI is missing.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let work = dir.path().join("work");
        let state = dir.path().join("state");
        for d in [&home, &work] {
            std::fs::create_dir_all(d).unwrap();
        }
        let work = work.canonicalize().unwrap();
        Self { _dir: dir, home, work, state, claude: herd_testkit::require_claude() }
    }

    /// A fresh world for a test of the real claude; `None` (after the loud notice) when it is
    /// missing and HERD_SKIP_REAL_CLIS=1 lets the test skip.
    pub fn with_claude() -> Option<Self> {
        let w = Self::new();
        w.claude.is_some().then_some(w)
    }

    /// `herd ARGS` with a cleared environment: the mock as the model API, a fresh HOME.
    pub fn herd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_herd"));
        c.args(args)
            .env_clear()
            .envs(herd_testkit::claude_env(MockServer::shared(), &self.home))
            .env("HERD_STATE_DIR", &self.state)
            .current_dir(&self.work)
            .stdin(Stdio::null());
        if let Some(bin) = &self.claude {
            c.env("HERD_CLAUDE_BIN", bin);
        }
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.herd(args).output().unwrap()
    }

    /// Run and parse stdout as one JSON value.
    pub fn json(&self, args: &[&str]) -> (i32, Value) {
        Self::parsed(self.run(args))
    }

    /// `herd run --json` of `yaml` with every run on one guard (`HERD_GUARDS=1`), for what
    /// runs sharing a guard must not do to each other.
    pub fn run_plan_on_one_guard(&self, file: &str, yaml: &str) -> (i32, Value) {
        std::fs::write(self.work.join(file), yaml).unwrap();
        Self::parsed(self.herd(&["run", file, "--json"]).env("HERD_GUARDS", "1").output().unwrap())
    }

    fn parsed(out: Output) -> (i32, Value) {
        let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}): {}\nstderr: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (out.status.code().unwrap_or(-1), v)
    }

    /// Write `yaml` to `file` in the work directory and `herd run` it with `--json`.
    pub fn run_plan(&self, file: &str, yaml: &str) -> (i32, Value) {
        std::fs::write(self.work.join(file), yaml).unwrap();
        self.json(&["run", file, "--json"])
    }

    /// The `result` of a subagent, via `herd show --json`.
    pub fn result_of(&self, id: &str) -> Value {
        self.json(&["show", id, "--json"]).1["result"].clone()
    }

    /// Every event of a subagent, via `herd logs --json` (one array).
    pub fn events(&self, id: &str) -> Vec<Value> {
        let out = self.run(&["logs", id, "--json"]);
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("logs --json is not one array ({e}): {}", String::from_utf8_lossy(&out.stdout))
        })
    }

    /// Every audit row of a subagent, via `herd audit --json` (one array).
    pub fn audit(&self, id: &str) -> Vec<Value> {
        let out = self.run(&["audit", "--subagent", id, "--json"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("audit --json is not one array ({e}): {}", String::from_utf8_lossy(&out.stdout))
        })
    }

    pub fn kinds(&self, id: &str) -> Vec<String> {
        self.events(id).iter().map(|e| e["kind"].as_str().unwrap().to_owned()).collect()
    }
}

/// The input of a Bash call the mock's model makes.
pub fn bash(cmd: &str) -> Value {
    json!({"command": cmd, "description": "test step"})
}

/// Script `scenario`: one Bash call `touch PATH`, then a reply with its result.
pub fn touch_then_done(scenario: &str, path: &Path) {
    MockServer::shared().script(
        scenario,
        Script::new()
            .tool_use("Bash", bash(&format!("touch {}", path.display())))
            .text("done: {{last_tool_result}}"),
    );
}

/// The `id` of the first row `herd ARGS` prints as a JSON array, once there is one.
pub fn first_id(w: &World, args: &[&str], what: &str) -> String {
    let mut id = None;
    assert!(
        wait_until(Duration::from_secs(20), || {
            let (_, v) = w.json(args);
            id = v
                .as_array()
                .and_then(|a| a.first())
                .and_then(|r| r["id"].as_str())
                .map(str::to_owned);
            id.is_some()
        }),
        "no {what}"
    );
    id.unwrap()
}

/// The id of the first permission request waiting for a person, once there is one.
pub fn pending_request(w: &World) -> String {
    first_id(w, &["approve", "--json"], "pending permission request")
}

/// Every world's runs are checked as it ends: herd's own settings make no agent CLI warn of
/// them (`Permission ask rule "MultiEdit" matches no known tool`) in any run's stderr log.
impl Drop for World {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        for dir in [self.state.join("transcripts"), self.work.join(".herd/transcripts")] {
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.ends_with(".stderr.log") {
                    let text = std::fs::read_to_string(e.path()).unwrap_or_default();
                    assert!(!text.contains("matches no known tool"), "{name}: {text}");
                }
            }
        }
    }
}

/// Processes whose command line contains `needle`, as (pid, cmdline).
pub fn procs_with_cmdline(needle: &str) -> Vec<(u32, String)> {
    let me = std::process::id();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me || is_zombie(pid) {
            continue;
        }
        if let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) {
            let cmd = String::from_utf8_lossy(&raw).replace('\0', " ");
            if cmd.contains(needle) {
                out.push((pid, cmd));
            }
        }
    }
    out
}

/// Processes whose working directory is `dir`.
pub fn procs_in(dir: &Path) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if is_zombie(pid) {
            continue;
        }
        if std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|c| c == dir) {
            let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            out.push((pid, String::from_utf8_lossy(&raw).replace('\0', " ")));
        }
    }
    out
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| s[i + 1..].trim_start().starts_with('Z')))
        .unwrap_or(true)
}

/// Send SIGINT to a running `herd` and wait for it; returns its exit code and JSON stdout.
pub fn interrupt(child: std::process::Child) -> (Option<i32>, Value) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code(), v)
}

/// Poll `f` until it returns true or `limit` passes; returns whether it did.
pub fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}

/// `git ARGS` in `dir` with a test identity; stdout, asserting success.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Make the world's work dir a repository with one commit (`base.txt` = "line").
pub fn init_repo(w: &World) -> String {
    git(&w.work, &["init", "-q", "-b", "main"]);
    std::fs::write(w.work.join("base.txt"), "line\n").unwrap();
    std::fs::write(w.work.join(".gitignore"), ".env\n").unwrap();
    std::fs::write(w.work.join(".env"), "SECRET=1\n").unwrap();
    std::fs::write(w.work.join(".worktreeinclude"), ".env\n").unwrap();
    git(&w.work, &["add", "base.txt", ".gitignore", ".worktreeinclude"]);
    git(&w.work, &["commit", "-qm", "init"]);
    git(&w.work, &["rev-parse", "HEAD"]).trim().to_owned()
}
