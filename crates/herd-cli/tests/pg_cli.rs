//! The CLI on a shared PostgreSQL store, each "machine" a world of its own (HOME, project, state
//! directory): what one records, the others' ps/show/logs, a daemon and `herd plans` see;
//! plans submitted with `herd run --store` and served by `herd worker`.

mod common;

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::daemon::Daemon;
use common::{World, wait_until};
use herd_server::pb;
use herd_testkit::PgDb;
use serde_json::Value;

/// `herd --store <pg> ARGS` in world `w`.
fn herd(w: &World, pg: &PgDb, args: &[&str]) -> Command {
    let mut c = w.herd(&["--store", &pg.url]);
    c.args(args);
    c
}

/// `herd --store <pg> ARGS` in `w`, stdout parsed as JSON: (exit code, value).
fn json(w: &World, pg: &PgDb, args: &[&str]) -> (i32, Value) {
    let out = herd(w, pg, args).output().unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "herd {args:?}: stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), v)
}

/// A plan of command steps: `a`, then `b` after it; each prints its name.
const PLAN: &str = "name: shared\ndefaults: {cli: command, prompt: go}\nsteps:\n  \
    - {id: a, command: [sh, -c, 'echo step-a']}\n  \
    - {id: b, depends_on: [a], command: [sh, -c, 'echo step-b']}\n";

/// `herd run --store <pg> plan.yml --json` started in `w` (it waits for the workers).
fn submit(w: &World, pg: &PgDb) -> Child {
    run_plan(w, pg, "plan.yml", PLAN)
}

/// The id of the one plan in the store, once it has been submitted.
fn submitted(pg: &PgDb) -> String {
    let mut id = None;
    let found = wait_until(Duration::from_secs(30), || {
        id = pg
            .try_rows("SELECT id FROM orchestrations")
            .ok()
            .and_then(|r| r.first().and_then(|row| row[0].clone()));
        id.is_some()
    });
    assert!(found, "no plan was submitted");
    id.unwrap()
}

/// `cmd` started with its output captured.
fn spawn(mut cmd: Command) -> Child {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

/// `herd run --store <pg> FILE --json` of plan `yaml`, written to `file` in `w`.
fn run_plan(w: &World, pg: &PgDb, file: &str, yaml: &str) -> Child {
    std::fs::write(w.work.join(file), yaml).unwrap();
    spawn(herd(w, pg, &["run", file, "--json"]))
}

/// SIGTERM (drain) to `worker`, then its exit code, stdout and stderr.
fn stop_worker(worker: Child) -> (i32, String, String) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(worker.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    finish(worker, Duration::from_secs(30))
}

/// `herd worker --store <pg> --drain` in `w`: its summary once the queue is empty.
fn drain_worker(w: &World, pg: &PgDb) -> Value {
    let (code, v) = json(w, pg, &["worker", "--drain"]);
    assert_eq!(code, 0, "{v}");
    v
}

/// Wait for `child` to exit (at most `limit`): its exit code, stdout, stderr.
fn finish(mut child: Child, limit: Duration) -> (i32, String, String) {
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("still running after {limit:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_task_recorded_on_one_machine_is_listed_shown_and_logged_on_another() {
    let pg = herd_testkit::pg_db();
    let (here, there) = (World::new(), World::new());
    let (code, v) = json(
        &here,
        &pg,
        &[
            "task",
            "list me",
            "--cli",
            "command",
            "--json",
            "--",
            "sh",
            "-c",
            "echo one; echo two >&2",
        ],
    );
    assert_eq!(code, 0, "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    assert_eq!(v["status"], "completed");
    assert!(!there.state.exists(), "the other machine has not run herd yet");

    // Another machine: its own state directory, project and HOME; the same database.
    let (code, ps) = json(&there, &pg, &["ps", "--all", "--json"]);
    assert_eq!(code, 0, "{ps}");
    let row = ps.as_array().unwrap().iter().find(|r| r["id"] == id.as_str());
    let row = row.unwrap_or_else(|| panic!("{id} not listed: {ps}"));
    assert_eq!((&row["status"], &row["prompt"]), (&"completed".into(), &"list me".into()));

    let (code, shown) = json(&there, &pg, &["show", &id, "--json"]);
    assert_eq!(code, 0, "{shown}");
    assert_eq!(shown["status"], "completed");
    assert_eq!(shown["result"], v["result"]);
    // By a prefix of its id, as a person types it.
    let out = herd(&there, &pg, &["show", &id[..8]]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("status: completed"), "{text}");

    let out = herd(&there, &pg, &["logs", &id, "--json"]).output().unwrap();
    let events: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!("logs --json ({e}): {}", String::from_utf8_lossy(&out.stderr));
    });
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"subagent_created"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"subagent_closed"), "{kinds:?}");
    assert!(kinds.contains(&"text") && kinds.contains(&"stderr"), "{kinds:?}");
    let out = herd(&there, &pg, &["logs", &id]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("one") && text.contains("two"), "{text}");
}

