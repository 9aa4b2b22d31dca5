//! The plan page in a real browser against a real `herd serve --web` and real claude steps: a
//! failed step shows its reason and its descendants are marked dependency_failed; isolated steps
//! in a git repository show their merge order and merge results.

mod common;

use std::time::Duration;

use common::web::{LONG, dashboard, detach};
use common::{World, git, init_repo};
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

/// Each node of the graph as [step, status, class, the reason it shows, its tooltip].
const NODES: &str = "return [...document.querySelectorAll('g.node')].map(n => [n.dataset.step, \
    n.dataset.status, n.getAttribute('class'), n.querySelector('.node-reason').textContent, \
    n.querySelector('title').textContent])";

fn node<'a>(nodes: &'a Value, step: &str) -> &'a Value {
    nodes
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n[0] == step)
        .unwrap_or_else(|| panic!("{step}: {nodes}"))
}

#[test]
fn a_failed_step_shows_its_reason_and_its_descendants_are_marked_dependency_failed() {
    let w = world_or_skip!();
    let mock = MockServer::shared();
    mock.script("web_fail_a", Script::new().text("a done"));
    mock.script("web_fail_b", Script::new().error(500, "mock: forced 500"));
    for s in ["c", "d", "e"] {
        mock.script(&format!("web_fail_{s}"), Script::new().text(format!("{s} done")));
    }
    let (_daemon, base, b) = dashboard(&w);
    // b fails; c waits for b and d for c (never started); e, beside them, completes.
    let plan = "name: web-fail\ndefaults: {cli: claude, timeout: 60s}\nsteps:\n\
        - {id: a, prompt: \"SCENARIO=web_fail_a go\"}\n\
        - {id: b, prompt: \"SCENARIO=web_fail_b go\", depends_on: [a]}\n\
        - {id: c, prompt: \"SCENARIO=web_fail_c go\", depends_on: [b]}\n\
        - {id: d, prompt: \"SCENARIO=web_fail_d go\", depends_on: [c]}\n\
        - {id: e, prompt: \"SCENARIO=web_fail_e go\", depends_on: [a]}\n";
    std::fs::write(w.work.join("fail.yml"), plan).unwrap();
    let plan_id = detach(&w, &["run", "fail.yml", "--detach"]);
    b.goto(&format!("{base}/#/plan/{plan_id}"));
    b.wait_for(
        "the plan failed",
        LONG,
        "return document.querySelector('#plan-status')?.dataset.status === 'failed'",
        json!([]),
    );
    let nodes = b.wait_for(
        "every step settled in the graph",
        LONG,
        "const n = (function () { NODES }()); \
         return n.every(x => x[1] === 'completed' || x[1] === 'failed') ? n : null"
            .replace("NODES", NODES)
            .as_str(),
        json!([]),
    );
    for s in ["a", "e"] {
        assert_eq!(node(&nodes, s)[1], "completed", "{nodes}");
    }
    // The failed step: red, its reason on the node and in full in its tooltip.
    let failed = node(&nodes, "b");
    assert_eq!(failed[1], "failed", "{nodes}");
    assert!(!failed[2].as_str().unwrap().contains("dep-failed"), "{nodes}");
    assert!(failed[3].as_str().unwrap().starts_with("api_error(500)"), "{nodes}");
    assert!(failed[4].as_str().unwrap().contains("api_error(500)"), "{nodes}");
    // Its descendants: failed, marked as such, and never started.
    for s in ["c", "d"] {
        let n = node(&nodes, s);
        assert_eq!(n[1], "failed", "{nodes}");
        assert!(n[2].as_str().unwrap().split(' ').any(|c| c == "dep-failed"), "{nodes}");
        assert_eq!(n[3], "dependency failed", "{nodes}");
        assert!(n[4].as_str().unwrap().contains("dependency_failed(b)"), "{nodes}");
    }
    // The steps table says the same in words.
    let rows = b.eval(
        "return [...document.querySelectorAll('#steps tbody tr')].map(r => [r.dataset.step, \
         r.children[2].textContent, r.children[2].className, r.children[8].textContent])",
        json!([]),
    );
    let row = |s: &str| rows.as_array().unwrap().iter().find(|r| r[0] == s).unwrap().clone();
    assert!(row("b")[1].as_str().unwrap().starts_with("api_error(500)"), "{rows}");
    for s in ["c", "d"] {
        // The failure they inherit is b's, however far down.
        assert_eq!(row(s)[1], "dependency_failed(b)", "{rows}");
        assert_eq!(row(s)[2], "dep-failed-text", "{rows}");
        assert_eq!(row(s)[3], "", "{s} has a run: {rows}");
    }
    assert_ne!(row("b")[3], "", "b has no run: {rows}");
    b.screenshot("plan-failed");
}

