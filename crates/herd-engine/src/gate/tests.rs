//! The gate's pipeline on a real store, without an agent: rules, inherited layers, auto-approve
//! windows and grants under a paused clock, and what the audit log keeps.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use herd_backends::{PermissionAnswer, RunSpec};
use herd_core::SubagentId;
use herd_core::permission::{AutoApproveConfig, GrantKind, Grants, Policy, Rule, Secret};
use herd_store::{AuditFilter, StatePaths, Store, Writer};
use serde_json::json;

use super::*;
use crate::gate::canonical;

struct Fixture {
    _dir: tempfile::TempDir,
    store: Arc<Mutex<Store>>,
    writer: Writer,
    id: SubagentId,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let paths = StatePaths::new(dir.path().join(".herd"));
    let mut store = Store::open(paths.clone()).unwrap();
    store.create_session("s1", "test", dir.path()).unwrap();
    let id = SubagentId::generate();
    store
        .create_subagent(&herd_store::NewSubagent {
            id: id.clone(),
            parent_session_id: "s1".into(),
            name: "t".into(),
            cli: "claude".into(),
            prompt: "p".into(),
            model: None,
            working_directory: "/tmp".into(),
            max_turns: None,
            timeout_ms: None,
            spec: json!({}),
            owner_pid: std::process::id(),
            owner_start_time: None,
        })
        .unwrap();
    let writer = Writer::start(&paths).unwrap();
    Fixture { _dir: dir, store: Arc::new(Mutex::new(store)), writer, id }
}

fn gate(f: &Fixture, perms: Permissions, inherited: &[Policy], spec: &RunSpec) -> Arc<Gate> {
    protecting_nothing(Gate::new(
        perms,
        inherited,
        spec,
        f.writer.handle(),
        f.store.clone(),
        f.id.clone(),
        HookEnv::default(),
        std::env::temp_dir(),
        Default::default(),
    ))
}

/// A gate for testing rules: no path is protected.
fn protecting_nothing(g: Gate) -> Arc<Gate> {
    g.protect(crate::protected::Protected::default());
    Arc::new(g)
}

fn request(id: String, tool: &str, input: serde_json::Value) -> ToolRequest {
    ToolRequest {
        request_id: id,
        tool: herd_backends::ToolName::new(None, tool),
        input,
        tool_use_id: None,
        agent_id: None,
        title: None,
        options: Vec::new(),
    }
}

fn bash(cmd: &str) -> ToolRequest {
    request(format!("req-{cmd}"), "Bash", json!({"command": cmd}))
}

async fn decide(g: &Arc<Gate>, req: ToolRequest) -> bool {
    match g.clone().decide(req).await.1 {
        PermissionAnswer::Allow { input } => {
            assert!(input.is_object(), "allow always carries the input");
            true
        }
        PermissionAnswer::Deny { message } => {
            eprintln!("denied: {message}");
            false
        }
    }
}

#[tokio::test(start_paused = true)]
async fn rules_layers_and_auto_approve_windows() {
    let f = fixture();
    let spec = RunSpec {
        tools: Some(vec!["Bash".into()]),
        allow: vec!["Bash(echo *)".into()],
        deny: vec!["Bash(rm *)".into()],
        ..RunSpec::default()
    };
    let cfg = AutoApproveConfig { bash_per_minute: 1, ..AutoApproveConfig::default() };
    let perms = Permissions { auto_approve: Some(cfg), ..Permissions::default() };
    // The parent herd denies curl: its child can only narrow.
    // (A parent that is silent about a call would make it undecided here: children narrow.)
    let parent = Policy {
        allow: vec![Rule::parse("Bash").unwrap()],
        deny: vec![Rule::parse("Bash(curl *)").unwrap()],
        ..Policy::default()
    };
    let g = gate(&f, perms, &[parent], &spec);

    assert!(decide(&g, bash("echo hi")).await, "allow rule");
    assert!(!decide(&g, bash("rm -rf /")).await, "deny rule");
    assert!(!decide(&g, bash("curl example.com")).await, "the parent's deny holds");
    assert!(decide(&g, bash("touch a")).await, "auto-approved");
    assert!(!decide(&g, bash("touch b")).await, "over bash_per_minute");
    tokio::time::advance(Duration::from_secs(61)).await;
    assert!(decide(&g, bash("touch c")).await, "a new window");

    f.writer.handle().flush().await.unwrap();
    let rows = f.store.lock().unwrap().audit(&AuditFilter::default()).unwrap();
    let types: Vec<&str> = rows.iter().map(|r| r.event_type.as_str()).collect();
    assert_eq!(
        types,
        [
            "permission_decision",
            "permission_decision",
            "permission_decision",
            "auto_approve_tool_call",
            "rate_limit_exceeded",
            "auto_approve_tool_call"
        ]
    );
    assert!(rows[2].decided_by.as_deref().unwrap().contains("curl"));
    assert!(rows.iter().all(|r| r.input_sha256.as_deref().is_some_and(|h| h.len() == 64)));
    assert_eq!(rows[4].rate_limit_state.as_ref().unwrap()["bash_calls_remaining"], 0);
}

