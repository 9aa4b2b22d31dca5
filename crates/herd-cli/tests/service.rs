//! The engine service driven in-process (the command backend, tokio's paused clock): the pool
//! and its queue, cancel while queued, wait any/all, watch replay then live, the stop ladder,
//! shutdown. The `herd` binary is only the process guard here.
//!
//! The clock is paused and held: it moves only when a test advances it, so timeouts and the
//! stop ladder's rungs fire exactly when a test says, while agents and the store's thread run
//! on real time.

use std::path::Path;
use std::time::Duration;

use herd_core::{AgentEvent, BackendKind, Status};
use herd_engine::service::{
    Caller, CancelLevel, Code, Service, ServiceOptions, StoredEvent, TaskSpec, WaitMode,
};
use herd_engine::{EngineConfig, GuardCommand};

/// Timers of the engine that would otherwise move a paused clock: the cancel poll (for
/// `herd cancel` from another process) never fires within a test.
fn engine_config() -> EngineConfig {
    EngineConfig { cancel_poll: Duration::from_secs(24 * 3600), ..EngineConfig::default() }
}

fn service(dir: &Path, max_concurrent: usize, max_queue: usize) -> Service {
    let guard = GuardCommand {
        program: env!("CARGO_BIN_EXE_herd").into(),
        args: vec![herd_engine::guard::GUARD_ARG.into()],
    };
    let opts = ServiceOptions {
        max_concurrent,
        max_queue,
        engine: engine_config(),
        ..ServiceOptions::default()
    };
    Service::open_with(&dir.join("state"), guard, opts).unwrap()
}

fn caller(dir: &Path) -> Caller {
    Caller::top(dir, "a test")
}

/// A command-backend task running `sh -c script`, with the longest timeout (so only the
/// test's own deadlines move the paused clock).
fn sh(script: &str) -> TaskSpec {
    TaskSpec {
        prompt: "go".into(),
        cli: Some(BackendKind::Command),
        command: vec!["sh".into(), "-c".into(), script.into()],
        timeout: Some(Duration::from_secs(120 * 60)),
        ..TaskSpec::default()
    }
}

/// Holds a paused clock still: an always-ready task keeps the runtime from auto-advancing while
/// the service waits on real processes and on its store's thread.
struct Clock(tokio::task::JoinHandle<()>);

impl Clock {
    fn hold() -> Self {
        Self(tokio::spawn(async {
            loop {
                tokio::task::yield_now().await;
            }
        }))
    }
}

impl Drop for Clock {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Move the clock in small steps until `done` holds; false if `limit` of clock time passed.
async fn advance_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let step = Duration::from_millis(50);
    let mut moved = Duration::ZERO;
    while !done() {
        if moved >= limit {
            return false;
        }
        tokio::time::advance(step).await;
        moved += step;
    }
    true
}

/// Let real work in flight finish (a store commit takes a few real milliseconds).
async fn settle() {
    let until = std::time::Instant::now() + Duration::from_millis(200);
    while std::time::Instant::now() < until {
        tokio::task::yield_now().await;
    }
}

/// Let real work happen (with the clock held) until `done` holds.
async fn until(mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "waited a minute of real time");
        tokio::task::yield_now().await;
    }
}

async fn all_events(svc: &Service, id: &str, from: i64) -> Vec<StoredEvent> {
    let mut w = svc.watch(id, from).unwrap();
    let mut out = Vec::new();
    while let Some(e) = w.next().await {
        out.push(e.unwrap());
    }
    out
}

