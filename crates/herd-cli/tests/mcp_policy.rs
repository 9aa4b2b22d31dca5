//! `herd mcp` trusts its server, not its client: a client's allow, tools and auto_approve only
//! narrow the server's policy; tasks stay in the project; no error quotes a file; a line that is
//! not JSON gets a JSON-RPC parse error. The subagents are the real claude against the mock.

mod common;

use std::time::Duration;

use common::World;
use common::mcp::{connect, err, ok};
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

fn bash(cmd: &str) -> Value {
    json!({"command": cmd, "description": "run it"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_allow_does_not_widen_the_servers_policy() {
    let w = world_or_skip!();
    let target = w.work.join("pwned");
    MockServer::shared().script(
        "mcp_widen",
        Script::new()
            .tool_use("Bash", bash(&format!("touch {}", target.display())))
            .text("done: {{last_tool_result}}"),
    );
    // The server allows nothing that needs a person; the client asks for Bash and auto-approve.
    let c = connect(&w, &[]).await;
    let e = err(
        &c,
        "task",
        json!({"description": "widen", "prompt": "SCENARIO=mcp_widen go", "tools": ["Bash"],
               "auto_approve": true}),
    )
    .await;
    assert!(e.contains("auto-approve is not allowed here"), "{e}");
    // Its allow rule is only a wish: the call waits for a person, and is denied when nobody
    // answers (a short timeout, from the project's config).
    std::fs::create_dir_all(w.work.join(".herd")).unwrap();
    std::fs::write(w.work.join(".herd/config.yml"), "permission_timeout: 2s\n").unwrap();
    let v = ok(
        &c,
        "task",
        json!({"description": "widen", "prompt": "SCENARIO=mcp_widen go", "allow": ["Bash"]}),
    )
    .await;
    assert_eq!(
        (&v["status"], &v["state"]),
        (&json!("completed"), &json!("completed_with_denials"))
    );
    assert!(!target.exists(), "a client's allow ran a command the server never allowed");
    assert!(v["result"].as_str().unwrap().contains("nobody answered"), "{v}");
    c.cancel().await.unwrap();

    // Started with the server's allow, the same request runs it.
    let c = connect(&w, &["--allow", "Bash(touch *)"]).await;
    let v = ok(
        &c,
        "task",
        json!({"description": "allowed", "prompt": "SCENARIO=mcp_widen go", "allow": ["Bash"]}),
    )
    .await;
    assert_eq!(v["status"], "completed", "{v}");
    assert!(target.exists());
    c.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_and_tasks_stay_inside_the_project_and_errors_quote_no_file() {
    let w = World::new();
    let c = connect(&w, &[]).await;
    let e = err(&c, "run_plan", json!({"path": "/etc/passwd"})).await;
    assert!(e.starts_with("PERMISSION_DENIED") && e.contains("outside the allowed roots"), "{e}");
    assert!(!e.contains("root:"), "the file's content leaked: {e}");
    // A secret in the project that is not a plan file is not read as one.
    std::fs::write(w.work.join(".env"), "API_TOKEN=hunter2\n").unwrap();
    let e = err(&c, "run_plan", json!({"path": ".env"})).await;
    assert!(e.contains("a plan file ends in .yml, .yaml or .json"), "{e}");
    assert!(!e.contains("hunter2"), "{e}");
    let e = err(&c, "task", json!({"description": "x", "prompt": "p", "cwd": "/"})).await;
    assert!(e.contains("outside the allowed roots"), "{e}");
    // The log never holds a file's content either.
    let log = std::fs::read_to_string(w.state.join("logs/mcp.log")).unwrap();
    assert!(!log.contains("hunter2") && !log.contains("root:x:"), "{log}");
    c.cancel().await.unwrap();
}

#[test]
fn a_line_that_is_not_json_gets_a_parse_error_reply() {
    let w = World::new();
    let mut child = w
        .herd(&["mcp"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}});
    for line in [init.to_string().as_str(), "this is not json", "{\"jsonrpc\": \"2.0\", \"id\": 2"]
    {
        std::io::Write::write_all(&mut stdin, format!("{line}\n").as_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let msgs: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let errors: Vec<&Value> = msgs.iter().filter(|m| m["error"]["code"] == -32700).collect();
    assert_eq!(errors.len(), 2, "{msgs:?}");
    assert!(errors.iter().all(|e| e["id"].is_null() && e["jsonrpc"] == "2.0"));
    assert!(
        msgs.iter().any(|m| m["id"] == 1 && m["result"].is_object()),
        "the session still works"
    );
}