#[tokio::test(start_paused = true)]
async fn revoked_or_undecided_calls_ask_and_expire() {
    let f = fixture();
    let spec = RunSpec { tools: Some(vec!["Bash".into()]), ..RunSpec::default() };
    let perms = Permissions {
        auto_approve: Some(AutoApproveConfig::default()),
        ask_timeout: Duration::from_secs(5),
        ..Permissions::default()
    };
    let g = gate(&f, perms, &[], &spec);
    assert!(decide(&g, bash("touch a")).await);
    assert!(g.revoke("seen something odd").await);
    assert!(!g.revoke("again").await, "revoking twice is one revocation");
    let started = tokio::time::Instant::now();
    assert!(!decide(&g, bash("touch b")).await, "asked, nobody answered");
    assert!(started.elapsed() >= Duration::from_secs(5));
    let rows = f.store.lock().unwrap().audit(&AuditFilter::default()).unwrap();
    let last = rows.last().unwrap();
    assert_eq!(last.decision.as_deref(), Some("deny"));
    assert!(last.decided_by.as_deref().unwrap().contains("nobody answered within 5s"));
}

#[tokio::test(start_paused = true)]
async fn grants_expire_with_the_clock_and_secrets_are_never_summarised() {
    let mut grants = Grants::default();
    let t0 = tokio::time::Instant::now().into_std();
    let secret = Secret::from("s3cret-value".to_owned());
    grants.add(
        GrantKind::Secret { name: "TOKEN".into(), value: secret },
        Duration::from_secs(10),
        t0,
    );
    grants.add(GrantKind::Tool { name: "write".into() }, Duration::from_secs(30), t0);
    let perms = Permissions { grants: Arc::new(Mutex::new(grants)), ..Permissions::default() };
    assert_eq!(granted_env(&perms).get("TOKEN").map(String::as_str), Some("s3cret-value"));
    let summary = perms.summary(&RunSpec::default()).to_string();
    assert!(summary.contains("TOKEN") && !summary.contains("s3cret"), "{summary}");

    // A tool outside `tools` is allowed while its grant is valid.
    let f = fixture();
    let spec = RunSpec {
        tools: Some(vec!["Bash".into()]),
        allow: vec!["Write".into()],
        ..RunSpec::default()
    };
    let g = gate(&f, perms.clone(), &[], &spec);
    let write = request("w".into(), "Write", json!({"file_path": "/tmp/x", "content": ""}));
    assert!(decide(&g, write.clone()).await, "granted tool");

    tokio::time::advance(Duration::from_secs(11)).await;
    assert!(granted_env(&perms).is_empty(), "the secret expired");
    assert!(decide(&g, write.clone()).await, "the tool grant still holds");
    tokio::time::advance(Duration::from_secs(20)).await;
    assert!(!decide(&g, write).await, "the tool grant expired: not in tools");
}