/// `GET path` on the dashboard at `base` (`http://127.0.0.1:PORT`) with its token: the JSON.
fn api_get(base: &str, token: &str, path: &str) -> Value {
    let addr = base.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}\n{body}");
    // Chunked or not: the JSON is from the first `{`/`[` to the last `}`/`]`.
    let start = body.find(['{', '[']).unwrap();
    let end = body.rfind(['}', ']']).unwrap();
    serde_json::from_str(&body[start..=end]).unwrap_or_else(|e| panic!("{e}: {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_on_the_shared_store_shows_a_plan_that_workers_ran() {
    let pg = herd_testkit::pg_db();
    let (served, submitter, worker) = (World::new(), World::new(), World::new());
    let daemon = Daemon::start(&served, &["--store", &pg.url, "--web", "127.0.0.1:0"]);

    let run = submit(&submitter, &pg);
    let id = submitted(&pg);
    let summary = tokio::task::block_in_place(|| drain_worker(&worker, &pg));
    assert_eq!((&summary["ran"], &summary["completed"]), (&2.into(), &2.into()), "{summary}");
    let (code, out, err) = finish(run, Duration::from_secs(30));
    assert_eq!(code, 0, "{out}\n{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!((&v["id"], &v["status"]), (&id.as_str().into(), &"completed".into()), "{v}");

    // gRPC: the plan and the runs the worker made for its steps.
    let mut c = daemon.client().await;
    let info = c
        .get_orchestration(pb::GetOrchestrationRequest { orchestration_id: id.clone() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((info.status.as_str(), info.total_steps, info.completed_steps), ("completed", 2, 2));
    let steps: Vec<(&str, &str)> =
        info.steps.iter().map(|s| (s.id.as_str(), s.status.as_str())).collect();
    assert_eq!(steps, [("a", "completed"), ("b", "completed")]);
    let runs = c
        .list_subagents(pb::ListSubagentsRequest {
            orchestration_id: id.clone(),
            all: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .subagents;
    let mut results: Vec<String> = runs.iter().map(|r| r.result.trim().to_owned()).collect();
    results.sort();
    assert_eq!(results, ["step-a", "step-b"], "{runs:?}");

    // The dashboard lists it among the cluster's plans.
    let url = daemon.web_url(&served);
    let (base, token) = url.split_once("/?token=").unwrap();
    let overview = tokio::task::block_in_place(|| api_get(base, token, "/api/overview"));
    let plans = overview["plans"].as_array().unwrap();
    assert!(
        plans.iter().any(|p| p["id"] == id.as_str() && p["status"] == "completed"),
        "{overview}"
    );
    // And `herd plans` on any machine.
    let (_, plans) = json(&served, &pg, &["plans", "--all", "--json"]);
    assert!(plans.as_array().unwrap().iter().any(|p| p["id"] == id.as_str()), "{plans}");
}

#[test]
fn a_queued_plan_outlives_the_herd_run_that_submitted_it() {
    let pg = herd_testkit::pg_db();
    let (submitter, worker) = (World::new(), World::new());
    let mut run = submit(&submitter, &pg);
    let id = submitted(&pg);
    // The person stops watching (the terminal closed): the plan is the workers' now.
    run.kill().unwrap();
    run.wait().unwrap();
    let summary = drain_worker(&worker, &pg);
    assert_eq!(summary["completed"], 2, "{summary}");
    let (_, plans) = json(&worker, &pg, &["plans", "--all", "--json"]);
    let p = plans.as_array().unwrap().iter().find(|p| p["id"] == id.as_str()).cloned();
    assert_eq!(p.unwrap_or_default()["status"], "completed", "{plans}");
}

#[test]
fn a_worker_whose_database_connections_are_killed_goes_on_serving() {
    let pg = herd_testkit::pg_db();
    let (submitter, machine) = (World::new(), World::new());
    let mut worker = spawn(herd(&machine, &pg, &["worker", "--lease", "3s"]));
    let registered = || pg.try_rows("SELECT count(*) FROM workers WHERE status = 'active'");
    assert!(
        wait_until(Duration::from_secs(30), || registered()
            .is_ok_and(|r| r[0][0].as_deref() == Some("1"))),
        "the worker did not register"
    );
    // Every connection to the database but this one: the worker's own, its listener's, its
    // store writer's.
    let killed = pg.rows(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 10000)) FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
    );
    assert_ne!(killed[0][0].as_deref(), Some("0"));

    let mut run = submit(&submitter, &pg);
    // (Before the PG connection layer opened a closed connection again, the worker died on
    // its next call: nothing ran the plan.)
    let served = wait_until(Duration::from_secs(60), || {
        run.try_wait().unwrap().is_some() || worker.try_wait().unwrap().is_some()
    });
    if let Some(status) = worker.try_wait().unwrap() {
        let _ = run.kill();
        let (_, _, err) = finish(worker, Duration::from_secs(5));
        panic!("the worker died ({status}): {err}");
    }
    assert!(served, "the plan did not end in 60 s");
    let (code, out, err) = finish(run, Duration::from_secs(5));
    assert_eq!(code, 0, "{out}\n{err}");
    let (code, out, err) = stop_worker(worker);
    assert_eq!(code, 0, "{err}");
    let summary: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(summary["completed"], 2, "{summary}");
}

#[test]
fn a_worker_outlives_a_database_outage_and_every_step_ends_once() {
    let pg = herd_testkit::pg_db();
    let (submitter, machine) = (World::new(), World::new());
    let mut worker =
        spawn(herd(&machine, &pg, &["worker", "--lease", "2s", "--max-concurrent", "3"]));
    let plan = "name: outage\ndefaults: {cli: command, prompt: go, retries: 2}\nsteps:\n\
                  - {id: a, command: [sh, -c, 'sleep 1']}\n\
                  - {id: b, command: [sh, -c, 'sleep 1']}\n\
                  - {id: c, depends_on: [a, b], command: [sh, -c, 'sleep 0.5']}\n";
    let run = run_plan(&submitter, &pg, "outage.yml", plan);
    let started = wait_until(Duration::from_secs(30), || {
        pg.try_rows("SELECT count(*) FROM orchestration_steps WHERE status = 'running'")
            .is_ok_and(|r| r[0][0].as_deref() == Some("2"))
    });
    assert!(started, "a and b did not start");
    // The database goes away while a and b run (longer than a lease), then comes back.
    pg.set_up(false);
    std::thread::sleep(Duration::from_secs(3));
    pg.set_up(true);
    let (code, out, err) = finish(run, Duration::from_secs(60));
    if let Some(status) = worker.try_wait().unwrap() {
        let (_, _, werr) = finish(worker, Duration::from_secs(5));
        panic!("the worker died in the outage ({status}): {werr}");
    }
    assert_eq!(code, 0, "{out}\n{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    for s in report["steps"].as_array().unwrap() {
        assert_eq!(s["status"], "completed", "{report:#}");
    }
    // One completed record per step, whatever ran twice.
    let done = pg.rows(
        "SELECT step_key, count(*) FROM plan_events WHERE kind = 'step_completed' \
         GROUP BY step_key ORDER BY step_key",
    );
    let done: Vec<(String, String)> =
        done.into_iter().map(|r| (r[0].clone().unwrap(), r[1].clone().unwrap())).collect();
    let once = |k: &str| (k.to_owned(), "1".to_owned());
    assert_eq!(done, [once("a"), once("b"), once("c")]);
    let (code, _, err) = stop_worker(worker);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("trying again"), "the outage went unnoticed: {err}");
}

#[test]
fn herd_cancel_stops_a_plan_served_by_workers() {
    let pg = herd_testkit::pg_db();
    let (submitter, machine, person) = (World::new(), World::new(), World::new());
    let worker = spawn(herd(&machine, &pg, &["worker", "--max-concurrent", "1"]));
    let plan = "name: long\ndefaults: {cli: command, prompt: go}\nsteps:\n\
                  - {id: long, command: [sleep, '60']}\n\
                  - {id: next, command: ['true']}\n\
                  - {id: after, depends_on: [long], command: ['true']}\n";
    let run = run_plan(&submitter, &pg, "long.yml", plan);
    let started = wait_until(Duration::from_secs(30), || {
        pg.try_rows("SELECT count(*) FROM orchestration_steps WHERE status = 'running' AND subagent_id IS NOT NULL")
            .is_ok_and(|r| r[0][0].as_deref() == Some("1"))
    });
    assert!(started, "the long step did not start");
    let id = submitted(&pg);
    // From a third machine: the plan stops, its running step's agent with it.
    let t = Instant::now();
    let out = herd(&person, &pg, &["cancel", &id]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(t.elapsed() < Duration::from_secs(20), "cancel took {:?}", t.elapsed());
    let (code, out, err) = finish(run, Duration::from_secs(30));
    assert_eq!(code, 1, "{out}\n{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["status"], "cancelled", "{report:#}");
    for s in report["steps"].as_array().unwrap() {
        // `next` may have run before the cancel (one worker, one at a time: it waits).
        assert_ne!(s["status"], "running", "{report:#}");
        assert_ne!(s["status"], "pending", "{report:#}");
    }
    let long =
        report["steps"].as_array().unwrap().iter().find(|s| s["step_key"] == "long").unwrap();
    assert_eq!(long["status"], "cancelled", "{report:#}");
    let (code, _, err) = stop_worker(worker);
    assert_eq!(code, 0, "{err}");
}
