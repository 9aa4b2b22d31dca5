//! The permission gate end to end, with the real Claude Code binary asking herd about every
//! tool call (`--permission-prompt-tool stdio`): rules, a person, auto-approve, hooks, audit.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{World, bash, first_id, pending_request, wait_until};
use herd_testkit::{MockServer, Script};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

macro_rules! world_or_skip {
    () => {{
        let w = World::new();
        if w.claude.is_none() {
            return;
        }
        w
    }};
}

/// The rows of event type `t`.
fn of_type<'a>(rows: &'a [Value], t: &str) -> Vec<&'a Value> {
    rows.iter().filter(|r| r["event_type"] == t).collect()
}

/// The id of the one running subagent, once it shows up.
fn running_id(w: &World) -> String {
    first_id(w, &["ps", "--json"], "running subagent")
}

#[test]
fn allow_rule_runs_a_command_deny_rule_blocks_rm_and_both_are_audited_with_hashes() {
    let w = world_or_skip!();
    let victim = w.work.join("victim.txt");
    std::fs::write(&victim, "keep me").unwrap();
    let made = w.work.join("made.txt");
    MockServer::shared().script(
        "perm_rules",
        Script::new()
            .tool_use("Bash", bash(&format!("touch {}", made.display())))
            .tool_use("Bash", bash(&format!("rm -f {}", victim.display())))
            .text("done: {{last_tool_result}}"),
    );
    let (code, v) = w.json(&[
        "task",
        "SCENARIO=perm_rules go",
        "--allow",
        "Bash(touch *)",
        "--deny",
        "Bash(rm *)",
        "--permission-timeout",
        "3s",
        "--json",
    ]);
    assert_eq!(code, 0, "{v}");
    assert!(made.exists(), "the allowed command did not run");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
    // The model received the denial as the tool's result.
    let result = v["result"].as_str().unwrap();
    assert!(result.contains("Denied by herd: deny rule"), "{result}");
    let reqs = MockServer::shared().requests_for("perm_rules");
    assert!(reqs.last().unwrap().body.to_string().contains("Denied by herd"));

    let id = v["id"].as_str().unwrap();
    let rows = w.audit(id);
    assert_eq!(of_type(&rows, "subagent_spawn").len(), 1);
    let decisions = of_type(&rows, "permission_decision");
    assert_eq!(decisions.len(), 2, "{rows:#?}");
    assert_eq!(decisions[0]["decision"], "allow");
    assert!(decisions[0]["decided_by"].as_str().unwrap().contains("allow rule"));
    assert_eq!(decisions[1]["decision"], "deny");
    assert!(decisions[1]["decided_by"].as_str().unwrap().contains("deny rule"));
    for d in &decisions {
        let preview = d["input_preview"].as_str().unwrap();
        let hash = format!("{:x}", Sha256::digest(preview.as_bytes()));
        assert_eq!(d["input_sha256"], hash, "the hash is of the input herd saw");
    }
    assert_eq!(of_type(&rows, "subagent_complete").len(), 1);
}

