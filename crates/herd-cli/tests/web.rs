//! The web dashboard in a real browser (headless chromium over WebDriver) against a real
//! `herd serve --web` running real claude steps against the testkit mock: the plan graph live to
//! all-completed, permission requests answered from the waiting list (Allow, Deny, and an answer
//! given elsewhere), agent output shown as text. Screenshots of each page are artifacts.

mod common;

use std::time::Duration;

use common::browser::artifacts;
use common::web::{LONG, dashboard, detach, ran, run_status};
use common::{World, wait_until};
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

const NODES: &str = "return [...document.querySelectorAll('g.node')]\
    .map(n => n.dataset.step + '=' + n.dataset.status).sort().join(',')";

#[test]
fn the_plan_graph_updates_live_to_all_completed_and_every_page_renders() {
    let w = world_or_skip!();
    let mock = MockServer::shared();
    for s in ["a", "b", "c", "d"] {
        mock.script(
            &format!("web_plan_{s}"),
            Script::new().text(format!("step {s} done")).delay(Duration::from_millis(1500)),
        );
    }
    let (_daemon, base, b) = dashboard(&w);
    let plan = "name: web-diamond\nsteps:\n\
        - {id: a, prompt: \"SCENARIO=web_plan_a go\"}\n\
        - {id: b, prompt: \"SCENARIO=web_plan_b go\", depends_on: [a]}\n\
        - {id: c, prompt: \"SCENARIO=web_plan_c go\", depends_on: [a]}\n\
        - {id: d, prompt: \"SCENARIO=web_plan_d go\", depends_on: [b, c]}\n";
    std::fs::write(w.work.join("web.yml"), plan).unwrap();
    let plan_id = detach(&w, &["run", "web.yml", "--detach"]);
    b.goto(&format!("{base}/#/plan/{plan_id}"));
    b.wait_for(
        "the graph",
        LONG,
        "return document.querySelectorAll('g.node').length === 4",
        json!([]),
    );
    assert_eq!(b.eval("return document.querySelectorAll('path.edge').length", json!([])), 4);
    // The page is not reloaded from here on: whatever changes, changes live.
    b.eval("window.__stay = 42", json!([]));
    let mut seen: Vec<String> = Vec::new();
    let done = "a=completed,b=completed,c=completed,d=completed";
    let finished = wait_until(LONG, || {
        let v = b.eval(NODES, json!([])).as_str().unwrap_or_default().to_owned();
        if seen.last() != Some(&v) {
            seen.push(v.clone());
        }
        v == done
    });
    assert!(finished, "the graph never showed every step completed: {seen:?}");
    assert!(seen.len() >= 3, "the graph did not change step by step: {seen:?}");
    assert!(
        seen.iter().any(|s| s.contains("=running") && s.contains("d=pending")),
        "no step was seen running while d waited: {seen:?}"
    );
    b.wait_for(
        "the plan completed",
        LONG,
        "return document.querySelector('#plan-status')?.dataset.status === 'completed'",
        json!([]),
    );
    assert_eq!(b.eval("return window.__stay", json!([])), 42, "the page was reloaded");
    let log = b.eval("return document.querySelector('#plan-log').innerText", json!([]));
    assert!(log.as_str().unwrap().contains("plan_completed"), "{log}");
    b.screenshot("plan");

    // Runs and plans: the plan with its totals, its four runs.
    b.goto(&format!("{base}/#/"));
    let rows = b.wait_for(
        "the runs list",
        LONG,
        "const p = document.querySelector('#plans tr[data-id=\"' + arguments[0] + '\"]');\
         const r = document.querySelectorAll('#runs tr[data-status=\"completed\"]').length;\
         return p && r >= 4 ? p.innerText : null",
        json!([plan_id]),
    );
    assert!(rows.as_str().unwrap().contains("4 / 0 / 4"), "{rows}");
    b.screenshot("runs");
    // The status filter.
    b.goto(&format!("{base}/#/?status=failed"));
    b.wait_for(
        "the filtered list",
        LONG,
        "return document.querySelector('#runs td.empty') !== null",
        json!([]),
    );

    // A run: its conversation and result.
    let (_, shown) = w.json(&["show", &plan_id, "--json"]);
    let run_b = shown["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "b")
        .and_then(|s| s["subagent_id"].as_str())
        .unwrap()
        .to_owned();
    b.goto(&format!("{base}/#/run/{run_b}"));
    b.wait_for(
        "the conversation",
        LONG,
        "const t = document.querySelector('#conversation')?.innerText || '';\
         return t.includes('step b done') && document.querySelector('#run-result') !== null",
        json!([]),
    );
    b.screenshot("run");

    // The audit log, filtered by run.
    b.goto(&format!("{base}/#/audit?run={run_b}"));
    b.wait_for(
        "audit rows",
        LONG,
        "return document.querySelectorAll('#audit tbody tr[data-type]').length > 0",
        json!([]),
    );
    b.screenshot("audit");
    println!("screenshots in {}", artifacts().display());
}

#[test]
fn the_waiting_list_answers_with_allow_and_deny_and_shows_who_answered() {
    let w = world_or_skip!();
    let mock = MockServer::shared();
    let bash = |cmd: &str| json!({"command": cmd, "description": "t"});
    mock.script(
        "web_allow",
        Script::new().tool_use("Bash", bash("echo RAN-web-7f3a")).text("ok: {{last_tool_result}}"),
    );
    mock.script(
        "web_deny",
        Script::new()
            .tool_use("Bash", bash("echo DENIED-web-7f3a"))
            .text("no: {{last_tool_result}}"),
    );
    mock.script(
        "web_cli",
        Script::new().tool_use("Bash", bash("echo RAN-cli-7f3a")).text("ok: {{last_tool_result}}"),
    );
    let (_daemon, base, b) = dashboard(&w);
    let task = |scenario: &str| {
        detach(
            &w,
            &[
                "task",
                &format!("SCENARIO={scenario} go"),
                "--detach",
                "--permission-timeout",
                "120s",
            ],
        )
    };
    b.goto(&format!("{base}/#/waiting"));
    let card = "return document.querySelector('#waiting-list .card.pending[data-run=\"' + arguments[0] + '\"]')?.innerText";

    // Allow: the call runs, the agent finishes, the page says who answered.
    let allow = task("web_allow");
    let text = b.wait_for("the request in the waiting list", LONG, card, json!([allow]));
    let text = text.as_str().unwrap();
    assert!(text.contains("Bash") && text.contains("echo RAN-web-7f3a"), "{text}");
    assert!(text.contains("the agent itself") && text.contains("waiting"), "{text}");
    b.screenshot("waiting");
    b.click(&format!(
        "#waiting-list .card.pending[data-run=\"{allow}\"] button[data-answer=\"allow\"]"
    ));
    let answered = b.wait_for(
        "the answer",
        LONG,
        "return document.querySelector('#answered-list')?.innerText",
        json!([]),
    );
    assert!(answered.as_str().unwrap().contains("approved by the web dashboard"), "{answered}");
    assert!(
        wait_until(LONG, || run_status(&w, &allow) == "completed"),
        "{}",
        run_status(&w, &allow)
    );
    assert!(ran(mock, "web_allow", "RAN-web-7f3a"), "the mock never saw the command's output");
    let result = w.result_of(&allow);
    assert!(result.as_str().unwrap_or_default().contains("ok: RAN-web-7f3a"), "{result}");

    // Deny with a reason: the run's events show the denial.
    let deny = task("web_deny");
    b.wait_for("the second request", LONG, card, json!([deny]));
    let sel = format!("#waiting-list .card.pending[data-run=\"{deny}\"]");
    b.type_into(&format!("{sel} input.reason"), "not from the dashboard test");
    b.click(&format!("{sel} button[data-answer=\"deny\"]"));
    b.wait_for(
        "the denial",
        LONG,
        "return document.querySelector('#answered-list')?.innerText.includes('denied by the web dashboard: not from the dashboard test')",
        json!([]),
    );
    assert!(wait_until(LONG, || run_status(&w, &deny) == "completed"), "{}", run_status(&w, &deny));
    b.goto(&format!("{base}/#/run/{deny}"));
    let denied = b.wait_for(
        "the denial in the run's events",
        LONG,
        "return document.querySelector('#conversation .perm.d-deny')?.innerText",
        json!([]),
    );
    let denied = denied.as_str().unwrap();
    assert!(denied.contains("denied Bash by") && denied.contains("the web dashboard"), "{denied}");
    assert!(denied.contains("not from the dashboard test"), "{denied}");
    b.screenshot("run-denied");
    assert!(!ran(mock, "web_deny", "DENIED-web-7f3a"), "the denied command ran");

    // Answered elsewhere (herd approve): the first answer wins, and the page says whose it was.
    b.goto(&format!("{base}/#/waiting"));
    let other = task("web_cli");
    b.wait_for("the third request", LONG, card, json!([other]));
    let (_, pending) = w.json(&["approve", "--json"]);
    let req = pending
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["subagent_id"] == other.as_str())
        .and_then(|p| p["id"].as_str())
        .unwrap()
        .to_owned();
    let out = w.run(&["approve", &req]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let line = b.wait_for(
        "the answer given elsewhere",
        LONG,
        "return document.querySelector('#answered-list .card[data-request=\"' + arguments[0] + '\"]')?.innerText",
        json!([req]),
    );
    let line = line.as_str().unwrap();
    assert!(line.contains("approved by") && !line.contains("web dashboard"), "{line}");
    assert_eq!(b.eval(card, json!([other])), Value::Null, "the answered request still waits");
    assert!(wait_until(LONG, || run_status(&w, &other) == "completed"));
}

#[test]
fn agent_output_is_shown_as_text_and_never_runs() {
    let w = world_or_skip!();
    let mock = MockServer::shared();
    let payload = "<img src=x onerror=alert(1)>";
    mock.script(
        "web_xss",
        Script::new().text(format!("{payload} and <script>window.__pwned = 1</script>")),
    );
    let (_daemon, base, b) = dashboard(&w);
    let id = detach(&w, &["task", &format!("SCENARIO=web_xss {payload}"), "--detach"]);
    assert!(wait_until(LONG, || run_status(&w, &id) == "completed"), "{}", run_status(&w, &id));
    b.goto(&format!("{base}/#/run/{id}"));
    let text = b.wait_for(
        "the agent's text",
        LONG,
        "return [...document.querySelectorAll('#conversation .msg.assistant')].map(e => e.textContent).join('\\n')",
        json!([]),
    );
    assert!(text.as_str().unwrap().contains(payload), "{text}");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        b.eval("return document.querySelectorAll('#main img, #main script').length", json!([])),
        0
    );
    assert_eq!(b.eval("return typeof window.__pwned", json!([])), "undefined");
    assert_eq!(b.alert_text(), None, "a dialog opened: agent output ran as script");
    let prompt =
        b.eval("return document.querySelector('#run-head .prompt').textContent", json!([]));
    assert!(prompt.as_str().unwrap().contains(payload), "{prompt}");
    b.screenshot("run-escaped");
}

