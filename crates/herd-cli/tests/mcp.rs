//! `herd mcp` end to end: an independent MCP client (the rmcp client) and the real Claude Code
//! as clients; every subagent is the real claude against the testkit mock.

mod common;

use std::path::Path;
use std::time::Duration;

use common::World;
use common::mcp::{Client, connect, connect_with, err, ok, show};
use herd_testkit::{MockServer, Script};
use rmcp::model::CallToolRequestParams;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_client_lists_the_tools_and_runs_a_task() {
    let w = world_or_skip!();
    let mock = MockServer::shared();
    mock.script(
        "mcp_fg",
        Script::new().text("hello from the subagent").text("second answer after {{scenario}}"),
    );
    let c = connect(&w, &[]).await;
    let info = c.peer_info().expect("server info");
    assert_eq!(info.server_info.as_ref().unwrap().name, "herd");

    let mut tools: Vec<Value> = c
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| {
            json!({"name": t.name, "description": t.description, "annotations": t.annotations,
                   "input_schema": *t.input_schema})
        })
        .collect();
    tools.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    insta::assert_json_snapshot!("mcp_tools", tools);

    let v = ok(
        &c,
        "task",
        json!({"description": "say hello", "prompt": "SCENARIO=mcp_fg go", "agent_cli": "claude"}),
    )
    .await;
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(v["result"], "hello from the subagent");
    assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 0, "{v}");
    assert!(v["cost_usd"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["duration_ms"].as_i64().is_some(), "{v}");
    let id = v["session_id"].as_str().unwrap().to_owned();
    // The CLI sees the same store: the task is recorded under its description.
    let row = show(&w, &id);
    assert_eq!(row["status"], "completed");
    assert_eq!(row["name"], "say hello");

    // session_id continues the same claude session.
    let again =
        ok(&c, "task", json!({"description": "follow up", "prompt": "and now?", "session_id": id}))
            .await;
    assert_eq!(again["status"], "completed", "{again}");
    assert_eq!(again["result"], "second answer after mcp_fg");
    assert_ne!(again["session_id"], id);

    // The result is kept: task_result reads it back.
    let r = ok(&c, "task_result", json!({"id": id})).await;
    assert_eq!(r["result"], "hello from the subagent");
    let status = ok(&c, "task_status", json!({})).await;
    assert_eq!(status["tasks"].as_array().unwrap().len(), 2, "{status}");

    // Clear tool errors.
    let e = err(&c, "task", json!({"description": "x", "prompt": "p", "agent_name": "nope"})).await;
    assert!(e.contains(r#"no agent named "nope""#), "{e}");
    let e = err(&c, "task", json!({"description": "x", "prompt": "p", "agent_cli": "gpt"})).await;
    assert!(e.starts_with("INVALID_ARGUMENT: agent_cli: unknown cli \"gpt\""), "{e}");
    let e =
        err(&c, "task", json!({"description": "x", "prompt": "p", "agent_cli": "command"})).await;
    assert!(e.contains("over MCP use \"claude\""), "{e}");
    // Tasks work inside the project (or the server's roots), wherever a client points them.
    let e =
        err(&c, "task", json!({"description": "x", "prompt": "p", "cwd": "/nonexistent"})).await;
    assert!(e.starts_with("PERMISSION_DENIED: cwd /nonexistent: outside the allowed roots"), "{e}");
    let e = err(&c, "task", json!({"description": "x", "prompt": "p", "cwd": "/"})).await;
    assert!(e.contains("outside the allowed roots"), "{e}");
    let e = err(&c, "task", json!({"description": "x", "prompt": "p", "cwd": "no/such/dir"})).await;
    assert!(e.contains("no/such/dir: not an existing directory"), "{e}");
    let cycle = "name: c\nsteps:\n  - {id: a, prompt: one, depends_on: [b]}\n  - {id: b, prompt: two, depends_on: [a]}\n";
    let e = err(&c, "run_plan", json!({"plan": cycle})).await;
    assert!(e.starts_with("INVALID_ARGUMENT: invalid plan plan:") && e.contains("cycle"), "{e}");
    let e = err(&c, "run_plan", json!({})).await;
    assert!(e.contains("exactly one of plan"), "{e}");
    let e = err(&c, "task_wait", json!({"ids": [id], "timeout_s": 601})).await;
    assert!(e.contains("at most 600"), "{e}");
    let e = err(&c, "task_result", json!({"id": "nosuchid"})).await;
    assert!(e.contains("nosuchid"), "{e}");
    c.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_tasks_share_the_pool_and_can_be_waited_for_and_cancelled() {
    let w = world_or_skip!();
    let mock = MockServer::shared();
    mock.script("mcp_bg_a", Script::new().text("A done").delay(Duration::from_secs(2)));
    mock.script("mcp_bg_b", Script::new().text("B done"));
    mock.script("mcp_bg_slow", Script::new().text("never").delay(Duration::from_secs(90)));
    mock.script("mcp_bg_never", Script::new().text("must not run"));
    let c = connect(&w, &["--max-concurrent", "1", "--max-queue", "1"]).await;
    let bg = |scenario: &str| json!({"description": scenario, "prompt": format!("SCENARIO={scenario} go"), "background": true});

    let a = ok(&c, "task", bg("mcp_bg_a")).await;
    let b = ok(&c, "task", bg("mcp_bg_b")).await;
    assert_eq!(a["background"], true);
    assert_ne!(a["status"], "queued", "{a}");
    assert_eq!(b["status"], "queued", "the second waits for the only slot: {b}");
    let (a, b) = (a["session_id"].as_str().unwrap(), b["session_id"].as_str().unwrap());
    // One running + one queued: a third is refused.
    let e = err(&c, "task", bg("mcp_bg_never")).await;
    assert!(e.starts_with("RESOURCE_EXHAUSTED: the pool is full"), "{e}");

    let v = ok(&c, "task_wait", json!({"ids": [a, b], "mode": "any", "timeout_s": 60})).await;
    assert_eq!(v["timed_out"], false, "{v}");
    assert_eq!(v["tasks"][0]["status"], "completed", "{v}");
    let v = ok(&c, "task_wait", json!({"ids": [a, b], "mode": "all", "timeout_s": 60})).await;
    assert_eq!(v["timed_out"], false, "{v}");
    assert_eq!(v["done"], 2, "{v}");
    assert_eq!(ok(&c, "task_result", json!({"id": a})).await["result"], "A done");
    assert_eq!(ok(&c, "task_result", json!({"id": b})).await["result"], "B done");
    // B started only after A ended (RFC 3339 times of one width sort as the instants do).
    let (ra, rb) = (show(&w, a), show(&w, b));
    assert!(
        rb["started_at"].as_str().unwrap() >= ra["completed_at"].as_str().unwrap(),
        "B started before A ended: {ra} {rb}"
    );

    // Cancel: a running task (graceful), a queued one (never starts), then force.
    let slow = ok(&c, "task", bg("mcp_bg_slow")).await;
    let slow = slow["session_id"].as_str().unwrap();
    let queued = ok(&c, "task", bg("mcp_bg_never")).await;
    assert_eq!(queued["status"], "queued");
    let queued = queued["session_id"].as_str().unwrap();
    let v = ok(&c, "task_cancel", json!({"id": queued})).await;
    assert_eq!(v["status"], "cancelled", "{v}");
    assert!(show(&w, queued)["started_at"].is_null());
    // Wait until the slow one is running (its model request reached the mock).
    assert!(common::wait_until(Duration::from_secs(30), || !mock
        .requests_for("mcp_bg_slow")
        .is_empty()));
    let v = ok(&c, "task_wait", json!({"ids": [slow], "timeout_s": 1})).await;
    assert_eq!(v["timed_out"], true, "{v}");
    assert_eq!(v["tasks"][0]["status"], "running", "{v}");
    let started = std::time::Instant::now();
    let v = ok(&c, "task_cancel", json!({"id": &slow[..12]})).await;
    assert_eq!(v["status"], "cancelled", "{v}");
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    let r = ok(&c, "task_result", json!({"id": slow})).await;
    assert_eq!(r["status"], "cancelled");
    assert!(mock.requests_for("mcp_bg_never").is_empty(), "a cancelled queued task ran");

    // A forced cancel kills at once.
    let slow2 = ok(&c, "task", bg("mcp_bg_slow")).await;
    let slow2 = slow2["session_id"].as_str().unwrap();
    assert!(common::wait_until(Duration::from_secs(30), || show(&w, slow2)["pid"].is_u64()));
    let v = ok(&c, "task_cancel", json!({"id": slow2, "force": true})).await;
    assert_eq!(v["status"], "cancelled", "{v}");
    let kinds = w.kinds(slow2);
    assert!(kinds.iter().any(|k| k == "stop_requested"), "{kinds:?}");
    c.cancel().await.unwrap();
}

/// The first pending permission request task_status lists for `id`, once there is one.
async fn pending_request(c: &Client, id: &str) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let v = ok(c, "task_status", json!({"ids": [id]})).await;
        if let Some(p) = v["tasks"][0]["pending_permissions"].as_array().and_then(|a| a.first()) {
            return p.clone();
        }
        assert!(std::time::Instant::now() < deadline, "no pending request: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_tasks_tool_calls_are_answered_with_the_approve_tool() {
    let w = world_or_skip!();
    let (yes, no) = (w.work.join("approved.txt"), w.work.join("denied.txt"));
    MockServer::shared().script(
        "mcp_approve",
        Script::new()
            .tool_use(
                "Bash",
                json!({"command": format!("touch {}", yes.display()), "description": "a"}),
            )
            .tool_use(
                "Bash",
                json!({"command": format!("touch {}", no.display()), "description": "b"}),
            )
            .text("done: {{last_tool_result}}"),
    );
    let c = connect(&w, &[]).await;
    // No rule decides Bash and auto-approve is off: every call waits for a person.
    let v = ok(
        &c,
        "task",
        json!({"description": "ask twice", "prompt": "SCENARIO=mcp_approve go", "tools": ["Bash"],
               "background": true}),
    )
    .await;
    let id = v["session_id"].as_str().unwrap().to_owned();
    let first = pending_request(&c, &id).await;
    assert_eq!(first["tool"], "Bash", "{first}");
    assert!(first["input_preview"].as_str().unwrap().contains("approved.txt"), "{first}");
    assert!(first["expires_in_s"].as_i64().unwrap() > 0, "{first}");
    let req = first["id"].as_str().unwrap().to_owned();
    let e =
        err(&c, "approve", json!({"request_id": req, "decision": "deny", "always": true})).await;
    assert!(e.contains("always: only with decision"), "{e}");
    let a = ok(&c, "approve", json!({"request_id": req, "decision": "allow"})).await;
    assert_eq!(a["decision"], "allowed", "{a}");
    // First answer wins: a second answer changes nothing.
    let e = err(&c, "approve", json!({"request_id": req, "decision": "deny"})).await;
    assert!(e.contains("already decided (approved)"), "{e}");

    let second = pending_request(&c, &id).await;
    assert_ne!(second["id"], req.as_str());
    let req2 = second["id"].as_str().unwrap();
    ok(&c, "approve", json!({"request_id": req2, "decision": "deny", "reason": "not that one"}))
        .await;
    let v = ok(&c, "task_wait", json!({"ids": [id], "timeout_s": 60})).await;
    assert_eq!(v["tasks"][0]["status"], "completed", "{v}");
    let r = ok(&c, "task_result", json!({"id": id})).await;
    assert!(r["result"].as_str().unwrap().contains("not that one"), "{r}");
    assert!(r.get("pending_permissions").is_none(), "{r}");
    assert!(yes.exists(), "the approved call did not run");
    assert!(!no.exists(), "the denied call ran");
    let e = err(&c, "approve", json!({"request_id": "perm_nosuch", "decision": "allow"})).await;
    assert!(e.contains("perm_nosuch"), "{e}");
    c.cancel().await.unwrap();

    // Both answers are audited as the MCP client's.
    let out = w.run(&["audit", "--subagent", &id, "--json"]);
    let rows: Vec<Value> = serde_json::from_slice::<Vec<Value>>(&out.stdout)
        .unwrap()
        .into_iter()
        .filter(|r: &Value| r["event_type"] == "permission_decision")
        .collect();
    assert_eq!(rows.len(), 2, "{rows:#?}");
    assert_eq!(rows[0]["decision"], "allow");
    assert_eq!(rows[1]["decision"], "deny");
    for r in &rows {
        assert!(r["decided_by"].as_str().unwrap().contains("mcp client"), "{r}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_task_works_in_its_own_worktree_and_is_merged() {
    let w = world_or_skip!();
    let head = common::init_repo(&w);
    MockServer::shared().script(
        "mcp_iso",
        Script::new()
            .tool_use("Bash", json!({"command": "echo M > m.txt && pwd", "description": "w"}))
            .text("done: {{last_tool_result}}"),
    );
    // The server's policy allows Bash; the client's own allow only narrows it.
    let c = connect(&w, &["--allow", "Bash"]).await;
    let e = err(
        &c,
        "task",
        json!({"description": "x", "prompt": "p", "workspace": "isolated", "wait": true}),
    )
    .await;
    assert!(e.contains("wait: only with workspace"), "{e}");
    let v = ok(
        &c,
        "task",
        json!({"description": "isolated write", "prompt": "SCENARIO=mcp_iso go",
               "workspace": "isolated", "allow": ["Bash"]}),
    )
    .await;
    assert_eq!(v["status"], "completed", "{v}");
    let id = v["session_id"].as_str().unwrap();
    let ws = &v["worktree"];
    let integ = format!("herd/{id}/integration");
    assert_eq!(ws["integration_branch"], integ.as_str(), "{v}");
    assert_eq!(ws["status"], "merged", "{v}");
    // The agent ran in the worktree, not in the checkout.
    let worktree = ws["path"].as_str().unwrap();
    assert!(v["result"].as_str().unwrap().contains(worktree), "{v}");
    assert_eq!(common::git(&w.work, &["show", &format!("{integ}:m.txt")]), "M\n");
    assert!(!w.work.join("m.txt").exists());
    assert_eq!(common::git(&w.work, &["rev-parse", "HEAD"]).trim(), head);
    c.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_runs_through_the_run_plan_tool() {
    let w = world_or_skip!();
    let mock = MockServer::shared();
    mock.script("mcp_plan_a", Script::new().text("alpha"));
    mock.script("mcp_plan_b", Script::new().text("beta saw: {{scenario}}"));
    let c = connect(&w, &[]).await;
    let plan = "name: two\nsteps:\n  - {id: a, prompt: \"SCENARIO=mcp_plan_a go\"}\n  - {id: b, prompt: \"SCENARIO=mcp_plan_b go\", depends_on: [a]}\n";
    let v = ok(&c, "run_plan", json!({"plan": plan})).await;
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(v["steps"][0]["result"], "alpha");
    assert_eq!(v["steps"][1]["result"], "beta saw: mcp_plan_b");
    // b got a's result as context.
    assert!(mock.requests_for("mcp_plan_b")[0].body.to_string().contains("alpha"));

    // In the background: the plan id at once, then wait and read.
    let v = ok(&c, "run_plan", json!({"plan": plan, "background": true})).await;
    let id = v["plan_id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("pln_"), "{v}");
    let v = ok(&c, "task_wait", json!({"ids": [id], "timeout_s": 60})).await;
    assert_eq!(v["tasks"][0]["status"], "completed", "{v}");
    assert_eq!(v["tasks"][0]["completed_steps"], 2, "{v}");
    c.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_projects_deny_rules_win_over_a_tasks_allow() {
    let w = world_or_skip!();
    std::fs::create_dir_all(w.work.join(".herd")).unwrap();
    std::fs::write(w.work.join(".herd/config.yml"), "permissions:\n  deny: [\"Bash(rm *)\"]\n")
        .unwrap();
    let victim = w.work.join("victim.txt");
    std::fs::write(&victim, "keep").unwrap();
    MockServer::shared().script(
        "mcp_deny",
        Script::new()
            .tool_use(
                "Bash",
                json!({"command": format!("rm -f {}", victim.display()), "description": "x"}),
            )
            .text("done: {{last_tool_result}}"),
    );
    let c = connect(&w, &[]).await;
    let v = ok(
        &c,
        "task",
        json!({"description": "try", "prompt": "SCENARIO=mcp_deny go", "agent_cli": "claude",
               "allow": ["Bash"]}),
    )
    .await;
    assert_eq!(v["status"], "completed", "{v}");
    assert!(v["result"].as_str().unwrap().contains("deny rule"), "{v}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    c.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plans_agents_share_the_servers_pool() {
    // The server admits one agent at a time; a plan that allows three still runs one at once
    // (each step counts the agents alive beside it through a shared directory).
    let w = World::new();
    std::fs::create_dir_all(w.work.join("live")).unwrap();
    let c = connect(&w, &["--max-concurrent", "1"]).await;
    let script = "touch live/$$; ls live | wc -l; sleep 0.3; rm live/$$";
    let plan = format!(
        "name: pool\nlimits: {{max_concurrent: 3}}\ndefaults: {{cli: command, prompt: go, command: [sh, -c, \"{script}\"]}}\nsteps: [{{id: a}}, {{id: b}}, {{id: c}}]\n"
    );
    let v = ok(&c, "run_plan", json!({"plan": plan})).await;
    assert_eq!(v["status"], "completed", "{v}");
    for s in v["steps"].as_array().unwrap() {
        assert_eq!(s["result"].as_str().unwrap().trim(), "1", "{v}");
    }
    c.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_herd_at_the_depth_limit_refuses_to_spawn() {
    // A `herd mcp` started by a subagent (HERD_DEPTH=1) with the default limit of 1.
    let w = World::new();
    let c = connect_with(&w, &[], &[("HERD_DEPTH", "1")]).await;
    let e =
        err(&c, "task", json!({"description": "deeper", "prompt": "go", "agent_cli": "claude"}))
            .await;
    assert!(e.contains("depth exceeded: this herd runs inside a subagent at depth 1"), "{e}");
    let plan = "name: p\nsteps:\n  - {id: a, prompt: go}\n";
    let e = err(&c, "run_plan", json!({"plan": plan})).await;
    assert!(e.contains("depth exceeded"), "{e}");
    let (_, ps) = w.json(&["ps", "--all", "--json"]);
    assert_eq!(ps, json!([]), "nothing was recorded");
    c.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_do_not_outlive_the_server() {
    let w = world_or_skip!();
    let mock = MockServer::shared();
    mock.script("mcp_orphan", Script::new().text("never").delay(Duration::from_secs(90)));
    let c = connect(&w, &[]).await;
    let v = ok(
        &c,
        "task",
        json!({"description": "slow", "prompt": "SCENARIO=mcp_orphan go", "background": true}),
    )
    .await;
    let id = v["session_id"].as_str().unwrap().to_owned();
    assert!(common::wait_until(Duration::from_secs(30), || !mock
        .requests_for("mcp_orphan")
        .is_empty()));
    // The client goes away: the server stops its tasks, records them, and exits.
    c.cancel().await.unwrap();
    assert!(
        common::wait_until(Duration::from_secs(20), || show(&w, &id)["status"] == "cancelled"),
        "{}",
        show(&w, &id)
    );
    assert!(
        common::wait_until(Duration::from_secs(10), || common::procs_in(&w.work).is_empty()),
        "left behind: {:?}",
        common::procs_in(&w.work)
    );
    let log = std::fs::read_to_string(w.state.join("logs/mcp.log")).unwrap();
    assert!(log.contains("shutdown: stopping 1 job(s)") && log.contains("stopped"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreground_call_the_client_cancels_stops_its_task() {
    let w = world_or_skip!();
    let mock = MockServer::shared();
    mock.script("mcp_fg_cancel", Script::new().text("never").delay(Duration::from_secs(90)));
    let c = connect(&w, &[]).await;
    let args = json!({"description": "slow", "prompt": "SCENARIO=mcp_fg_cancel go"});
    let Value::Object(map) = args else { unreachable!() };
    let reached_model = async {
        while mock.requests_for("mcp_fg_cancel").is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    // Leaving the select drops the call: the client sends notifications/cancelled.
    tokio::select! {
        r = c.call_tool(CallToolRequestParams::new("task").with_arguments(map)) => {
            panic!("the call returned: {r:?}")
        }
        _ = tokio::time::timeout(Duration::from_secs(30), reached_model) => {}
    }
    let (_, ps) = w.json(&["ps", "--all", "--json"]);
    let id = ps[0]["id"].as_str().expect("one task").to_owned();
    assert!(
        common::wait_until(Duration::from_secs(15), || show(&w, &id)["status"] == "cancelled"),
        "{}",
        show(&w, &id)
    );
    let log = std::fs::read_to_string(w.state.join("logs/mcp.log")).unwrap();
    assert!(log.contains(&format!("{id}: the client cancelled the call")), "{log}");
    c.cancel().await.unwrap();
}

#[test]
fn stdout_carries_only_the_protocol() {
    // Raw JSON-RPC over pipes; stdin closes right after the call, which still gets its answer.
    let w = world_or_skip!();
    MockServer::shared().script("mcp_raw", Script::new().text("raw answer"));
    let mut child = w
        .herd(&["mcp"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let lines = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "task",
            "arguments": {"description": "raw", "prompt": "SCENARIO=mcp_raw go"}}}),
    ];
    let mut stdin = child.stdin.take().unwrap();
    for l in &lines {
        std::io::Write::write_all(&mut stdin, format!("{l}\n").as_bytes()).unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let msgs: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON-RPC ({e}): {l}")))
        .collect();
    assert!(msgs.iter().all(|m| m["jsonrpc"] == "2.0"), "{stdout}");
    let answer = msgs.iter().find(|m| m["id"] == 2).unwrap_or_else(|| panic!("{stdout}"));
    assert_eq!(answer["result"]["structuredContent"]["result"], "raw answer", "{answer}");
}

#[test]
fn sigterm_stops_the_server_and_its_tasks() {
    let w = world_or_skip!();
    let mock = MockServer::shared();
    mock.script("mcp_term", Script::new().text("never").delay(Duration::from_secs(90)));
    let mut child = w
        .herd(&["mcp"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for l in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "task",
            "arguments": {"description": "t", "prompt": "SCENARIO=mcp_term go", "background": true}}}),
    ] {
        std::io::Write::write_all(&mut stdin, format!("{l}\n").as_bytes()).unwrap();
    }
    assert!(common::wait_until(Duration::from_secs(30), || !mock
        .requests_for("mcp_term")
        .is_empty()));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(common::wait_until(Duration::from_secs(20), || child.try_wait().unwrap().is_some()));
    let (_, ps) = w.json(&["ps", "--all", "--json"]);
    assert_eq!(ps[0]["status"], "cancelled", "{ps}");
    assert!(common::procs_in(&w.work).is_empty(), "{:?}", common::procs_in(&w.work));
    drop(stdin);
}

/// The env a `herd mcp` started by claude gets: the mock, a dummy key, the test's HOME.
fn mcp_config(w: &World, dir: &Path) -> std::path::PathBuf {
    let mut env: serde_json::Map<String, Value> =
        herd_testkit::claude_env(MockServer::shared(), &w.home)
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
    env.insert("HERD_STATE_DIR".into(), w.state.display().to_string().into());
    env.insert("HERD_CLAUDE_BIN".into(), w.claude.as_ref().unwrap().display().to_string().into());
    let cfg = json!({"mcpServers": {"herd": {
        "type": "stdio", "command": env!("CARGO_BIN_EXE_herd"), "args": ["mcp", "--allow", "Write"],
        "env": env,
    }}});
    let path = dir.join("mcp.json");
    std::fs::write(&path, cfg.to_string()).unwrap();
    path
}

/// The real claude, given herd as an MCP server, on `prompt`; its JSON result.
fn outer_claude(w: &World, prompt: &str, env: &[(&str, &str)]) -> Value {
    let cfg = mcp_config(w, w.home.as_path());
    let out = std::process::Command::new(w.claude.as_ref().unwrap())
        .args(["-p", prompt, "--output-format", "json", "--mcp-config"])
        .arg(&cfg)
        .args(["--strict-mcp-config", "--allowedTools", "mcp__herd__task"])
        .env_clear()
        .envs(herd_testkit::claude_env(MockServer::shared(), &w.home))
        .envs(env.iter().copied())
        .current_dir(&w.work)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(stdout.trim()).unwrap()
}

#[test]
fn claude_delegates_to_a_herd_subagent_through_mcp() {
    let w = world_or_skip!();
    let mock = MockServer::shared();
    let target = w.work.join("from-subagent.txt");
    mock.script(
        "mcp_outer",
        Script::new()
            .tool_use(
                "mcp__herd__task",
                json!({
                    "description": "write the file",
                    "prompt": "SCENARIO=mcp_inner write it",
                    "agent_cli": "claude",
                    "allow": ["Write"],
                    "cwd": w.work,
                }),
            )
            .text("outer saw: {{last_tool_result}}"),
    );
    mock.script(
        "mcp_inner",
        Script::new()
            .tool_use(
                "Write",
                json!({"file_path": target, "content": "written by herd's subagent\n"}),
            )
            .text("inner: the file is written"),
    );
    let v = outer_claude(&w, "SCENARIO=mcp_outer go", &[]);
    let result = v["result"].as_str().unwrap();
    assert!(result.starts_with("outer saw: "), "{result}");
    // The tool result the outer claude got is herd's JSON with the subagent's output.
    let inner: Value = serde_json::from_str(&result["outer saw: ".len()..]).unwrap();
    assert_eq!(inner["status"], "completed", "{inner}");
    assert_eq!(inner["result"], "inner: the file is written");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "written by herd's subagent\n");
    // The outer model was offered herd's tool; the subagent is in herd's store.
    assert!(mock.requests_for("mcp_outer")[0].body.to_string().contains("mcp__herd__task"));
    let row = show(&w, inner["session_id"].as_str().unwrap());
    assert_eq!(row["name"], "write the file");
    assert_eq!(row["status"], "completed");
    // Nothing but protocol went to stdout; the server logged to the state dir.
    let log = std::fs::read_to_string(w.state.join("logs/mcp.log")).unwrap();
    assert!(log.contains("herd mcp") && log.contains("completed"), "{log}");
}

#[test]
fn a_claude_started_by_herd_cannot_delegate_past_the_depth_limit() {
    // The claude here stands for a subagent herd started (HERD_DEPTH=1); the herd it calls
    // through MCP inherits that depth from it and refuses.
    let w = world_or_skip!();
    let mock = MockServer::shared();
    mock.script(
        "mcp_deep_outer",
        Script::new()
            .tool_use(
                "mcp__herd__task",
                json!({"description": "deeper", "prompt": "SCENARIO=mcp_deep_inner go"}),
            )
            .text("outer saw: {{last_tool_result}}"),
    );
    mock.script("mcp_deep_inner", Script::new().text("must not run"));
    let v = outer_claude(&w, "SCENARIO=mcp_deep_outer go", &[("HERD_DEPTH", "1")]);
    let result = v["result"].as_str().unwrap();
    assert!(
        result.contains("depth exceeded: this herd runs inside a subagent at depth 1"),
        "{result}"
    );
    assert!(mock.requests_for("mcp_deep_inner").is_empty());
}

/// `agent_cli` is the one backend enum: codex and gemini run for an MCP client as for `herd
/// task`, and `acp` runs the ACP agent an agent definition names (never a program the client
/// picks).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_cli_runs_codex_gemini_and_a_defined_acp_agent() {
    let w = world_or_skip!();
    let (Some(codex), Some(gemini), Some(acp)) = (
        herd_testkit::require_codex(),
        herd_testkit::require_gemini(),
        herd_testkit::require_claude_code_acp(),
    ) else {
        return;
    };
    let mock = MockServer::shared();
    std::fs::create_dir_all(w.work.join(".herd/agents")).unwrap();
    std::fs::write(
        w.work.join(".herd/agents/acp-helper.yml"),
        "description: helps\ncli: acp\nacp: {command: [claude-code-acp]}\n",
    )
    .unwrap();
    let mut env: Vec<(String, String)> = herd_testkit::codex_env(mock, &w.home);
    env.extend(herd_testkit::gemini_env(mock, &w.home));
    env.extend(herd_testkit::claude_code_acp_env(mock, &w.home));
    for (k, bin) in
        [("HERD_CODEX_BIN", codex), ("HERD_GEMINI_BIN", gemini), ("HERD_CLAUDE_CODE_ACP_BIN", acp)]
    {
        env.push((k.into(), bin.display().to_string()));
    }
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let c = connect_with(&w, &[], &env).await;
    for (cli, agent) in [("codex", None), ("gemini", None), ("acp", Some("acp-helper"))] {
        let s = format!("mcp_cli_{cli}");
        mock.script(&s, Script::new().text(format!("hello from {cli}")));
        let mut args =
            json!({"description": cli, "prompt": format!("SCENARIO={s} go"), "agent_cli": cli});
        if let Some(a) = agent {
            args["agent_name"] = json!(a);
        }
        let v = ok(&c, "task", args).await;
        assert_eq!(v["status"], "completed", "{v}");
        assert_eq!(v["result"], format!("hello from {cli}"), "{v}");
        assert_eq!(show(&w, v["session_id"].as_str().unwrap())["cli"], cli);
    }
    let e = err(&c, "task", json!({"description": "x", "prompt": "p", "agent_cli": "acp"})).await;
    assert!(e.contains("give agent_name"), "{e}");
    c.cancel().await.unwrap();
}