#[test]
fn what_the_cli_must_always_ask_about() {
    let f = fixture();
    let tools: Vec<String> = ["Bash", "Read", "Grep", "Write", "WebFetch"].map(String::from).into();
    // Everything that can change something or reach out, whatever; a read-only tool only when
    // a rule of any layer (inherited ones too) names it.
    let parent = Policy { deny: vec![Rule::parse("Grep(*.env)").unwrap()], ..Policy::default() };
    let spec = RunSpec::default();
    let plain = gate(&f, Permissions::default(), &[parent], &spec).ask_first(&tools);
    assert_eq!(plain, ["bash", "grep", "webfetch", "write"]);
    // A PreToolUse hook watching Read makes Read ask too.
    let hooked = Permissions {
        hooks: vec![HookDef {
            event: HookEvent::PreToolUse,
            matcher: Some("Re*".into()),
            command: "true".into(),
            timeout: Duration::from_secs(1),
        }],
        ..Permissions::default()
    };
    assert_eq!(
        gate(&f, hooked, &[], &spec).ask_first(&tools),
        ["bash", "read", "webfetch", "write"]
    );
    // A parent's `tools` without Read: Read must come to the gate, which refuses it.
    let narrow = Policy { tools: vec!["bash".into(), "grep".into()], ..Policy::default() };
    let asked = gate(&f, Permissions::default(), &[narrow], &spec).ask_first(&tools);
    assert!(asked.contains(&"read".to_owned()) && !asked.contains(&"grep".to_owned()), "{asked:?}");
    // Auto-approve counts every call: every tool the run has asks.
    let auto =
        Permissions { auto_approve: Some(AutoApproveConfig::default()), ..Permissions::default() };
    assert_eq!(
        gate(&f, auto, &[], &spec).ask_first(&tools),
        ["bash", "grep", "read", "webfetch", "write"]
    );
}

fn file_call(tool: &str, key: &str, path: &std::path::Path) -> ToolRequest {
    request(
        format!("{tool}-{}", path.display()),
        tool,
        json!({ key: path, "content": "", "old_string": "a", "new_string": "b" }),
    )
}

/// A gate whose run works in `cwd`.
fn gate_in(f: &Fixture, spec: &RunSpec, cwd: &std::path::Path) -> Arc<Gate> {
    let perms = Permissions { ask_timeout: Duration::from_secs(1), ..Permissions::default() };
    protecting_nothing(Gate::new(
        perms,
        &[],
        spec,
        f.writer.handle(),
        f.store.clone(),
        f.id.clone(),
        HookEnv::default(),
        cwd.to_path_buf(),
        Default::default(),
    ))
}

#[tokio::test(start_paused = true)]
async fn path_rules_see_through_symlinks_and_bind_the_edit_family() {
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    let root = canonical(std::path::Path::new("/"), dir.path(), None).unwrap();
    std::fs::create_dir_all(root.join("secret")).unwrap();
    std::fs::create_dir_all(root.join("ok")).unwrap();
    std::fs::write(root.join("secret/key"), "k").unwrap();
    std::os::unix::fs::symlink("secret", root.join("link")).unwrap();
    std::os::unix::fs::symlink(root.join("secret/new"), root.join("ok/dangling")).unwrap();
    let spec = |allow: &[&str], deny: &[&str]| RunSpec {
        allow: allow.iter().map(|s| s.to_string()).collect(),
        deny: deny.iter().map(|s| s.to_string()).collect(),
        ..RunSpec::default()
    };

    // Deny rules match the resolved path, also for files not yet created.
    let g = gate_in(
        &f,
        &spec(&["Write", "Read", "Edit"], &["Write(*/secret/*)", "Read(*/secret/*)"]),
        &root,
    );
    assert!(!decide(&g, file_call("Write", "file_path", &root.join("link/x"))).await);
    assert!(!decide(&g, file_call("Write", "file_path", &root.join("ok/dangling"))).await);
    assert!(!decide(&g, file_call("Read", "file_path", &root.join("link/key"))).await);
    assert!(
        !decide(&g, file_call("Write", "file_path", std::path::Path::new("link/y"))).await,
        "relative"
    );
    assert!(decide(&g, file_call("Write", "file_path", &root.join("ok/a.txt"))).await);
    assert!(decide(&g, file_call("Read", "file_path", &root.join("ok/a.txt"))).await);
    // A Write deny binds Edit, MultiEdit, NotebookEdit; an Edit deny binds Write.
    assert!(!decide(&g, file_call("Edit", "file_path", &root.join("link/key"))).await);
    assert!(!decide(&g, file_call("MultiEdit", "file_path", &root.join("secret/key"))).await);
    assert!(
        !decide(&g, file_call("NotebookEdit", "notebook_path", &root.join("link/n.ipynb"))).await
    );
    let g = gate_in(&f, &spec(&["Write"], &["Edit(*/secret/*)"]), &root);
    assert!(!decide(&g, file_call("Write", "file_path", &root.join("link/x"))).await);
    assert!(decide(&g, file_call("Write", "file_path", &root.join("ok/x"))).await);

    // Allow rules match the resolved path only: `ok/../secret` is not under ok/.
    let ok = format!("Write({}/ok/*)", root.display());
    let g = gate_in(&f, &spec(&[&ok], &[]), &root);
    assert!(decide(&g, file_call("Write", "file_path", &root.join("ok/x"))).await);
    assert!(!decide(&g, file_call("Write", "file_path", &root.join("ok/../secret/x"))).await);
    assert!(!decide(&g, file_call("Write", "file_path", &root.join("ok/dangling"))).await);

    // A Bash redirection is a write of its resolved path.
    let g = gate_in(&f, &spec(&["Bash", "Write"], &["Write(*/secret/*)"]), &root);
    assert!(!decide(&g, bash("echo x > link/y")).await);
    assert!(!decide(&g, bash("echo x >> ok/dangling")).await);
    assert!(decide(&g, bash("echo x > ok/y 2>&1")).await);
    let g = gate_in(&f, &spec(&["Bash(echo *)"], &[]), &root);
    assert!(!decide(&g, bash("echo x > ok/y")).await, "no rule allows the write: asked");
    assert!(decide(&g, bash("echo x > /dev/null")).await);

    // A search of a directory holding denied files is asked about (nobody answers: denied).
    let g = gate_in(&f, &spec(&["Grep", "Read"], &["Read(*/secret/*)"]), &root);
    let grep = |p: &std::path::Path| {
        request(format!("grep-{}", p.display()), "Grep", json!({"pattern": "k", "path": p}))
    };
    assert!(!decide(&g, grep(&root.join("link"))).await);
    assert!(!decide(&g, grep(&root)).await);
    f.writer.handle().flush().await.unwrap();
    let rows = f.store.lock().unwrap().audit(&AuditFilter::default()).unwrap();
    let last = rows.iter().rev().find(|r| r.event_type == "permission_request").unwrap();
    assert!(last.decided_by.as_deref().unwrap().contains("might match"), "{last:?}");
}