#[test]
fn allow_always_lets_the_same_call_run_again_without_asking() {
    let w = world_or_skip!();
    let mock = MockServer::shared();
    let call = json!({"command": "echo ALWAYS-web-5c1d", "description": "t"});
    mock.script(
        "web_always",
        Script::new()
            .tool_use("Bash", call.clone())
            .tool_use("Bash", call)
            .text("twice: {{last_tool_result}}"),
    );
    let (_daemon, base, b) = dashboard(&w);
    b.goto(&format!("{base}/#/waiting"));
    let id =
        detach(&w, &["task", "SCENARIO=web_always go", "--detach", "--permission-timeout", "120s"]);
    let card = format!("#waiting-list .card.pending[data-run=\"{id}\"]");
    b.wait_for("the request", LONG, "return !!document.querySelector(arguments[0])", json!([card]));
    b.click(&format!("{card} button[data-answer=\"allow_always\"]"));
    b.wait_for(
        "the answer",
        LONG,
        "return document.querySelector('#answered-list')?.innerText\
         .includes('approved (always) by the web dashboard')",
        json!([]),
    );
    assert!(wait_until(LONG, || run_status(&w, &id) == "completed"), "{}", run_status(&w, &id));
    // The same call ran twice, and a person was asked once.
    let events = w.events(&id);
    let ran_twice = events
        .iter()
        .filter(|e| {
            e["kind"] == "tool_result"
                && e["content"].as_str().is_some_and(|c| c.contains("ALWAYS-web-5c1d"))
        })
        .count();
    assert_eq!(ran_twice, 2, "{events:#?}");
    let asked = events.iter().filter(|e| e["kind"] == "permission_requested").count();
    assert_eq!(asked, 1, "the second identical call was asked again: {events:#?}");
    let requests = w.audit(&id).into_iter().filter(|r| r["event_type"] == "permission_request");
    assert_eq!(requests.count(), 1);
    // The run's page shows both calls with their results, and the one question.
    b.goto(&format!("{base}/#/run/{id}"));
    b.wait_for(
        "both calls with their results",
        LONG,
        "return [...document.querySelectorAll('#conversation .tool')]\
         .filter(t => t.querySelector('.tool-output')?.textContent.includes('ALWAYS-web-5c1d'))\
         .length === 2",
        json!([]),
    );
    assert_eq!(
        b.eval("return document.querySelectorAll('#conversation .perm.asked').length", json!([])),
        1
    );
    assert!(ran(mock, "web_always", "ALWAYS-web-5c1d"));
}

