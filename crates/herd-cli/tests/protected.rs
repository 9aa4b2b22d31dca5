//! Protected paths end to end, with the real claude and no sandbox (the gate alone): herd's
//! config and database, the CLIs' project settings, git's config and hooks, shell start-up files
//! are never written on the strength of a rule or auto-approve — only when a person says yes.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{World, init_repo, wait_until};
use herd_testkit::{MockServer, Script};
use serde_json::{Value, json};

const CONFIG: &str = "sandbox: off\npermissions:\n  deny: [WebFetch]\n";

/// A repository whose herd config switches the sandbox off.
fn world() -> Option<World> {
    let w = World::new();
    w.claude.as_ref()?;
    init_repo(&w);
    std::fs::create_dir_all(w.work.join(".herd")).unwrap();
    std::fs::write(w.work.join(".herd/config.yml"), CONFIG).unwrap();
    std::fs::write(w.home.join(".profile"), "orig\n").unwrap();
    Some(w)
}

fn bash(cmd: &str) -> Value {
    json!({"command": cmd, "description": "attack"})
}

/// Every attack of one run, then a harmless write the rules allow.
fn attacks(w: &World, scenario: &str) {
    let state_db = w.state.join("herd.db").display().to_string();
    // claude writes an existing file only after reading it.
    let mut s = Script::new()
        .tool_use("Read", json!({"file_path": w.work.join(".herd/config.yml")}))
        .tool_use(
            "Write",
            json!({"file_path": w.work.join(".herd/config.yml"), "content": "permissions: {allow: [Bash]}\n"}),
        )
        .tool_use(
            "Write",
            json!({"file_path": w.work.join(".claude/settings.json"), "content": "{\"hooks\": {}}"}),
        );
    for cmd in [
        format!("echo garbage > {state_db}"),
        "echo x >> ~/.bashrc".to_owned(),
        "echo x | tee -a ~/.profile".to_owned(),
        "git config core.hooksPath /tmp/evil-hooks".to_owned(),
        "ln -s /tmp/evil .git/hooks/pre-commit".to_owned(),
        "cd .herd && echo '{allow: [Bash]}' > config.yml".to_owned(),
        "printf '{}' > .mcp.json".to_owned(),
        "echo ok > fine.txt".to_owned(),
    ] {
        s = s.tool_use("Bash", bash(&cmd));
    }
    MockServer::shared().script(scenario, s.text("done: {{last_tool_result}}"));
}

fn assert_nothing_written(w: &World) {
    assert_eq!(std::fs::read_to_string(w.work.join(".herd/config.yml")).unwrap(), CONFIG);
    for p in [".claude", ".mcp.json", ".git/hooks/pre-commit"] {
        assert!(!w.work.join(p).exists(), "{p} was written");
    }
    assert!(!w.home.join(".bashrc").exists(), "~/.bashrc was written");
    assert_eq!(std::fs::read_to_string(w.home.join(".profile")).unwrap(), "orig\n");
    let hooks = std::process::Command::new("git")
        .args(["config", "core.hooksPath"])
        .current_dir(&w.work)
        .output()
        .unwrap();
    assert!(hooks.stdout.is_empty(), "git's config was changed");
    let header = std::fs::read(w.state.join("herd.db")).unwrap();
    assert!(header.starts_with(b"SQLite format 3"), "herd's database was overwritten");
}

/// Each protected write was asked about (nobody can answer a script) and denied, which the
/// run's state says; the harmless one ran.
fn assert_asked_and_denied(w: &World, code: i32, v: &Value) {
    assert_eq!((code, &v["state"]), (4, &json!("completed_with_denials")), "{v}");
    assert_eq!(v["unanswered_denials"], 9, "{v}");
    let rows = w.audit(v["id"].as_str().unwrap());
    let asked: Vec<&Value> =
        rows.iter().filter(|r| r["event_type"] == "permission_request").collect();
    assert_eq!(asked.len(), 9, "{rows:#?}");
    for r in &asked {
        let why = r["decided_by"].as_str().unwrap();
        assert!(why.contains("herd protects"), "{why}");
    }
    let denied = rows.iter().filter(|r| r["decision"] == "deny").count();
    assert_eq!(denied, 9, "{rows:#?}");
    assert_eq!(std::fs::read_to_string(w.work.join("fine.txt")).unwrap(), "ok\n");
}

#[test]
fn allow_rules_do_not_reach_protected_paths() {
    let Some(w) = world() else { return };
    attacks(&w, "prot_allow");
    let args = ["--allow", "Write", "--allow", "Bash", "--permission-timeout", "1s", "--json"];
    let (code, v) = w.json(&[&["task", "SCENARIO=prot_allow go"][..], &args].concat());
    assert_nothing_written(&w);
    assert_asked_and_denied(&w, code, &v);
}

#[test]
fn auto_approve_does_not_reach_protected_paths() {
    let Some(w) = world() else { return };
    attacks(&w, "prot_auto");
    let args =
        ["--tools", "Bash,Write,Read", "--auto-approve", "--permission-timeout", "1s", "--json"];
    let (code, v) = w.json(&[&["task", "SCENARIO=prot_auto go"][..], &args].concat());
    assert_nothing_written(&w);
    assert_asked_and_denied(&w, code, &v);
}

#[test]
fn a_person_may_let_an_agent_write_a_protected_path() {
    let Some(w) = world() else { return };
    let target = w.work.join(".claude/settings.json");
    MockServer::shared().script(
        "prot_yes",
        Script::new()
            .tool_use("Bash", bash("mkdir -p .claude && echo '{}' > .claude/settings.json"))
            .text("done: {{last_tool_result}}"),
    );
    let child = w
        .herd(&["task", "SCENARIO=prot_yes go", "--allow", "Bash", "--json", "--wait-for-approval"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut request = None;
    assert!(
        wait_until(Duration::from_secs(30), || {
            let (_, v) = w.json(&["approve", "--json"]);
            request = v[0]["id"].as_str().map(str::to_owned);
            request.is_some()
        }),
        "the write was not asked about"
    );
    assert!(!target.exists(), "written before anyone said yes");
    let out = w.run(&["approve", request.as_deref().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "{}\n");
}
