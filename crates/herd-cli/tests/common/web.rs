//! The dashboard's test helpers: a daemon serving it with a browser signed in, detached runs
//! and their status, whether the mock saw a command's output.

use std::time::Duration;

use herd_testkit::MockServer;
use serde_json::json;

use super::World;
use super::browser::Browser;
use super::daemon::Daemon;

pub const LONG: Duration = Duration::from_secs(60);

/// A daemon with the dashboard, and a browser signed in to it: (daemon, base URL, browser).
pub fn dashboard(w: &World) -> (Daemon, String, Browser) {
    let daemon = Daemon::start(w, &["--web", "127.0.0.1:0"]);
    let url = daemon.web_url(w);
    let base = url.split("/?token=").next().unwrap().to_owned();
    let b = Browser::start();
    // Without the token: refused.
    b.goto(&format!("{base}/"));
    let body = b.eval("return document.body.innerText", json!([]));
    assert!(body.as_str().unwrap().contains("needs its token"), "{body}");
    // The URL with the token: a cookie, then the page without the token in its address.
    b.goto(&url);
    b.wait_for("the runs page", LONG, "return document.body.dataset.page === 'runs'", json!([]));
    let href = b.eval("return location.href", json!([]));
    assert!(!href.as_str().unwrap().contains("token"), "{href}");
    (daemon, base, b)
}

pub fn detach(w: &World, args: &[&str]) -> String {
    let out = w.run(args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

pub fn run_status(w: &World, id: &str) -> String {
    w.json(&["show", id, "--json"]).1["status"].as_str().unwrap_or_default().to_owned()
}

/// Whether the mock was sent `marker` as a command's output: more often than in the command
/// (`echo marker`) itself.
pub fn ran(mock: &MockServer, scenario: &str, marker: &str) -> bool {
    mock.requests_for(scenario).iter().any(|r| {
        let body = r.body.to_string();
        body.matches(marker).count() > body.matches(&format!("echo {marker}")).count()
    })
}