/// The process group of `pid` (field 5 of /proc/PID/stat, after the command's parentheses).
fn pgrp(pid: u32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(2)?.parse().ok()
}

/// Live processes in group `group` (zombies are gone already).
fn in_group(group: i32) -> Vec<(u32, String)> {
    common::procs_with_cmdline("")
        .into_iter()
        .filter(|(pid, _)| pgrp(*pid) == Some(group))
        .collect()
}

/// Not a test by itself: the process the next test SIGKILLs while it holds a browser.
#[test]
#[ignore = "run by the_browser_goes_with_the_test_process_even_when_it_is_killed"]
fn browser_holder() {
    if std::env::var_os("HERD_BROWSER_HOLDER").is_none() {
        return;
    }
    let b = common::browser::Browser::start();
    println!("BROWSER {} {}", b.group(), b.profile().display());
    std::thread::sleep(Duration::from_secs(120));
}

#[test]
fn the_browser_goes_with_the_test_process_even_when_it_is_killed() {
    use std::io::BufRead;
    let mut holder = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["browser_holder", "--exact", "--ignored", "--nocapture"])
        .env("HERD_BROWSER_HOLDER", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::new(holder.stdout.take().unwrap());
    let line = out.lines().map_while(Result::ok).find(|l| l.starts_with("BROWSER "));
    let line = line.expect("the holder started no browser");
    let mut parts = line.split(' ').skip(1);
    let group: i32 = parts.next().unwrap().parse().unwrap();
    let profile = parts.next().unwrap().to_owned();
    // chromedriver, and chromium with its helpers, all in the watchdog's group.
    let before = in_group(group);
    let names: Vec<&str> = before.iter().map(|(_, c)| c.as_str()).collect();
    assert!(names.iter().any(|c| c.starts_with(common::browser::CHROMEDRIVER)), "{names:#?}");
    assert!(names.iter().any(|c| c.contains(&profile)), "no chromium in the group: {names:#?}");
    for (pid, cmd) in common::procs_with_cmdline(&profile) {
        assert_eq!(pgrp(pid), Some(group), "{pid} {cmd} left the group");
    }
    // The test process dies without running any destructor, as under nextest's timeout.
    holder.kill().unwrap();
    holder.wait().unwrap();
    let gone = wait_until(Duration::from_secs(20), || {
        in_group(group).is_empty() && common::procs_with_cmdline(&profile).is_empty()
    });
    let left = [in_group(group), common::procs_with_cmdline(&profile)].concat();
    let _ = std::fs::remove_dir_all(&profile);
    assert!(gone, "left behind: {left:#?}");
    println!("{} processes of the killed test's browser, none left", before.len());
}