#[test]
fn read_only_calls_and_the_repositorys_own_settings_cannot_get_past_herds_rules() {
    // claude runs `cat` and Read without asking, and a repository's .claude/settings.json may
    // allow Bash or switch permissions off: herd must still see, count and decide every call.
    let w = world_or_skip!();
    std::fs::write(w.work.join("secret.txt"), "s3cret-value").unwrap();
    std::fs::create_dir_all(w.work.join(".claude")).unwrap();
    std::fs::write(
        w.work.join(".claude/settings.json"),
        r#"{"permissions":{"allow":["Bash","Read","Write"],"defaultMode":"acceptEdits"}}"#,
    )
    .unwrap();
    let secret = w.work.join("secret.txt").display().to_string();
    MockServer::shared().script(
        "perm_readonly",
        Script::new()
            .tool_use("Bash", bash(&format!("cat {secret}")))
            .tool_use("Read", json!({"file_path": secret}))
            .tool_use("Bash", bash("echo counted"))
            .tool_use("Write", json!({"file_path": w.work.join("planted.txt").display().to_string(), "content": "x"}))
            .text("done: {{last_tool_result}}"),
    );
    let (code, v) = w.json(&[
        "task",
        "SCENARIO=perm_readonly go",
        "--deny",
        "Bash(cat *)",
        "--deny",
        "Read(*secret*)",
        "--allow",
        "Bash(echo *)",
        "--permission-timeout",
        "3s",
        "--wait-for-approval",
        "--json",
    ]);
    // The Write nobody answered was denied: completed, but not silently (issue 19).
    assert_eq!(code, 4, "{v}");
    assert_eq!(
        (&v["status"], &v["state"]),
        (&json!("completed"), &json!("completed_with_denials"))
    );
    let reqs = MockServer::shared().requests_for("perm_readonly");
    let seen = reqs.last().unwrap().body.to_string();
    assert!(!seen.contains("s3cret-value"), "a denied read reached the model: {seen}");
    let rows = w.audit(v["id"].as_str().unwrap());
    let decisions = of_type(&rows, "permission_decision");
    let by: Vec<(&str, &str)> = decisions
        .iter()
        .map(|d| (d["decision"].as_str().unwrap(), d["tool"].as_str().unwrap()))
        .collect();
    // The repository allows Write; herd has no rule for it: a person is asked (nobody answers
    // within the timeout, so it is denied).
    let expected = [("deny", "Bash"), ("deny", "Read"), ("allow", "Bash"), ("deny", "Write")];
    assert_eq!(by, expected, "{rows:#?}");
    assert!(of_type(&rows, "tool_call_observed").is_empty(), "{rows:#?}");
    assert!(!w.work.join("planted.txt").exists(), "a write the repository allowed ran unasked");
    assert_eq!(of_type(&rows, "permission_request").len(), 1, "{rows:#?}");
}

