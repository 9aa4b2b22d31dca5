//! An MCP client session with `herd mcp` for the end-to-end tests: connect, call a tool, read
//! its JSON or its error.

use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;

use super::World;

pub type Client = RunningService<RoleClient, ()>;

/// `herd mcp ARGS` in the world (mock as the model API, fresh HOME), as an MCP client session.
pub async fn connect(w: &World, args: &[&str]) -> Client {
    connect_with(w, args, &[]).await
}

pub async fn connect_with(w: &World, args: &[&str], env: &[(&str, &str)]) -> Client {
    let mut argv = vec!["mcp"];
    argv.extend_from_slice(args);
    let mut cmd = w.herd(&argv);
    cmd.envs(env.iter().copied());
    ().serve(TokioChildProcess::new(tokio::process::Command::from(cmd)).unwrap()).await.unwrap()
}

pub async fn call(c: &Client, tool: &str, args: Value) -> CallToolResult {
    let Value::Object(map) = args else { panic!("arguments must be an object") };
    let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(map);
    tokio::time::timeout(Duration::from_secs(120), c.call_tool(params))
        .await
        .unwrap_or_else(|_| panic!("{tool} did not answer in 120s"))
        .unwrap()
}

/// A successful call's JSON.
pub async fn ok(c: &Client, tool: &str, args: Value) -> Value {
    let r = call(c, tool, args.clone()).await;
    assert_ne!(r.is_error, Some(true), "{tool} {args} failed: {}", text(&r));
    let v = r.structured_content.clone().expect("structured content");
    // The same JSON is in the text content, for clients that read only text.
    assert_eq!(serde_json::from_str::<Value>(&text(&r)).unwrap(), v);
    v
}

/// A failed call's message.
pub async fn err(c: &Client, tool: &str, args: Value) -> String {
    let r = call(c, tool, args.clone()).await;
    assert_eq!(r.is_error, Some(true), "{tool} {args} should fail: {}", text(&r));
    text(&r)
}

pub fn text(r: &CallToolResult) -> String {
    r.content.iter().filter_map(|c| c.as_text().map(|t| t.text.clone())).collect()
}

pub fn show(w: &World, id: &str) -> Value {
    let (code, v) = w.json(&["show", id, "--json"]);
    assert_eq!(code, 0, "{v}");
    v
}
