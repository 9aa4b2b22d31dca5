//! The sandbox end to end, as an attacker: the real claude (driven by the mock) and the command
//! backend try to write herd's config and database, the person's start-up files and a
//! repository's settings, and to move git refs; each attack also runs with `sandbox: off` (or
//! with the project trusting its settings) to show the test would see it succeed.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::{World, git, init_repo, procs_with_cmdline, wait_until};
use herd_testkit::{MockServer, Script};
use serde_json::{Value, json};

macro_rules! world_or_skip {
    () => {{
        let w = World::new();
        if w.claude.is_none() {
            return;
        }
        w
    }};
}

fn config(w: &World, yaml: &str) {
    std::fs::create_dir_all(w.work.join(".herd")).unwrap();
    std::fs::write(w.work.join(".herd/config.yml"), yaml).unwrap();
}

fn bash(scenario: &str, cmd: &str) {
    MockServer::shared().script(
        scenario,
        Script::new()
            .tool_use("Bash", json!({"command": cmd, "description": "attack"}))
            .text("done: {{last_tool_result}}"),
    );
}

/// The content of the run's tool results, joined.
fn tool_output(w: &World, id: &str) -> String {
    tool_output_in(w, &w.state, id)
}

fn tool_output_in(w: &World, state: &Path, id: &str) -> String {
    let out = w.herd(&["logs", id, "--json"]).env("HERD_STATE_DIR", state).output().unwrap();
    serde_json::from_slice::<Vec<Value>>(&out.stdout)
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "tool_result")
        .map(|e| e["content"].as_str().unwrap_or_default().to_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

/// `herd audit --subagent ID --json` rows, with the state dir given.
fn audit(w: &World, state: &Path, id: &str) -> Vec<Value> {
    let out = w
        .herd(&["audit", "--subagent", id, "--json"])
        .env("HERD_STATE_DIR", state)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The run's stored contract (the `spec` column).
fn contract(state: &Path, id: &str) -> Value {
    let store = herd_store::Store::open(herd_store::StatePaths::new(state.to_path_buf())).unwrap();
    store.get(&id.parse().unwrap()).unwrap().unwrap().spec
}

/// A Bash call writing `files` (opened with perl's `mode`, `>` or `>>`) that the gate cannot
/// see as writes: the paths are inside perl's code. Under `Bash(perl *)` only the sandbox stands
/// between it and the files (a redirection or a path argument would go to a person).
fn perl_writes(scenario: &str, mode: &str, files: &[&str], content: &str) {
    let list = files.iter().map(|f| format!("\"{f}\"")).collect::<Vec<_>>().join(", ");
    bash(
        scenario,
        &format!(
            "perl -e 'for ({list}) {{ open(F, \"{mode}\", $_) ? print F \"{content}\" : warn \"$_: $!\\n\" }}'"
        ),
    );
}

const PERL: [&str; 2] = ["--allow", "Bash(perl *)"];

#[test]
fn an_agent_cannot_write_herds_config_where_the_gate_cannot_see_the_write() {
    let w = world_or_skip!();
    let cfg = "permissions:\n  deny: [WebFetch]\n";
    config(&w, cfg);
    let target = w.work.join(".herd/config.yml");
    perl_writes("sbx_cfg", ">", &[".herd/config.yml"], "permissions: {allow: [Bash]}\\n");
    let (code, v) = w.json(&[&["task", "SCENARIO=sbx_cfg go", "--json"][..], &PERL].concat());
    assert_eq!(code, 0, "{v}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), cfg, "the config was rewritten");
    let out = tool_output(&w, v["id"].as_str().unwrap());
    assert!(out.contains("Read-only file system"), "{out}");
    // The placeholders the run needed are gone again; the real .herd stays.
    for p in [".claude", ".mcp.json", ".gemini", ".codex"] {
        assert!(!w.work.join(p).exists(), "{p} left behind");
    }
    assert!(w.work.join(".herd/config.yml").is_file());
    let spec = contract(&w.state, v["id"].as_str().unwrap());
    assert_eq!(spec["sandbox"], json!({"mode": "auto", "mechanism": "bwrap"}), "{spec}");

    // The same call with the sandbox off rewrites it: the check above can fail.
    config(&w, "sandbox: off\n");
    let (code, v) = w.json(&[&["task", "SCENARIO=sbx_cfg go", "--json"][..], &PERL].concat());
    assert_eq!(code, 0, "{v}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "permissions: {allow: [Bash]}\n");
    let id = v["id"].as_str().unwrap();
    assert!(w.kinds(id).contains(&"unconfined".to_owned()), "{:?}", w.kinds(id));
    assert_eq!(contract(&w.state, id)["sandbox"]["mechanism"], Value::Null);
}

#[test]
fn an_agent_cannot_destroy_herds_database_and_audit_log() {
    let w = world_or_skip!();
    let state = w.work.join(".herd");
    perl_writes("sbx_db", ">", &[".herd/herd.db"], "garbage");
    let task = |w: &World, state: &Path| {
        let out = w
            .herd(&[&["task", "SCENARIO=sbx_db go", "--json"][..], &PERL].concat())
            .env("HERD_STATE_DIR", state)
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        (out, v)
    };
    let (out, v) = task(&w, &state);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let id = v["id"].as_str().unwrap();
    let ps = w.herd(&["ps", "--all", "--json"]).env("HERD_STATE_DIR", &state).output().unwrap();
    assert!(ps.status.success(), "{}", String::from_utf8_lossy(&ps.stderr));
    let rows: Value = serde_json::from_slice(&ps.stdout).unwrap();
    assert_eq!(rows[0]["id"], id);
    let rows = audit(&w, &state, id);
    let types: Vec<&str> = rows.iter().map(|r| r["event_type"].as_str().unwrap()).collect();
    assert!(types.contains(&"subagent_spawn") && types.contains(&"subagent_complete"), "{types:?}");
    assert!(rows.iter().any(|r| r["decision"] == "allow"), "the perl was allowed: {rows:?}");
    let out = tool_output_in(&w, &state, id);
    assert!(out.contains("Read-only file system"), "{out}");
    let header = std::fs::read(state.join("herd.db")).unwrap();
    assert!(header.starts_with(b"SQLite format 3"));

    // Without the sandbox the same allowed call overwrites the database under herd.
    let control = World::new();
    std::fs::create_dir_all(control.work.join(".herd")).unwrap();
    std::fs::write(control.work.join(".herd/config.yml"), "sandbox: off\n").unwrap();
    let state = control.work.join(".herd");
    let (out, v) = task(&control, &state);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let id = v["id"].as_str().unwrap();
    let rows = audit(&control, &state, id);
    assert!(rows.iter().any(|r| r["decision"] == "allow"), "the perl was allowed: {rows:?}");
    let out = tool_output_in(&control, &state, id);
    assert!(!out.contains("Read-only"), "{out}");
}

#[test]
fn an_agent_cannot_plant_a_payload_in_the_shell_start_up_files() {
    let w = world_or_skip!();
    let files = ["$ENV{HOME}/.bashrc", "$ENV{HOME}/.profile"];
    perl_writes("sbx_rc", ">>", &files, "x\\n");
    // A missing ~/.bashrc is not created, an existing ~/.profile not changed.
    std::fs::write(w.home.join(".profile"), "orig\n").unwrap();
    let (code, v) = w.json(&[&["task", "SCENARIO=sbx_rc go", "--json"][..], &PERL].concat());
    assert_eq!(code, 0, "{v}");
    assert!(!w.home.join(".bashrc").exists(), "~/.bashrc was created");
    assert_eq!(std::fs::read_to_string(w.home.join(".profile")).unwrap(), "orig\n");
    assert!(tool_output(&w, v["id"].as_str().unwrap()).contains("Read-only file system"));

    config(&w, "sandbox: off\n");
    let (code, v) = w.json(&[&["task", "SCENARIO=sbx_rc go", "--json"][..], &PERL].concat());
    assert_eq!(code, 0, "{v}");
    assert_eq!(std::fs::read_to_string(w.home.join(".bashrc")).unwrap(), "x\n");
    assert_eq!(std::fs::read_to_string(w.home.join(".profile")).unwrap(), "orig\nx\n");
}

#[test]
fn a_repositorys_own_claude_hooks_do_not_run_unless_the_project_trusts_them() {
    let w = world_or_skip!();
    init_repo(&w);
    let marker = w.work.join("hook-ran");
    let settings = json!({"hooks": {"SessionStart": [{"hooks": [
        {"type": "command", "command": format!("touch {}", marker.display())}
    ]}]}});
    std::fs::create_dir_all(w.work.join(".claude")).unwrap();
    std::fs::write(w.work.join(".claude/settings.json"), settings.to_string()).unwrap();
    git(&w.work, &["add", ".claude/settings.json"]);
    git(&w.work, &["commit", "-qm", "settings"]);
    MockServer::shared().script("sbx_hook", Script::new().text("no tools"));
    // The run is tool-free and every call would be denied anyway: only a hook could touch it.
    let (code, v) = w.json(&["task", "SCENARIO=sbx_hook go", "--json"]);
    assert_eq!(code, 0, "{v}");
    assert!(!marker.exists(), "the repository's SessionStart hook ran");

    config(&w, "trust_project_settings: true\n");
    let (code, v) = w.json(&["task", "SCENARIO=sbx_hook go", "--json"]);
    assert_eq!(code, 0, "{v}");
    assert!(marker.exists(), "a trusted project's hook did not run: the check cannot fail");
}

/// An isolated `herd task` whose one Bash call is `cmd`; returns the JSON report.
fn isolated_claude(w: &World, scenario: &str, cmd: &str) -> Value {
    bash(scenario, cmd);
    let prompt = format!("SCENARIO={scenario} go");
    let (code, v) =
        w.json(&["task", &prompt, "--allow", "Bash", "--workspace", "isolated", "--json"]);
    assert_eq!(code, 1, "{v}");
    v
}

const COMMIT: &str = "git -c user.name=a -c user.email=a@a commit -qm";

/// The run failed `ref_escape` naming `refs`, with its event and audit entry.
fn assert_escaped(w: &World, v: &Value, refs: &[&str]) {
    assert_eq!(v["status"], "failed", "{v}");
    let reason = v["failure_reason"].as_str().unwrap();
    assert!(reason.starts_with("ref_escape("), "{reason}");
    for r in refs {
        assert!(reason.contains(r), "{reason} lacks {r}");
    }
    let id = v["id"].as_str().unwrap();
    let events = w.events(id);
    let esc = events.iter().find(|e| e["kind"] == "ref_escape").expect("a ref_escape event");
    assert!(
        esc["changes"].as_array().is_some_and(|c| c.iter().all(|c| c["error"].is_null())),
        "{esc}"
    );
    let rows = audit(w, &w.state, id);
    assert!(rows.iter().any(|r| r["event_type"] == "ref_escape" && r["severity"] == "error"));
    // Nothing of it waits for a merge.
    assert!(!events.iter().any(|e| e["kind"] == "subagent_waiting_for_merge"));
}

#[test]
fn an_isolated_agent_that_commits_on_main_fails_and_main_stays() {
    let w = world_or_skip!();
    let head = init_repo(&w);
    let cmd = format!(
        "git checkout -q --ignore-other-worktrees main && echo evil > evil.txt && git add evil.txt && {COMMIT} evil"
    );
    let v = isolated_claude(&w, "sbx_main", &cmd);
    assert_escaped(&w, &v, &["refs/heads/main", "HEAD"]);
    assert_eq!(git(&w.work, &["rev-parse", "main"]).trim(), head, "main moved");
    let id = v["id"].as_str().unwrap();
    let kept = format!("refs/herd/escaped/{id}/heads/main");
    assert_eq!(git(&w.work, &["log", "-1", "--format=%s", &kept]).trim(), "evil");
    // Its worktree is on its own branch again.
    let wt = w.events(id).iter().find(|e| e["kind"] == "worktree_created").unwrap()["path"]
        .as_str()
        .unwrap()
        .to_owned();
    let branch = git(Path::new(&wt), &["symbolic-ref", "HEAD"]);
    assert_eq!(branch.trim(), format!("refs/heads/herd/{id}/task"));
    assert_eq!(git(&w.work, &["status", "--porcelain"]), "");
}

#[test]
fn a_rogue_branch_is_removed_and_its_commits_kept() {
    let w = world_or_skip!();
    let head = init_repo(&w);
    let cmd =
        format!("git checkout -q -b rogue && echo r > r.txt && git add r.txt && {COMMIT} rogue");
    let v = isolated_claude(&w, "sbx_rogue", &cmd);
    assert_escaped(&w, &v, &["refs/heads/rogue", "HEAD"]);
    let id = v["id"].as_str().unwrap();
    let branches = git(&w.work, &["branch", "--list", "rogue"]);
    assert_eq!(branches, "", "rogue is still there");
    let kept = format!("refs/herd/escaped/{id}/heads/rogue");
    assert_eq!(git(&w.work, &["log", "-1", "--format=%s", &kept]).trim(), "rogue");
    assert_eq!(git(&w.work, &["rev-parse", "main"]).trim(), head);
}

#[test]
fn a_command_agent_moving_main_from_its_worktree_fails_too() {
    let w = World::new();
    let head = init_repo(&w);
    let cmd = format!(
        "git checkout -q --ignore-other-worktrees main && echo c > c.txt && git add c.txt && {COMMIT} cmd"
    );
    let (code, v) = w.json(&[
        "task",
        "x",
        "--cli",
        "command",
        "--workspace",
        "isolated",
        "--json",
        "--",
        "sh",
        "-c",
        &cmd,
    ]);
    assert_eq!(code, 1, "{v}");
    assert_escaped(&w, &v, &["refs/heads/main"]);
    assert_eq!(git(&w.work, &["rev-parse", "main"]).trim(), head);

    // Committing on its own branch is what it is there for.
    let own = format!("echo ok > ok.txt && git add ok.txt && {COMMIT} ok");
    let (code, v) = w.json(&[
        "task",
        "x",
        "--cli",
        "command",
        "--workspace",
        "isolated",
        "--json",
        "--",
        "sh",
        "-c",
        &own,
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["status"], "completed", "{v}");
}

#[test]
fn what_runs_code_in_git_and_the_clis_stays_read_only_in_a_worktree() {
    let w = World::new();
    init_repo(&w);
    let script = r#"common=$(git rev-parse --git-common-dir)
for f in .git .herd/x .claude/settings.json .mcp.json .gemini/settings.json .codex/config.toml \
         "$common/config" "$common/hooks/pre-commit" "$common/HEAD" "$HOME/.bashrc" "$HOME/.claude.json"; do
  (echo x > "$f") 2>/dev/null && echo "WROTE $f"
done
echo x > mine.txt && echo "own file ok"
echo x > /tmp/scratch && echo "tmp ok"
mkdir -p "$HOME/.claude/projects" 2>/dev/null; echo x > "$HOME/.claude/state" 2>/dev/null && echo "claude state ok"
true"#;
    let (code, v) = w.json(&[
        "task",
        "x",
        "--cli",
        "command",
        "--workspace",
        "isolated",
        "--json",
        "--",
        "sh",
        "-c",
        script,
    ]);
    assert_eq!(code, 0, "{v}");
    let out = v["result"].as_str().unwrap();
    assert!(!out.contains("WROTE"), "{out}");
    assert!(out.contains("own file ok") && out.contains("tmp ok"), "{out}");
    // The command backend's CLI state is none: HOME is read-only to it.
    assert!(!out.contains("claude state ok"), "{out}");
    assert!(!w.home.join(".bashrc").exists());
}

#[test]
fn a_graceful_stop_reaches_the_agent_and_a_signal_stays_a_signal() {
    let w = World::new();
    // SIGINT goes to the agent's session inside the sandbox (not to bwrap, which would die).
    let (code, v) = w.json(&[
        "task",
        "x",
        "--cli",
        "command",
        "--timeout",
        "1s",
        "--json",
        "--",
        "sh",
        "-c",
        "trap 'echo got-int; exit 0' INT; echo started; sleep 30 & wait",
    ]);
    assert_eq!(code, 3, "{v}");
    assert!(v["result"].as_str().unwrap().contains("got-int"), "{v}");
    // The agent's own end is recorded, not bwrap's exit code for it.
    let (code, v) =
        w.json(&["task", "x", "--cli", "command", "--json", "--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["failure_reason"], "signal(15)", "{v}");
}

#[test]
fn a_leftover_goes_when_its_run_ends_while_another_run_goes_on() {
    // Seen from outside: each sandbox has its own pid namespace, so a run cannot look.
    let w = World::new();
    let plan = r#"
name: sbx-leftovers
strategy: parallel
defaults: {cli: command, prompt: go}
steps:
  - {id: a, command: [sh, -c, "(env -i /bin/sleep 309.3 &); setsid /bin/sleep 309.3 & sleep 0.5; echo left"]}
  - {id: b, command: [sleep, "4"]}
"#;
    std::fs::write(w.work.join("l.yml"), plan).unwrap();
    let child = w
        .herd(&["run", "l.yml", "--json"])
        .env("HERD_GUARDS", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let sleeps = || {
        let all = procs_with_cmdline("sleep 309.3");
        all.into_iter().filter(|(_, c)| c.starts_with("/bin/sleep")).count()
    };
    assert!(wait_until(Duration::from_secs(10), || sleeps() == 2));
    assert!(wait_until(Duration::from_secs(3), || sleeps() == 0), "left behind");
    assert!(child_running(&child), "b ended first: the check proves nothing");
    let out = child.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "completed", "{v}");
    let a = v["steps"].as_array().unwrap().iter().find(|s| s["id"] == "a").unwrap();
    let events = w.events(a["subagent_id"].as_str().unwrap());
    let left = events.iter().find(|e| e["kind"] == "leftovers_killed").expect("leftovers counted");
    assert_eq!(left["count"], 2, "{left}");
}

fn child_running(c: &std::process::Child) -> bool {
    Path::new(&format!("/proc/{}", c.id())).exists()
        && !std::fs::read_to_string(format!("/proc/{}/stat", c.id()))
            .unwrap_or_default()
            .contains(") Z")
}

#[test]
fn without_a_sandbox_auto_says_so_and_required_refuses() {
    // No bwrap on PATH (the program is named by its path).
    let w = World::new();
    let run = |w: &World, extra: &[(&str, &str)]| {
        let mut c = w.herd(&["task", "x", "--cli", "command", "--json", "--", "/bin/echo", "hi"]);
        c.env("PATH", "/nonexistent");
        for (k, v) in extra {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    let out = run(&w, &[]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("without a filesystem sandbox").count(), 1, "{err}");
    assert!(err.contains("bubblewrap"), "{err}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = v["id"].as_str().unwrap();
    let ev = w.events(id).into_iter().find(|e| e["kind"] == "unconfined").expect("event");
    assert!(ev["reason"].as_str().unwrap().contains("bwrap"), "{ev}");
    let spec = contract(&w.state, id);
    assert_eq!(spec["sandbox"]["mode"], "auto");
    assert_eq!(spec["sandbox"]["mechanism"], Value::Null);
    assert!(spec["sandbox"]["reason"].as_str().unwrap().contains("bwrap"), "{spec}");

    // Required (by config, or by HERD_SANDBOX) refuses before anything runs; the variable
    // cannot switch it off.
    let refused = |out: std::process::Output| {
        assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stdout));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("sandbox: required") && err.contains("apt-get install bubblewrap"),
            "{err}"
        );
    };
    refused(run(&w, &[("HERD_SANDBOX", "required")]));
    config(&w, "sandbox: required\n");
    refused(run(&w, &[]));
    refused(run(&w, &[("HERD_SANDBOX", "off")]));
    std::fs::write(
        w.work.join("p.yml"),
        "steps: [{id: a, cli: command, command: [/bin/true], prompt: go}]\n",
    )
    .unwrap();
    refused(w.herd(&["run", "p.yml", "--json"]).env("PATH", "/nonexistent").output().unwrap());
    let (_, ps) = w.json(&["ps", "--all", "--json"]);
    assert_eq!(ps.as_array().unwrap().len(), 1, "a refused run left a record: {ps}");
}

#[test]
fn doctor_says_which_sandbox_and_why_not() {
    let w = World::new();
    let (_, v) = w.json(&["doctor", "--json"]);
    assert_eq!(v["sandbox"]["available"], true, "{v}");
    assert_eq!(v["sandbox"]["mechanism"], "bwrap", "{v}");
    assert_eq!(v["sandbox"]["mode"], "auto", "{v}");
    let out = w.herd(&["doctor", "--json"]).env("PATH", "/nonexistent").output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["sandbox"]["available"], false, "{v}");
    assert!(v["sandbox"]["problem"].as_str().unwrap().contains("bubblewrap"), "{v}");
    let text = String::from_utf8_lossy(&w.run(&["doctor"]).stdout).into_owned();
    assert!(text.contains("sandbox: bwrap"), "{text}");
}

#[test]
fn the_init_refuses_to_run_unless_it_is_pid_1() {
    // In a pid namespace of its own (bwrap's reaper is pid 1 there), so that even a broken check
    // could not reach past it: the init's last act is `kill -1`.
    let out = std::process::Command::new("bwrap")
        .args(["--die-with-parent", "--unshare-pid", "--ro-bind", "/", "/", "--dev", "/dev"])
        .args(["--proc", "/proc", env!("CARGO_BIN_EXE_herd"), "__sandbox-init", "/bin/true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("only as pid 1"));
}

#[test]
fn a_person_committing_in_their_checkout_during_an_isolated_run_is_not_an_escape() {
    let w = World::new();
    init_repo(&w);
    let child = w
        .herd(&[
            "task",
            "x",
            "--cli",
            "command",
            "--workspace",
            "isolated",
            "--json",
            "--",
            "sh",
            "-c",
            "sleep 1.71; echo ok > ok.txt",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = || procs_with_cmdline("sleep 1.71").iter().any(|(_, c)| c.starts_with("sleep"));
    assert!(wait_until(Duration::from_secs(10), started));
    std::fs::write(w.work.join("mine.txt"), "mine\n").unwrap();
    git(&w.work, &["add", "mine.txt"]);
    git(&w.work, &["commit", "-qm", "mine"]);
    let mine = git(&w.work, &["rev-parse", "HEAD"]);
    let out = child.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(git(&w.work, &["rev-parse", "main"]), mine, "the person's commit was undone");
}

#[test]
fn a_shared_run_may_commit_on_the_checked_out_branch_but_not_branch_off() {
    let w = World::new();
    let head = init_repo(&w);
    let task =
        |cmd: &str| w.json(&["task", "x", "--cli", "command", "--json", "--", "sh", "-c", cmd]);
    let (code, v) = task(&format!("echo a > a.txt && git add a.txt && {COMMIT} a"));
    assert_eq!(code, 0, "{v}");
    let a = git(&w.work, &["rev-parse", "main"]).trim().to_owned();
    assert_ne!(a, head);
    let (code, v) =
        task(&format!("git checkout -q -b side && echo s > s.txt && git add s.txt && {COMMIT} s"));
    assert_eq!(code, 1, "{v}");
    assert_escaped(&w, &v, &["refs/heads/side", "HEAD"]);
    assert_eq!(git(&w.work, &["symbolic-ref", "--short", "HEAD"]).trim(), "main");
    assert_eq!(git(&w.work, &["rev-parse", "main"]).trim(), a);
    assert_eq!(git(&w.work, &["branch", "--list", "side"]), "");
    let id = v["id"].as_str().unwrap();
    let kept = format!("refs/herd/escaped/{id}/heads/side");
    assert_eq!(git(&w.work, &["log", "-1", "--format=%s", &kept]).trim(), "s");
}

#[test]
fn hooks_an_agent_could_rewrite_do_not_run_in_herds_own_commits() {
    // husky's way: core.hooksPath inside the working tree. The agent rewrites the hook in its
    // worktree; herd's auto-commit and merge run outside any sandbox, so they use .git/hooks.
    let w = World::new();
    init_repo(&w);
    let evil = w.state.parent().unwrap().join("evil-hook-ran");
    let own = w.state.parent().unwrap().join("own-hook-ran");
    std::fs::create_dir_all(w.work.join(".githooks")).unwrap();
    let exe = |p: &Path, body: &str| {
        std::fs::write(p, body).unwrap();
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    };
    exe(&w.work.join(".githooks/pre-commit"), "#!/bin/sh\nexit 0\n");
    git(&w.work, &["add", ".githooks/pre-commit"]);
    git(&w.work, &["commit", "-qm", "hooks"]);
    git(&w.work, &["config", "core.hooksPath", ".githooks"]);
    exe(&w.work.join(".git/hooks/post-commit"), &format!("#!/bin/sh\ntouch {}\n", own.display()));
    let cmd = format!(
        "printf '#!/bin/sh\\ntouch {}\\n' > .githooks/pre-commit && echo w > work.txt",
        evil.display()
    );
    let (code, v) = w.json(&[
        "task",
        "x",
        "--cli",
        "command",
        "--workspace",
        "isolated",
        "--json",
        "--",
        "sh",
        "-c",
        &cmd,
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["status"], "completed", "{v}");
    assert!(!evil.exists(), "herd ran a hook the agent wrote");
    assert!(own.exists(), "the repository's own hooks stopped running");
    // The rewritten hook is live: a plain commit in that worktree runs it.
    let id = v["id"].as_str().unwrap();
    let wt = w.events(id).iter().find(|e| e["kind"] == "worktree_created").unwrap()["path"]
        .as_str()
        .unwrap()
        .to_owned();
    git(Path::new(&wt), &["commit", "-q", "--allow-empty", "-m", "by hand"]);
    assert!(evil.exists(), "the check cannot fail");
}