#[tokio::test(start_paused = true)]
async fn the_pool_queues_then_refuses_and_a_queued_task_cancels_without_starting() {
    let dir = tempfile::tempdir().unwrap();
    let _clock = Clock::hold();
    let (svc, c) = (service(dir.path(), 1, 1), caller(dir.path()));
    let a = svc.spawn(&c, sh("sleep 3600")).await.unwrap();
    let b = svc.spawn(&c, sh("echo b")).await.unwrap();
    assert_eq!(a.status, Status::Pending, "the first takes the only place");
    assert_eq!(b.status, Status::Queued, "the second waits for it");
    assert_eq!(svc.run(b.id.as_str()).unwrap().status, Status::Queued);
    let e = svc.spawn(&c, sh("echo c")).await.unwrap_err();
    assert_eq!(e.code, Code::ResourceExhausted, "{e}");
    assert!(e.message.contains("1 running and 1 queued"), "{e}");
    // A queued task stops without ever starting.
    let s = svc.cancel(b.id.as_str(), CancelLevel::Graceful, "test", &c).await.unwrap();
    assert_eq!(s.status(), "cancelled");
    let b_run = svc.run(b.id.as_str()).unwrap();
    assert!(b_run.started_at.is_none() && b_run.pid.is_none(), "{b_run:?}");
    // Its place in the queue is free again.
    let d = svc.spawn(&c, sh("echo d")).await.unwrap();
    assert_eq!(d.status, Status::Queued);
    // Stopping the running one lets the queued one run, in order. Once it runs: an interrupt
    // sent while its process is still being started can miss it, and the ladder's next rung
    // needs a clock this test holds still.
    until(|| svc.run(a.id.as_str()).is_ok_and(|r| r.status == Status::Running && r.pid.is_some()))
        .await;
    svc.cancel(a.id.as_str(), CancelLevel::Graceful, "test", &c).await.unwrap();
    let w = svc.wait(&[d.id.to_string()], WaitMode::All, Duration::from_secs(600)).await.unwrap();
    assert!(!w.timed_out);
    let d_run = svc.run(d.id.as_str()).unwrap();
    assert_eq!((d_run.status, d_run.result.as_deref()), (Status::Completed, Some("d")));
    svc.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn wait_any_returns_at_the_first_end_and_wait_all_times_out_on_the_clock() {
    let dir = tempfile::tempdir().unwrap();
    let _clock = Clock::hold();
    let (svc, c) = (service(dir.path(), 5, 5), caller(dir.path()));
    let quick = svc.spawn(&c, sh("echo quick")).await.unwrap();
    let slow = svc.spawn(&c, sh("sleep 3600")).await.unwrap();
    let ids = vec![quick.id.to_string(), slow.id.to_string()];
    // Woken by the quick one's end (the clock does not move: no timeout could end it).
    let any = svc.wait(&ids, WaitMode::Any, Duration::from_secs(600)).await.unwrap();
    assert!(!any.timed_out);
    assert_eq!(any.done, 1);
    assert_eq!(any.jobs[0].status(), "completed");
    // Waiting for all ends when ten minutes pass on the clock, not before.
    let (s2, ids2) = (svc.clone(), ids.clone());
    let all =
        tokio::spawn(async move { s2.wait(&ids2, WaitMode::All, Duration::from_secs(600)).await });
    assert!(!advance_until(Duration::from_secs(590), || all.is_finished()).await, "ended early");
    assert!(advance_until(Duration::from_secs(20), || all.is_finished()).await);
    let all = all.await.unwrap().unwrap();
    assert!(all.timed_out && all.done == 1, "{all:?}");
    assert_eq!(all.jobs[1].status(), "running");
    // An unknown id is an error, not a wait.
    let e = svc.wait(&["nosuch".into()], WaitMode::All, Duration::from_secs(1)).await;
    assert_eq!(e.unwrap_err().code, Code::NotFound);
    svc.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn watch_replays_from_a_sequence_then_follows_live_without_gaps() {
    let dir = tempfile::tempdir().unwrap();
    let _clock = Clock::hold();
    let (svc, c) = (service(dir.path(), 5, 5), caller(dir.path()));
    // Lines come while the watcher already follows: replay then live in one stream.
    let t =
        svc.spawn(&c, sh("for i in 1 2 3 4 5; do echo line$i; sleep 0.05; done")).await.unwrap();
    let id = t.id.to_string();
    let live = all_events(&svc, &id, 1).await;
    let seqs: Vec<i64> = live.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=live.len() as i64).collect::<Vec<_>>(), "no gap, no duplicate");
    assert!(matches!(live.last().unwrap().event, AgentEvent::SubagentClosed { .. }));
    let texts: Vec<&str> = live
        .iter()
        .filter_map(|e| match &e.event {
            AgentEvent::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(texts, ["line1", "line2", "line3", "line4", "line5"]);
    // Reconnecting from any sequence gets exactly the rest.
    for from in [1, 3, live.len() as i64] {
        let again = all_events(&svc, &id, from).await;
        let want: Vec<i64> = (from..=live.len() as i64).collect();
        assert_eq!(again.iter().map(|e| e.seq).collect::<Vec<_>>(), want, "from {from}");
    }
    svc.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_stop_ladder_ends_an_agent_that_ignores_interrupt_and_term() {
    let dir = tempfile::tempdir().unwrap();
    let _clock = Clock::hold();
    let (svc, c) = (service(dir.path(), 5, 5), caller(dir.path()));
    let marker = dir.path().join("up");
    let script = format!("trap '' INT TERM; touch {}; sleep 3600", marker.display());
    let t = svc.spawn(&c, sh(&script)).await.unwrap();
    until(|| marker.exists()).await;
    let (s2, c2, id) = (svc.clone(), c.clone(), t.id.to_string());
    let cancel =
        tokio::spawn(async move { s2.cancel(&id, CancelLevel::Graceful, "test", &c2).await });
    let stops = |svc: &Service| -> Vec<String> {
        svc.events(t.id.as_str(), 0, 1000)
            .unwrap()
            .into_iter()
            .filter_map(|e| match e.event {
                AgentEvent::StopRequested { step, .. } => Some(step),
                _ => None,
            })
            .collect()
    };
    until(|| stops(&svc) == ["sigint"]).await;
    // Ignored: nothing more until the graceful time (1.5 s) has passed on the clock.
    assert!(!advance_until(Duration::from_millis(1400), || stops(&svc).len() > 1).await);
    settle().await;
    assert_eq!(stops(&svc), ["sigint"]);
    tokio::time::advance(Duration::from_millis(200)).await;
    until(|| stops(&svc) == ["sigint", "sigterm"]).await;
    // Ignored too: SIGKILL once the grace (5 s) is over.
    assert!(!advance_until(Duration::from_millis(4900), || stops(&svc).len() > 2).await);
    settle().await;
    assert_eq!(stops(&svc), ["sigint", "sigterm"]);
    tokio::time::advance(Duration::from_millis(200)).await;
    until(|| cancel.is_finished()).await;
    let s = cancel.await.unwrap().unwrap();
    assert_eq!(s.status(), "cancelled");
    assert_eq!(stops(&svc), ["sigint", "sigterm", "sigkill"]);
    svc.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn shutdown_stops_what_the_service_runs() {
    let dir = tempfile::tempdir().unwrap();
    let _clock = Clock::hold();
    let (svc, c) = (service(dir.path(), 5, 5), caller(dir.path()));
    let marker = dir.path().join("up");
    let t =
        svc.spawn(&c, sh(&format!("touch {}; exec sleep 3600", marker.display()))).await.unwrap();
    until(|| marker.exists() && svc.run(t.id.as_str()).unwrap().pid.is_some()).await;
    let pid = svc.run(t.id.as_str()).unwrap().pid.expect("running");
    let state = dir.path().join("state");
    // Its first rung (the interrupt) is enough: no timer of the ladder needs to fire.
    svc.shutdown().await.unwrap();
    // Gone, or a zombie its new parent has yet to reap: not running either way.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let running = stat.rfind(')').is_some_and(|i| !stat[i + 1..].trim_start().starts_with('Z'));
    assert!(!running, "the agent outlived the service: {stat}");
    // The record says so, read by a new service.
    let svc = service(dir.path(), 1, 0);
    assert_eq!(svc.run(t.id.as_str()).unwrap().status, Status::Cancelled);
    assert!(state.exists());
    svc.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn bad_requests_are_refused_with_their_code_before_anything_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let _clock = Clock::hold();
    let (svc, mut c) = (service(dir.path(), 5, 5), caller(dir.path()));
    let mut empty = sh("true");
    empty.prompt = " ".into();
    assert_eq!(svc.spawn(&c, empty).await.unwrap_err().code, Code::InvalidArgument);
    let mut no_program = sh("true");
    no_program.command.clear();
    let e = svc.spawn(&c, no_program).await.unwrap_err();
    assert_eq!(e.field_name(), Some("command"), "{e}");
    // A CLI whose binary is missing: refused naming it, its variable and how to install it.
    let mut codex = sh("true");
    codex.cli = Some(BackendKind::Codex);
    codex.command.clear();
    codex.env = vec![("PATH".into(), dir.path().join("empty").display().to_string())];
    let e = svc.spawn(&c, codex).await.unwrap_err();
    assert_eq!(e.field_name(), Some("cli"), "{e}");
    if std::env::var_os("HERD_CODEX_BIN").is_none() {
        for part in
            ["`codex` was not found", "HERD_CODEX_BIN", "npm install -g @openai/codex@0.169.0"]
        {
            assert!(e.message.contains(part), "{part}: {e}");
        }
    }
    c.depth = 1;
    assert_eq!(svc.spawn(&c, sh("true")).await.unwrap_err().code, Code::PermissionDenied);
    c.depth = 0;
    c.roots = Some(vec![dir.path().join("elsewhere")]);
    assert_eq!(svc.spawn(&c, sh("true")).await.unwrap_err().code, Code::PermissionDenied);
    assert!(svc.runs(herd_engine::service::RunFilter { all: true, limit: 0 }).unwrap().is_empty());
    assert_eq!(svc.run("nosuch").unwrap_err().code, Code::NotFound);
    svc.shutdown().await.unwrap();
}