#[test]
fn isolated_steps_show_their_merge_order_and_results() {
    let w = world_or_skip!();
    init_repo(&w);
    let mock = MockServer::shared();
    // Finishing order c, b, a; the merge order is still the plan's: a, b, c.
    for (s, delay) in [("a", 2500), ("b", 1200), ("c", 0)] {
        mock.script(
            &format!("web_iso_{s}"),
            Script::new()
                .tool_use(
                    "Bash",
                    json!({"command": format!("echo {s} > {s}.txt"), "description": "work"}),
                )
                .text("done")
                .delay(Duration::from_millis(delay)),
        );
    }
    let (_daemon, base, b) = dashboard(&w);
    let plan = "name: web-iso\nstrategy: parallel\n\
        defaults: {cli: claude, timeout: 60s, workspace: isolated, allow: [Bash]}\nsteps:\n\
        - {id: a, prompt: \"SCENARIO=web_iso_a go\"}\n\
        - {id: b, prompt: \"SCENARIO=web_iso_b go\"}\n\
        - {id: c, prompt: \"SCENARIO=web_iso_c go\"}\n";
    // Beside the state directory: the plan file never makes the checkout dirty.
    let file = w.state.parent().unwrap().join("iso.yml");
    std::fs::write(&file, plan).unwrap();
    let plan_id = detach(&w, &["run", file.to_str().unwrap(), "--detach"]);
    b.goto(&format!("{base}/#/plan/{plan_id}"));
    b.wait_for(
        "the plan completed",
        LONG,
        "return document.querySelector('#plan-status')?.dataset.status === 'completed'",
        json!([]),
    );
    let integ = format!("herd/{plan_id}/integration");
    let merges = b.wait_for(
        "every merge in the table",
        LONG,
        "const r = [...document.querySelectorAll('#merge-table tbody tr')].map(t => [t.dataset.step, \
         t.dataset.merge, t.children[0].textContent, t.children[2].textContent, t.children[4].textContent]); \
         return r.length === 3 && r.every(x => x[1] === 'merged') ? r : null",
        json!([]),
    );
    let text = b.eval("return document.querySelector('#merges').innerText", json!([]));
    assert!(text.as_str().unwrap().contains(&format!("merged into {integ}")), "{text}");
    // Plan order, numbered, each with its branch and the merge commit on the integration branch.
    let log = git(&w.work, &["log", "--first-parent", "--format=%H %s", "-3", &integ]);
    let commits: Vec<(&str, &str)> =
        log.lines().rev().map(|l| l.split_once(' ').unwrap()).collect();
    for (i, (row, id)) in merges.as_array().unwrap().iter().zip(["a", "b", "c"]).enumerate() {
        assert_eq!(row[0], id, "{merges}");
        assert_eq!(row[2], (i + 1).to_string(), "{merges}");
        assert_eq!(row[3], format!("herd/{plan_id}/{id}"), "{merges}");
        let (sha, subject) = commits[i];
        assert!(subject.starts_with(&format!("herd: merge step {id} (")), "{log}");
        assert_eq!(row[4], &sha[..12], "{merges}\n{log}");
    }
    b.screenshot("plan-merges");
}