#[tokio::test(start_paused = true)]
async fn a_protected_path_goes_to_a_person_whatever_the_rules_say() {
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    let root = canonical(std::path::Path::new("/"), dir.path(), None).unwrap();
    std::fs::create_dir_all(root.join(".herd")).unwrap();
    let spec = RunSpec {
        allow: vec!["Bash".into(), "Write".into()],
        deny: vec!["Bash(rm *)".into()],
        ..RunSpec::default()
    };
    let perms = Permissions {
        auto_approve: Some(AutoApproveConfig::default()),
        ask_timeout: Duration::from_secs(5),
        ..Permissions::default()
    };
    let g = Arc::new(Gate::new(
        perms,
        &[],
        &spec,
        f.writer.handle(),
        f.store.clone(),
        f.id.clone(),
        HookEnv::default(),
        root.clone(),
        Default::default(),
    ));
    let roots = crate::protected::Roots {
        cwd: root.clone(),
        state_dir: root.join(".herd"),
        ..Default::default()
    };
    g.protect(crate::protected::Protected::new(&roots, None));
    let config = root.join(".herd/config.yml");

    // Allowed by a rule, auto-approve on: still asked, and nobody answers.
    let started = tokio::time::Instant::now();
    assert!(!decide(&g, file_call("Write", "file_path", &config)).await);
    assert!(started.elapsed() >= Duration::from_secs(5), "it was asked");
    assert!(!decide(&g, bash("echo '{allow: [Bash]}' > .herd/config.yml")).await);
    assert!(decide(&g, bash("echo hi > notes.txt")).await, "other writes follow the rules");
    // A deny rule denies at once.
    let started = tokio::time::Instant::now();
    assert!(!decide(&g, bash("rm .herd/herd.db")).await);
    assert_eq!(started.elapsed(), Duration::ZERO);

    f.writer.handle().flush().await.unwrap();
    let rows = f.store.lock().unwrap().audit(&AuditFilter::default()).unwrap();
    let asked: Vec<_> = rows.iter().filter(|r| r.event_type == "permission_request").collect();
    assert_eq!(asked.len(), 2, "{rows:?}");
    let why = asked[0].decided_by.as_deref().unwrap();
    assert!(why.contains(".herd") && why.contains("herd protects"), "{why}");

    // A person may allow it.
    let g2 = g.clone();
    let call =
        tokio::spawn(async move { decide(&g2, file_call("Write", "file_path", &config)).await });
    let id = loop {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let pending = f.store.lock().unwrap().pending_requests(None).unwrap();
        if let Some(r) = pending.first() {
            break r.id.clone();
        }
    };
    f.store.lock().unwrap().answer_request(&id, true, false, None, "tester").unwrap();
    assert!(call.await.unwrap(), "a person's yes allows it");
}
