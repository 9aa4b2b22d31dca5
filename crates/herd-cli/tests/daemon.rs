//! `herd serve` end to end: the real daemon driven over its socket with a tonic client, the
//! real claude against the testkit mock — spawn, watch, answer a permission request, send a
//! second message the mock sees, cancel another, replay from a sequence, one daemon per state.

mod common;

use std::time::Duration;

use common::daemon::{Daemon, claude_task, watch_all};
use common::{World, wait_until};
use herd_server::pb;
use herd_server::pb::agent_event::Event;
use herd_server::tonic;
use herd_testkit::{MockServer, Script};
use serde_json::json;

macro_rules! world_or_skip {
    () => {{
        let w = World::new();
        if w.claude.is_none() {
            return;
        }
        w
    }};
}

fn kinds(events: &[pb::AgentEvent]) -> Vec<&str> {
    events.iter().map(|e| e.kind.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_spawns_watches_answers_messages_and_cancels_through_the_daemon() {
    let w = world_or_skip!();
    let made = w.work.join("made-by-the-agent.txt");
    let mock = MockServer::shared();
    mock.script(
        "d_talk",
        Script::new()
            .tool_use(
                "Bash",
                json!({"command": format!("touch {}", made.display()), "description": "t"}),
            )
            .text("first turn done: {{last_tool_result}}")
            .text("second turn: got it"),
    );
    mock.script("d_slow", Script::new().text("never seen").delay(Duration::from_secs(120)));
    let daemon = Daemon::start(&w, &[]);
    let mut c = daemon.client().await;

    let spawned = c.spawn_subagent(claude_task("SCENARIO=d_talk go")).await.unwrap().into_inner();
    let id = spawned.subagent_id.clone();
    assert_eq!(spawned.cli, "claude");
    let req = pb::WatchSubagentRequest {
        subagent_id: id.clone(),
        from_sequence: 0,
        ..Default::default()
    };
    let mut stream = c.watch_subagent(req).await.unwrap().into_inner();
    let mut seen = Vec::new();
    // Up to the permission request: the call waits for a person.
    let request = loop {
        let e =
            stream.message().await.unwrap().expect("the stream ended before a permission request");
        seen.push(e.clone());
        if let Some(Event::PermissionRequested(p)) = e.event {
            break p.request_id;
        }
    };
    assert!(!made.exists(), "the call ran before it was answered");
    // A second user message while the first turn is under way, then the answer.
    let msg = pb::SubagentInput {
        subagent_id: id.clone(),
        input: Some(pb::subagent_input::Input::Message("SECOND-MESSAGE-7f3a: and then?".into())),
        caller: None,
    };
    let sent = c.send_to_subagent(msg).await.unwrap().into_inner();
    assert!(sent.accepted);
    let answer = pb::SubagentInput {
        subagent_id: id.clone(),
        input: Some(pb::subagent_input::Input::Permission(pb::PermissionAnswer {
            request_id: request.clone(),
            allow: true,
            ..Default::default()
        })),
        caller: None,
    };
    let answered = c.send_to_subagent(answer).await.unwrap().into_inner();
    assert_eq!(answered.permission.unwrap().status, "approved");
    while let Some(e) = stream.message().await.unwrap() {
        seen.push(e);
    }
    // Every event once, in order, ending with the close.
    let seqs: Vec<u64> = seen.iter().map(|e| e.sequence).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "{:?}", kinds(&seen));
    assert_eq!(seen.last().unwrap().kind, "subagent_closed");
    assert!(made.exists(), "the approved call did not run");
    let results: Vec<_> = seen
        .iter()
        .filter_map(|e| match &e.event {
            Some(Event::Result(r)) => Some(r.text.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2, "one result per user message: {:?}", kinds(&seen));
    assert!(results[1].contains("second turn"), "{results:?}");
    assert!(
        seen.iter().any(|e| matches!(&e.event, Some(Event::UserText(t)) if t.text.contains("SECOND-MESSAGE-7f3a"))),
        "the message is in the run's record"
    );
    // The model saw the second message.
    let asked = mock.requests_for("d_talk");
    assert!(
        asked.iter().any(|r| r.body.to_string().contains("SECOND-MESSAGE-7f3a")),
        "the mock never received the second message"
    );
    let info = c
        .get_subagent(pb::GetSubagentRequest { subagent_id: id.clone() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.status_name, "completed");
    assert!(info.result.contains("second turn"), "{}", info.result);

    // A replay from any point is the same suffix, once.
    let again = watch_all(&mut c, &id, 4).await;
    assert_eq!(again.first().map(|e| e.sequence), Some(4));
    assert_eq!(again.len(), seen.len() - 3);

    // A message to a finished run: FAILED_PRECONDITION, saying why.
    let late = pb::SubagentInput {
        subagent_id: id.clone(),
        input: Some(pb::subagent_input::Input::Message("too late".into())),
        caller: None,
    };
    let e = c.send_to_subagent(late).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("ended"), "{}", e.message());

    // Cancel another while its model call hangs.
    let slow = c.spawn_subagent(claude_task("SCENARIO=d_slow go")).await.unwrap().into_inner();
    let mut s = c
        .watch_subagent(pb::WatchSubagentRequest {
            subagent_id: slow.subagent_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    while let Some(e) = s.message().await.unwrap() {
        if matches!(&e.event, Some(Event::Status(st)) if st.status == "started") {
            break;
        }
    }
    let cancel = pb::CancelSubagentRequest {
        subagent_id: slow.subagent_id.clone(),
        reason: "the test is done with it".into(),
        ..Default::default()
    };
    let cancelled = c.cancel_subagent(cancel).await.unwrap().into_inner();
    assert!(cancelled.cancelled, "{cancelled:?}");
    assert_eq!(cancelled.final_status, "cancelled");
    let mut last = None;
    while let Some(e) = s.message().await.unwrap() {
        last = Some(e.kind);
    }
    assert_eq!(last.as_deref(), Some("subagent_closed"));

    // Listing: both runs, newest first, filtered by status.
    let list = c
        .list_subagents(pb::ListSubagentsRequest {
            status: vec![pb::SubagentStatus::Cancelled as i32],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        list.subagents.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
        [slow.subagent_id.as_str()]
    );

    // Errors keep their codes.
    let e = c
        .get_subagent(pb::GetSubagentRequest { subagent_id: "nosuchrun".into() })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
    let e = c
        .spawn_subagent(pb::SpawnSubagentRequest { max_turns: -2, ..Default::default() })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("max_turns"), "{}", e.message());
    let cyclic = pb::OrchestrationPlan {
        steps: vec![
            pb::OrchestrationStep {
                id: "a".into(),
                prompt: "x".into(),
                depends_on: vec!["b".into()],
                ..Default::default()
            },
            pb::OrchestrationStep {
                id: "b".into(),
                prompt: "y".into(),
                depends_on: vec!["a".into()],
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let e = c.create_orchestration(cyclic).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(e.message().contains("cycle"), "{}", e.message());
}

#[test]
fn one_daemon_per_state_directory_and_sigterm_exits_zero() {
    let w = World::new();
    let mut first = Daemon::start(&w, &[]);
    let meta = std::fs::metadata(&first.socket).unwrap();
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777, 0o600);
    let second = w.run(&["serve"]);
    assert_eq!(second.status.code(), Some(1));
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(err.contains(&format!("pid {}", first.pid())), "{err}");
    let (code, err) = first.stop();
    assert_eq!(code, Some(0), "{err}");
    assert!(!w.state.join("herd.sock").exists(), "the socket is left behind");
    assert!(err.contains("SIGTERM"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_needs_the_bearer_token_and_a_non_loopback_address_without_one_is_refused() {
    let w = World::new();
    let daemon = Daemon::start(&w, &["--listen", "127.0.0.1:0"]);
    let log = w.state.join("logs/daemon.log");
    let mut addr = String::new();
    assert!(wait_until(Duration::from_secs(10), || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        addr = text
            .lines()
            .find_map(|l| l.split("listening on ").nth(1))
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or_default()
            .to_owned();
        !addr.is_empty()
    }));
    let url = format!("http://{addr}");
    let token_file = w.state.join("herd.token");
    let meta = std::fs::metadata(&token_file).unwrap();
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777, 0o600);
    let token = std::fs::read_to_string(&token_file).unwrap().trim().to_owned();
    let list = pb::ListSubagentsRequest::default();
    let mut anon = herd_server::client::connect_tcp(&url, None).await.unwrap();
    assert_eq!(
        anon.list_subagents(list.clone()).await.unwrap_err().code(),
        tonic::Code::Unauthenticated
    );
    let mut wrong =
        herd_server::client::connect_tcp(&url, Some(format!("{token}x"))).await.unwrap();
    assert_eq!(
        wrong.list_subagents(list.clone()).await.unwrap_err().code(),
        tonic::Code::Unauthenticated
    );
    let mut ok = herd_server::client::connect_tcp(&url, Some(token)).await.unwrap();
    assert!(ok.list_subagents(list).await.unwrap().into_inner().subagents.is_empty());
    drop(daemon);

    let out = w.run(&["serve", "--listen", "0.0.0.0:0"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a loopback address") && err.contains("HERD_TOKEN"), "{err}");
    assert!(wait_until(Duration::from_secs(1), || !w.state.join("herd.sock").exists()));
}

/// `python3` with grpcio and grpcio-tools, or a failure saying how to get them.
fn python_with_grpc() -> &'static str {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import grpc, grpc_tools"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "python3 with grpcio and grpcio-tools is needed: python3 -m pip install grpcio grpcio-tools \
         (.ci/test installs them)"
    );
    "python3"
}

#[test]
fn a_python_grpcio_client_generated_from_the_repositorys_protos_drives_the_daemon() {
    let w = world_or_skip!();
    let python = python_with_grpc();
    let made = w.work.join("made-by-python.txt");
    let mock = MockServer::shared();
    mock.script(
        "py_talk",
        Script::new()
            .tool_use(
                "Bash",
                json!({"command": format!("touch {}", made.display()), "description": "t"}),
            )
            .text("first turn done")
            .text("second turn: python said hello"),
    );
    mock.script("py_slow", Script::new().text("never seen").delay(Duration::from_secs(120)));
    let daemon = Daemon::start(&w, &[]);
    let out_dir = tempfile::tempdir().unwrap();
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(python)
        .arg(manifest.join("tests/grpc_python/client.py"))
        .arg("--socket")
        .arg(&daemon.socket)
        .arg("--proto-root")
        .arg(manifest.join("../../proto"))
        .arg("--out")
        .arg(out_dir.path())
        .args(["--talk", "SCENARIO=py_talk go", "--slow", "SCENARIO=py_slow go"])
        .args(["--message", "PYTHON-SECOND-MESSAGE-51c2"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the python client failed: {stderr}");
    let s: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{stderr}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(s["message_accepted"], true, "{s}");
    assert_eq!(s["pending_listed"], true, "{s}");
    assert_eq!(s["answer_status"], "approved", "{s}");
    assert_eq!(s["in_order_once"], true, "{s}");
    assert_eq!(s["replay_is_suffix"], true, "{s}");
    assert_eq!(s["status"], "completed", "{s}");
    assert_eq!(s["results"].as_array().map(Vec::len), Some(2), "{s}");
    assert!(s["results"][1].as_str().unwrap().contains("python said hello"), "{s}");
    assert_eq!(s["kinds"].as_array().unwrap().last().unwrap(), "subagent_closed");
    assert_eq!(s["late_message"], "FAILED_PRECONDITION", "{s}");
    assert_eq!(s["cancelled"], true, "{s}");
    assert_eq!(s["cancel_final_status"], "cancelled", "{s}");
    assert_eq!(s["unknown_id"], "NOT_FOUND", "{s}");
    assert!(made.exists(), "the approved call did not run");
    assert!(
        mock.requests_for("py_talk")
            .iter()
            .any(|r| r.body.to_string().contains("PYTHON-SECOND-MESSAGE-51c2")),
        "the mock never received the python client's second message"
    );
    drop(daemon);
}

/// The herd process that owns run `id`, as stored.
fn owner_of(w: &World, id: &str) -> Option<u32> {
    let store = herd_store::Store::open(herd_store::StatePaths::new(&w.state)).unwrap();
    store.get(&id.parse().unwrap()).unwrap().and_then(|r| r.owner_pid)
}

fn status_of(w: &World, id: &str) -> String {
    let (_, v) = w.json(&["show", id, "--json"]);
    v["status"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn with_a_daemon_the_cli_goes_through_it_and_runs_outlive_their_clients() {
    use std::io::Write;
    let w = world_or_skip!();
    let made = w.work.join("made-through-attach.txt");
    let mock = MockServer::shared();
    mock.script(
        "cli_attach",
        Script::new()
            .tool_use(
                "Bash",
                json!({"command": format!("touch {}", made.display()), "description": "t"}),
            )
            .text("attach first turn")
            .text("attach second turn"),
    );
    mock.script("cli_plain", Script::new().text("plain done"));
    mock.script("cli_slow", Script::new().text("slow done").delay(Duration::from_secs(3)));
    mock.script("cli_hang", Script::new().text("never").delay(Duration::from_secs(120)));
    let daemon = Daemon::start(&w, &[]);

    // --detach: the id at once; the daemon owns the run.
    let out =
        w.run(&["task", "SCENARIO=cli_attach go", "--detach", "--permission-timeout", "120s"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert_eq!(owner_of(&w, &id), Some(daemon.pid()), "the run is not the daemon's");

    // attach: a message while its call waits, then y answers the call.
    let mut attach = w
        .herd(&["attach", &id])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut request = String::new();
    assert!(wait_until(Duration::from_secs(30), || {
        let (_, v) = w.json(&["approve", "--json"]);
        request = v[0]["id"].as_str().unwrap_or_default().to_owned();
        !request.is_empty()
    }));
    let mut stdin = attach.stdin.take().unwrap();
    stdin.write_all(b"ATTACH-MESSAGE-93d1\n").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    stdin.write_all(b"y\n").unwrap();
    let out = attach.wait_with_output().unwrap();
    drop(stdin);
    let printed = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{printed}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(printed.contains("subagent_closed"), "{printed}");
    assert!(made.exists(), "the call approved through attach did not run");
    assert!(
        mock.requests_for("cli_attach")
            .iter()
            .any(|r| r.body.to_string().contains("ATTACH-MESSAGE-93d1")),
        "the mock never received the message typed into herd attach"
    );
    assert_eq!(w.result_of(&id), "attach second turn");

    // logs --follow streams from the daemon to the close; ps lists through it.
    let logs = w.run(&["logs", &id, "--follow"]);
    let printed = String::from_utf8_lossy(&logs.stdout);
    let last = printed.lines().last().unwrap_or_default();
    assert!(last.contains("subagent_closed"), "{printed}");
    let (_, ps) = w.json(&["ps", "--all", "--json"]);
    assert!(ps.as_array().unwrap().iter().any(|r| r["id"] == id.as_str()), "{ps}");

    // A foreground task through the daemon, as in-process: the result, exit 0.
    let (code, v) = w.json(&["task", "SCENARIO=cli_plain go", "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["result"], "plain done");
    assert_eq!(owner_of(&w, v["id"].as_str().unwrap()), Some(daemon.pid()));

    // A client killed mid-run: the run goes on in the daemon and completes.
    let mut client = w.herd(&["task", "SCENARIO=cli_slow go"]).spawn().unwrap();
    let mut slow = String::new();
    assert!(wait_until(Duration::from_secs(30), || {
        let (_, v) = w.json(&["ps", "--json"]);
        slow = v[0]["id"].as_str().unwrap_or_default().to_owned();
        !slow.is_empty() && v[0]["status"] == "running"
    }));
    client.kill().unwrap();
    client.wait().unwrap();
    assert!(wait_until(Duration::from_secs(30), || status_of(&w, &slow) == "completed"));
    assert_eq!(w.result_of(&slow), "slow done");

    // herd cancel through the daemon.
    let out = w.run(&["task", "SCENARIO=cli_hang go", "--detach"]);
    let hang = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(wait_until(Duration::from_secs(30), || status_of(&w, &hang) == "running"));
    let out = w.run(&["cancel", &hang]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("cancelled"));
    drop(daemon);
    // Without a daemon: --detach is refused, attach says why.
    let out = w.run(&["task", "x", "--detach"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("herd serve"));
    let out = w.run(&["attach", &id]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn after_a_kill_9_the_next_daemon_accounts_for_every_run_and_resume_runs_only_unfinished_steps() {
    let w = world_or_skip!();
    let mock = MockServer::shared();
    for s in ["a", "b", "e", "f"] {
        mock.script(&format!("kill_{s}"), Script::new().text(format!("{s} done")));
    }
    // c and d hang in their model call until the daemon dies.
    for s in ["c", "d"] {
        mock.script(
            &format!("kill_{s}"),
            Script::new().text("never").delay(Duration::from_secs(300)),
        );
    }
    let plan = "name: crash\nsteps:\n\
        - {id: a, prompt: \"SCENARIO=kill_a go\"}\n\
        - {id: b, prompt: \"SCENARIO=kill_b go\"}\n\
        - {id: c, prompt: \"SCENARIO=kill_c go\", depends_on: [a]}\n\
        - {id: d, prompt: \"SCENARIO=kill_d go\", depends_on: [b]}\n\
        - {id: e, prompt: \"SCENARIO=kill_e go\", depends_on: [c, d]}\n\
        - {id: f, prompt: \"SCENARIO=kill_f go\", depends_on: [e]}\n";
    std::fs::write(w.work.join("crash.yml"), plan).unwrap();
    let mut first = Daemon::start(&w, &[]);
    let out = w.run(&["run", "crash.yml", "--detach"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let plan_id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let store = || herd_store::Store::open(herd_store::StatePaths::new(&w.state)).unwrap();
    let step = |key: &str| {
        store().steps(&plan_id).unwrap().into_iter().find(|s| s.step_key == key).unwrap()
    };
    // Kill -9 while c and d run (their agents alive), a and b completed.
    let mut hung = Vec::new();
    assert!(wait_until(Duration::from_secs(60), || {
        hung = ["c", "d"]
            .iter()
            .filter_map(|k| {
                let s = step(k);
                let run = store().get(&s.subagent_id?.parse().unwrap()).unwrap()?;
                (run.status == herd_core::Status::Running && run.pid.is_some()).then_some(run)
            })
            .collect();
        hung.len() == 2
    }));
    assert_eq!((step("a").status, step("b").status), ("completed".into(), "completed".into()));
    let asked = |s: &str| mock.requests_for(&format!("kill_{s}")).len();
    let (asked_a, asked_b) = (asked("a"), asked("b"));
    first.kill9();
    // Nothing of the dead daemon's runs stays alive (its guards take their groups down).
    let alive = |r: &herd_store::SubagentRow| {
        herd_engine::procfs::is_same_process(r.pid.unwrap(), r.process_start_time)
    };
    assert!(
        wait_until(Duration::from_secs(15), || !hung.iter().any(alive)),
        "an agent outlived its daemon"
    );

    // The next daemon reconciles: the runs failed(orphaned), the plan interrupted.
    for s in ["c", "d"] {
        mock.script(&format!("kill_{s}"), Script::new().text(format!("{s} done")));
    }
    let _second = Daemon::start(&w, &[]);
    for r in &hung {
        let row = store().get(&r.id.parse().unwrap()).unwrap().unwrap();
        assert_eq!(row.status, herd_core::Status::Failed);
        assert_eq!(row.failure_reason.as_deref(), Some("orphaned"), "{row:?}");
        assert!(row.closed_at.is_some());
    }
    assert!(store().active_runs().unwrap().is_empty(), "a run of the dead daemon is still active");
    assert_eq!(store().orchestration(&plan_id).unwrap().unwrap().status, "interrupted");
    let a_run = step("a").subagent_id;

    // --resume (through the new daemon) runs only what had not completed.
    let (code, v) = w.json(&["run", "--resume", &plan_id, "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(store().orchestration(&plan_id).unwrap().unwrap().status, "completed");
    assert_eq!((asked("a"), asked("b")), (asked_a, asked_b), "a completed step was asked again");
    assert_eq!(step("a").subagent_id, a_run, "a completed step was run again");
    for s in ["c", "d", "e", "f"] {
        assert_eq!(step(s).status, "completed", "{s}");
    }
    // A completed step's result still feeds its dependent.
    let c_asked = mock.requests_for("kill_c");
    assert!(
        c_asked.last().unwrap().body.to_string().contains("a done"),
        "c did not get a's result"
    );
    let e_asked = mock.requests_for("kill_e");
    let e_body = e_asked.last().unwrap().body.to_string();
    assert!(e_body.contains("c done") && e_body.contains("d done"), "{e_body}");
}

#[test]
fn without_a_daemon_resume_reruns_a_failed_plans_unfinished_steps_in_process() {
    let w = world_or_skip!();
    let mock = MockServer::shared();
    mock.script("res_a", Script::new().text("a fine"));
    mock.script("res_b", Script::new().error(500, "the model broke"));
    mock.script("res_c", Script::new().text("c fine"));
    let plan = "name: again\nsteps:\n\
        - {id: a, prompt: \"SCENARIO=res_a go\"}\n\
        - {id: b, prompt: \"SCENARIO=res_b go\", depends_on: [a]}\n\
        - {id: c, prompt: \"SCENARIO=res_c go\", depends_on: [b]}\n";
    std::fs::write(w.work.join("again.yml"), plan).unwrap();
    let (code, v) = w.json(&["run", "again.yml", "--json"]);
    assert_eq!(code, 1, "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    let asked_a = mock.requests_for("res_a").len();
    mock.script("res_b", Script::new().text("b fine now"));
    let (code, v) = w.json(&["run", "--resume", &id, "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["id"], id.as_str());
    assert_eq!(mock.requests_for("res_a").len(), asked_a, "a completed step was asked again");
    assert!(mock.requests_for("res_b").last().unwrap().body.to_string().contains("a fine"));
    // A completed plan has nothing to resume.
    let out = w.run(&["run", "--resume", &id]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to resume"));
}