#[test]
fn a_call_approved_from_a_second_process_runs() {
    let w = world_or_skip!();
    let made = w.work.join("approved.txt");
    MockServer::shared().script(
        "perm_approve",
        Script::new()
            .tool_use("Bash", bash(&format!("touch {}", made.display())))
            .text("done: {{last_tool_result}}"),
    );
    let child = w
        .herd(&[
            "task",
            "SCENARIO=perm_approve go",
            "--permission-timeout",
            "60s",
            "--wait-for-approval",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let request = pending_request(&w);
    assert!(!made.exists(), "the call ran before anyone approved it");
    let out = w.run(&["approve", &request]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = child.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{v}");
    assert!(made.exists());
    // A second answer is refused: the first one won.
    let again = w.run(&["deny", &request]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("already decided"));

    let rows = w.audit(v["id"].as_str().unwrap());
    assert_eq!(of_type(&rows, "permission_request")[0]["decision"], "ask");
    let d = of_type(&rows, "permission_decision");
    assert_eq!(d.len(), 1);
    assert_eq!(d[0]["decision"], "allow");
    assert!(d[0]["decided_by"].as_str().unwrap().starts_with("a person"), "{:?}", d[0]);
}

#[test]
fn an_unanswered_call_is_denied_at_the_timeout() {
    let w = world_or_skip!();
    let never = w.work.join("never.txt");
    MockServer::shared().script(
        "perm_timeout",
        Script::new()
            .tool_use("Bash", bash(&format!("touch {}", never.display())))
            .text("done: {{last_tool_result}}"),
    );
    let start = Instant::now();
    let (code, v) = w.json(&[
        "task",
        "SCENARIO=perm_timeout go",
        "--permission-timeout",
        "2s",
        "--wait-for-approval",
        "--json",
    ]);
    // Denied for want of an answer: exit 4 and the state say so (issue 19).
    assert_eq!(code, 4, "{v}");
    assert_eq!(v["state"], "completed_with_denials", "{v}");
    assert_eq!(v["unanswered_denials"], 1, "{v}");
    assert!(start.elapsed() >= Duration::from_secs(2));
    assert!(!never.exists());
    assert!(v["result"].as_str().unwrap().contains("nobody answered within 2s"), "{v}");
    let (_, pending) = w.json(&["approve", "--json"]);
    assert_eq!(pending, json!([]), "the expired request is no longer pending");
}

#[test]
fn an_answer_to_a_dead_runs_request_is_refused_and_audited() {
    let w = world_or_skip!();
    let never = w.work.join("never.txt");
    MockServer::shared().script(
        "perm_dead",
        Script::new()
            .tool_use("Bash", bash(&format!("touch {}", never.display())))
            .text("done: {{last_tool_result}}"),
    );
    let mut child = w
        .herd(&[
            "task",
            "SCENARIO=perm_dead go",
            "--permission-timeout",
            "120s",
            "--json",
            "--wait-for-approval",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let request = pending_request(&w);
    let run = running_id(&w);
    // herd dies with the request pending (its guard takes the agent with it).
    child.kill().unwrap();
    child.wait().unwrap();
    let out = w.run(&["approve", &request]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("its run ended"), "{stderr}");
    assert!(!never.exists());
    let (_, pending) = w.json(&["approve", "--json"]);
    assert_eq!(pending, json!([]), "the stale request is closed");
    let rows = w.audit(&run);
    let refused = of_type(&rows, "permission_answer_refused");
    assert_eq!(refused.len(), 1, "{rows:#?}");
    assert_eq!(refused[0]["decision"], "allow");
}

#[test]
fn approve_always_lets_the_same_call_run_again_and_unnamed_reads_are_observed() {
    let w = world_or_skip!();
    let (one, two) = (w.work.join("one.txt"), w.work.join("two.txt"));
    std::fs::write(w.work.join("notes.txt"), "read me").unwrap();
    let touch = format!("touch {} {}", one.display(), two.display());
    MockServer::shared().script(
        "perm_always",
        Script::new()
            .tool_use("Bash", bash(&touch))
            .tool_use("Read", json!({"file_path": w.work.join("notes.txt").display().to_string()}))
            .tool_use("Bash", bash(&touch))
            .text("done: {{last_tool_result}}"),
    );
    let child = w
        .herd(&[
            "task",
            "SCENARIO=perm_always go",
            "--permission-timeout",
            "60s",
            "--wait-for-approval",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let request = pending_request(&w);
    let out = w.run(&["approve", &request, "--always"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = child.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{v}");
    let rows = w.audit(v["id"].as_str().unwrap());
    // One person's answer, then the same call allowed by the rule it added: nobody asked twice.
    assert_eq!(of_type(&rows, "permission_request").len(), 1, "{rows:#?}");
    let decisions = of_type(&rows, "permission_decision");
    assert!(
        decisions.iter().any(|d| d["decision"] == "allow"
            && d["decided_by"].as_str().unwrap_or("").contains("always")),
        "{rows:#?}"
    );
    // The Read no rule names ran as claude decided, and is on record.
    let observed = of_type(&rows, "tool_call_observed");
    assert!(observed.iter().any(|r| r["tool"] == "Read"), "{rows:#?}");
}

#[test]
fn gc_keeps_recent_audit_entries_and_sweeps_old_ones_and_transcripts() {
    let w = World::new();
    let out = w.run(&["task", "x", "--cli", "command", "--json", "--", "echo", "hi"]);
    assert!(out.status.success());
    let id =
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["id"].as_str().unwrap().to_owned();
    let transcript = w.state.join(format!("transcripts/{id}.jsonl"));
    assert!(transcript.exists());
    // The default keeps 90 days: nothing goes.
    let (_, v) = w.json(&["gc", "--json"]);
    assert_eq!((&v["audit_rows"], &v["transcript_files"]), (&json!(0), &json!(0)), "{v}");
    std::thread::sleep(Duration::from_millis(20));
    let (_, v) =
        w.json(&["gc", "--audit-days", "0", "--transcript-days", "0", "--dry-run", "--json"]);
    assert!(v["audit_rows"].as_u64().unwrap() >= 2, "{v}");
    assert!(transcript.exists(), "a dry run deletes nothing");
    let (_, v) = w.json(&["gc", "--audit-days", "0", "--transcript-days", "0", "--json"]);
    assert!(v["transcript_files"].as_u64().unwrap() >= 1, "{v}");
    assert!(!transcript.exists());
    assert!(w.audit(&id).is_empty());
}

#[test]
fn auto_approve_runs_exactly_the_rate_limit_and_audits_the_rest() {
    let w = world_or_skip!();
    let files: Vec<_> = (1..=4).map(|i| w.work.join(format!("auto{i}.txt"))).collect();
    let mut script = Script::new();
    for f in &files {
        script = script.tool_use("Bash", bash(&format!("touch {}", f.display())));
    }
    MockServer::shared().script("perm_auto", script.text("done: {{last_tool_result}}"));
    let (code, v) = w.json(&[
        "task",
        "SCENARIO=perm_auto go",
        "--tools",
        "Bash",
        "--auto-approve",
        "--bash-per-minute",
        "2",
        "--json",
    ]);
    assert_eq!(code, 0, "{v}");
    let ran: Vec<bool> = files.iter().map(|f| f.exists()).collect();
    assert_eq!(ran, [true, true, false, false]);
    let rows = w.audit(v["id"].as_str().unwrap());
    let approved = of_type(&rows, "auto_approve_tool_call");
    assert_eq!(approved.len(), 2);
    assert_eq!(approved[1]["rate_limit_state"]["bash_calls_remaining"], 0);
    let limited = of_type(&rows, "rate_limit_exceeded");
    assert_eq!(limited.len(), 2, "{rows:#?}");
    assert!(limited.iter().all(|r| r["decision"] == "deny"));
    assert!(limited[0]["decided_by"].as_str().unwrap().contains("bash_per_minute"));
    assert_eq!(of_type(&rows, "subagent_spawn")[0]["severity"], "warn");
}

#[test]
fn revoke_mid_run_makes_the_next_call_ask() {
    let w = world_or_skip!();
    let first = w.work.join("first.txt");
    let second = w.work.join("second.txt");
    MockServer::shared().script(
        "perm_revoke",
        Script::new()
            .tool_use("Bash", bash(&format!("touch {}", first.display())))
            .tool_use("Bash", bash(&format!("touch {}", second.display())))
            .delay(Duration::from_secs(3))
            .text("done: {{last_tool_result}}"),
    );
    let child = w
        .herd(&[
            "task",
            "SCENARIO=perm_revoke go",
            "--tools",
            "Bash",
            "--auto-approve",
            "--permission-timeout",
            "30s",
            "--wait-for-approval",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let id = running_id(&w);
    assert!(wait_until(Duration::from_secs(20), || first.exists()), "auto-approve did not run");
    let short = w.run(&["revoke", &id, "--reason", "too short"]);
    assert_eq!(short.status.code(), Some(2));
    let out = w.run(&["revoke", &id, "--reason", "an unexpected command showed up"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let request = pending_request(&w);
    let out = w.run(&["deny", &request, "--reason", "not after a revoke"]);
    assert!(out.status.success());
    let out = child.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{v}");
    assert!(!second.exists());
    assert!(v["result"].as_str().unwrap().contains("not after a revoke"), "{v}");
    let rows = w.audit(&id);
    assert_eq!(of_type(&rows, "auto_approve_tool_call").len(), 1);
    assert_eq!(of_type(&rows, "permission_revoke").len(), 1);
    assert_eq!(of_type(&rows, "permission_request").len(), 1);
    assert!(w.kinds(&id).iter().any(|k| k == "auto_approve_revoked"));
}

#[test]
fn a_pre_tool_use_hook_vetoes_and_a_crashing_hook_does_not_stop_the_run() {
    let w = world_or_skip!();
    std::fs::create_dir_all(w.work.join(".herd")).unwrap();
    std::fs::write(
        w.work.join(".herd/config.yml"),
        "hooks:\n  PreToolUse:\n    - matcher: Bash\n      command: \"grep -q forbidden && { echo 'forbidden by the hook' >&2; exit 2; }; exit 0\"\n  \
         PostToolUse:\n    - command: \"kill -SEGV $$\"\n  SubagentStart:\n    - command: \"exit 7\"\n",
    )
    .unwrap();
    let forbidden = w.work.join("forbidden.txt");
    let fine = w.work.join("fine.txt");
    MockServer::shared().script(
        "perm_hooks",
        Script::new()
            .tool_use("Bash", bash(&format!("touch {}", forbidden.display())))
            .tool_use("Bash", bash(&format!("touch {}", fine.display())))
            .text("done: {{last_tool_result}}"),
    );
    let out = w.run(&["task", "SCENARIO=perm_hooks go", "--allow", "Bash(touch *)", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{v}");
    assert!(!forbidden.exists(), "the veto did not hold");
    assert!(fine.exists());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("WARN SubagentStart hook"), "failing hooks are shown: {stderr}");
    let id = v["id"].as_str().unwrap();
    let rows = w.audit(id);
    let veto = of_type(&rows, "hook_veto");
    assert_eq!(veto.len(), 1);
    assert!(veto[0]["decided_by"].as_str().unwrap().contains("forbidden by the hook"));
    assert!(of_type(&rows, "hook_failed").len() >= 2, "{rows:#?}");
    let events = w.events(id);
    let outcomes: Vec<&str> = events
        .iter()
        .filter(|e| e["kind"] == "hook_ran")
        .map(|e| e["outcome"].as_str().unwrap())
        .collect();
    assert!(outcomes.contains(&"veto") && outcomes.contains(&"failed"), "{outcomes:?}");
}

#[test]
fn auto_approve_needs_known_tools() {
    let w = World::new();
    let out = w.run(&["task", "x", "--auto-approve"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("INVALID_PERMISSION_CONFIG") && err.contains("tools"), "{err}");
    let out = w.run(&["task", "x", "--auto-approve", "--tools", "Bsh"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Bsh"));
    let out =
        w.run(&["task", "x", "--tools", "Bash", "--auto-approve", "--bash-per-minute", "500"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bash_per_minute"));
    let out = w.run(&["task", "x", "--deny", "Bash(rm *"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Bash(rm *"));
    // Under a herd that asks a person (HERD_POLICY_LAYERS from it, without auto-approve), a
    // child cannot turn auto-approve on: children only narrow.
    let out = w
        .herd(&["task", "x", "--tools", "Bash", "--auto-approve"])
        .env("HERD_POLICY_LAYERS", r#"[{"tools": ["bash"]}]"#)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("INVALID_PERMISSION_CONFIG") && err.contains("a herd above"), "{err}");
    // Nothing was started or recorded.
    let (_, ps) = w.json(&["ps", "--all", "--json"]);
    assert_eq!(ps, json!([]));
}

#[test]
fn a_granted_tool_is_offered_and_refused_once_its_grant_expires() {
    let w = world_or_skip!();
    let (early, late) = (w.work.join("early.txt"), w.work.join("late.txt"));
    let write = |p: &std::path::Path| json!({"file_path": p.display().to_string(), "content": "x"});
    MockServer::shared().script(
        "perm_grant",
        Script::new()
            .tool_use("Write", write(&early))
            .tool_use("Bash", bash("sleep 2.5"))
            .tool_use("Write", write(&late))
            .text("done: {{last_tool_result}}"),
    );
    let (code, v) = w.json(&[
        "task",
        "SCENARIO=perm_grant go",
        "--tools",
        "Bash",
        "--grant",
        "tool:Write:2s",
        "--allow",
        "Write",
        "--allow",
        "Bash(sleep *)",
        "--permission-timeout",
        "3s",
        "--json",
    ]);
    assert_eq!(code, 0, "{v}");
    // claude was offered Write beside Bash, and the first call ran under the grant.
    let first = &MockServer::shared().requests_for("perm_grant")[0];
    let offered: Vec<&str> =
        first.body["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(offered.contains(&"Write") && offered.contains(&"Bash"), "{offered:?}");
    assert!(early.exists(), "the call under a valid grant did not run");
    assert!(!late.exists(), "a call after the grant expired ran");
    let rows = w.audit(v["id"].as_str().unwrap());
    let denied: Vec<&Value> = of_type(&rows, "permission_decision")
        .into_iter()
        .filter(|r| r["decision"] == "deny")
        .collect();
    assert_eq!(denied.len(), 1, "{rows:#?}");
    assert_eq!(denied[0]["tool"], "Write");
}
