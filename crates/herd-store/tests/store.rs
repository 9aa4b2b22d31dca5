//! Store integration tests: lifecycle rows, ordered events, checked transitions, prefixes —
//! each on both backends (`sqlite::…`, `postgres::…`, the latter on a fresh PostgreSQL database).

use herd_core::{AgentEvent, Decoded, FailureReason, Status, SubagentId};
use herd_store::{
    Backend, NewSubagent, StatePaths, Store, StoreError, Update, Writer, orphaned_update,
};

/// Which database a test's store is in.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Sqlite,
    Postgres,
}

/// A state dir and its database (dropped after the test).
struct Fx {
    dir: tempfile::TempDir,
    paths: StatePaths,
    _pg: Option<herd_testkit::PgDb>,
}

fn fx(kind: Kind) -> Fx {
    let dir = tempfile::tempdir().unwrap();
    let paths = StatePaths::new(dir.path().join(".herd"));
    match kind {
        Kind::Sqlite => Fx { dir, paths, _pg: None },
        Kind::Postgres => {
            let pg = herd_testkit::pg_db();
            let paths = paths.with_store(Backend::Postgres(pg.url.clone()));
            Fx { dir, paths, _pg: Some(pg) }
        }
    }
}

/// Each test once per backend: `sqlite::name` and `postgres::name`.
macro_rules! both {
    (sync: $($s:ident),* ; async: $($a:ident),* $(,)?) => {
        mod sqlite {
            $( #[test] fn $s() { super::$s(super::Kind::Sqlite) } )*
            $( #[tokio::test] async fn $a() { super::$a(super::Kind::Sqlite).await } )*
        }
        mod postgres {
            $( #[test] fn $s() { super::$s(super::Kind::Postgres) } )*
            $( #[tokio::test] async fn $a() { super::$a(super::Kind::Postgres).await } )*
        }
    };
}

both!(
    sync: prefixes_resolve_uniquely, concurrent_first_opens_migrate_once,
        locks_follow_the_table_release_and_reclaim_dead_holders,
        lock_invariants_hold_under_random_sequences;
    async: events_are_ordered_persisted_then_published_and_transitions_checked,
        a_failing_append_loses_nothing_else_of_its_batch,
        a_failing_update_is_undone_alone_and_the_rest_is_published_in_order,
        a_queued_write_waited_for_now_is_stored_and_the_writer_goes_on,
        a_run_marked_orphaned_has_its_waiting_requests_closed,
        an_orphaned_plan_fails_its_running_steps_and_cancels_those_never_started,
);

fn new_sub(id: &SubagentId) -> NewSubagent {
    NewSubagent {
        id: id.clone(),
        parent_session_id: "s1".into(),
        name: "t".into(),
        cli: "command".into(),
        prompt: "hello".into(),
        model: None,
        working_directory: "/tmp".into(),
        max_turns: None,
        timeout_ms: Some(1000),
        spec: serde_json::json!({"prompt": "hello"}),
        owner_pid: std::process::id(),
        owner_start_time: Some(42),
    }
}

fn text(t: &str) -> Decoded {
    Decoded {
        parent_tool_use_id: Some("toolu_1".into()),
        event: AgentEvent::Text { text: t.into() },
    }
}

/// A fresh store with session `s1` and one pending subagent.
fn store_with_one_subagent(kind: Kind) -> (Fx, StatePaths, Store, SubagentId) {
    let fx = fx(kind);
    let paths = fx.paths.clone();
    let mut store = Store::open(paths.clone()).unwrap();
    store.create_session("s1", "cli", fx.dir.path()).unwrap();
    let id = SubagentId::generate();
    store.create_subagent(&new_sub(&id)).unwrap();
    (fx, paths, store, id)
}

async fn events_are_ordered_persisted_then_published_and_transitions_checked(kind: Kind) {
    let (_fx, paths, mut store, id) = store_with_one_subagent(kind);

    let writer = Writer::start(&paths).unwrap();
    let w = writer.handle();
    let mut sub = w.subscribe();
    w.update(&id, Update { status: Some(Status::Running), pid: Some(7), ..Update::default() })
        .await
        .unwrap();
    for i in 0..100 {
        w.append(&id, vec![text(&format!("line {i}"))]).await.unwrap();
    }
    w.flush().await.unwrap();
    // Published only after commit: whatever we receive is already readable.
    let first = sub.recv().await.unwrap();
    assert!(store.events_after(&id, first.seq - 1, 1).unwrap().len() == 1);

    let illegal = w.update(&id, Update { status: Some(Status::Queued), ..Update::default() }).await;
    assert!(matches!(illegal, Err(StoreError::Transition { .. })), "{illegal:?}");
    // The transition is checked by the UPDATE itself; what it matched nothing for is told apart.
    let ghost = SubagentId::generate();
    for u in [
        Update { status: Some(Status::Running), ..Update::default() },
        Update { pid: Some(1), ..Update::default() },
        Update { events: vec![AgentEvent::SubagentCompleted], ..Update::default() },
    ] {
        let missing = w.update(&ghost, u).await;
        assert!(matches!(missing, Err(StoreError::NotFound(_))), "{missing:?}");
    }

    let evs = w
        .update(
            &id,
            Update {
                status: Some(Status::Failed),
                failure: Some(FailureReason::Timeout),
                closed_at: Some(1),
                events: vec![AgentEvent::SubagentFailed { reason: "timeout".into() }],
                ..Update::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(evs[0].seq, 102, "created(1) + 100 texts, then the failure");
    // The writer forgets a closed run's number; a late event still gets the next one.
    w.append(&id, vec![text("late")]).await.unwrap();
    writer.shutdown().await.unwrap();

    let events = store.events_after(&id, 0, 1000).unwrap();
    assert_eq!(events.len(), 103);
    assert!(events.windows(2).all(|w| w[1].seq == w[0].seq + 1));
    assert_eq!(events[0].event.kind(), "subagent_created");
    assert_eq!(events[1].parent_tool_use_id.as_deref(), Some("toolu_1"));
    let row = store.get(&id).unwrap().unwrap();
    assert_eq!(row.status, Status::Failed);
    assert_eq!(row.failure_reason.as_deref(), Some("timeout"));
    assert_eq!(row.pid, Some(7));

    // Terminal is terminal, even for the orphan sweep.
    assert!(store.update(&id, &orphaned_update()).is_err());
}

async fn a_failing_append_loses_nothing_else_of_its_batch(kind: Kind) {
    let (_fx, paths, store, id) = store_with_one_subagent(kind);
    let writer = Writer::start(&paths).unwrap();
    let w = writer.handle();
    // Queued back to back, so the writer takes them as one batch: the unknown subagent's
    // events are refused (foreign key) without taking the good ones with them.
    let ghost = SubagentId::generate();
    for i in 0..50 {
        w.append(&ghost, vec![text("lost")]).await.unwrap();
        w.append(&id, vec![text(&format!("kept {i}"))]).await.unwrap();
    }
    let flushed = w.flush().await;
    assert!(
        matches!(&flushed, Err(StoreError::WriterGone(m)) if m.contains(ghost.as_str())),
        "{flushed:?}"
    );
    // The writer keeps going, and reports each failure once.
    w.append(&id, vec![text("after")]).await.unwrap();
    w.flush().await.unwrap();
    writer.shutdown().await.unwrap();
    let events = store.events_after(&id, 0, 1000).unwrap();
    assert_eq!(events.len(), 52, "created + 50 kept + after");
    assert!(events.windows(2).all(|w| w[1].seq == w[0].seq + 1));
    assert!(store.events_after(&ghost, 0, 10).unwrap().is_empty());
}

async fn a_failing_update_is_undone_alone_and_the_rest_is_published_in_order(kind: Kind) {
    let (_fx, paths, store, id) = store_with_one_subagent(kind);
    let writer = Writer::start(&paths).unwrap();
    let w = writer.handle();
    let mut sub = w.subscribe();
    // All queued before any commit is awaited, so they share a batch: the refused transition
    // (running back to queued) must not take the appends and the good update with it.
    let running = Update {
        status: Some(Status::Running),
        events: vec![AgentEvent::SubagentStarted { pid: 1, pgid: 1, argv: vec![] }],
        ..Update::default()
    };
    let good = w.queue_update(&id, running).await.unwrap();
    w.append(&id, vec![text("a")]).await.unwrap();
    let bad = w.queue_update(&id, Update { status: Some(Status::Queued), ..Update::default() });
    let bad = bad.await.unwrap();
    w.append(&id, vec![text("b")]).await.unwrap();
    assert!(matches!(bad.committed().await, Err(StoreError::Transition { .. })));
    let started = good.committed().await.unwrap();
    assert_eq!(started[0].seq, 2, "after created");
    w.flush().await.unwrap();
    let mut seen = Vec::new();
    while let Ok(ev) = sub.try_recv() {
        seen.push((ev.seq, ev.event.kind().to_owned()));
    }
    assert_eq!(
        seen,
        [(2, "subagent_started".into()), (3, "text".into()), (4, "text".into())],
        "published once stored, in order, with the sequence numbers stored"
    );
    writer.shutdown().await.unwrap();
    let stored: Vec<i64> = store.events_after(&id, 0, 10).unwrap().iter().map(|e| e.seq).collect();
    assert_eq!(stored, [1, 2, 3, 4]);
    assert_eq!(store.get(&id).unwrap().unwrap().status, Status::Running);
}

async fn a_queued_write_waited_for_now_is_stored_and_the_writer_goes_on(kind: Kind) {
    let (_fx, paths, store, id) = store_with_one_subagent(kind);
    let writer = Writer::start(&paths).unwrap();
    let w = writer.handle();
    w.append(&id, vec![text("queued")]).await.unwrap();
    let running = Update { status: Some(Status::Running), ..Update::default() };
    // Queued (the writer may wait for company), then needed at once.
    w.queue_update(&id, running).await.unwrap().now().await.unwrap();
    assert_eq!(store.get(&id).unwrap().unwrap().status, Status::Running);
    assert_eq!(store.events_after(&id, 0, 10).unwrap().len(), 2, "created + the queued text");
    // A write waited for later does not keep a stopped writer's queue open.
    let late = w.queue_update(&id, Update { pid: Some(9), ..Update::default() }).await.unwrap();
    writer.shutdown().await.unwrap();
    assert!(late.now().await.is_ok(), "committed before the writer stopped");
    assert!(matches!(w.flush().await, Err(StoreError::WriterGone(_))));
}

fn prefixes_resolve_uniquely(kind: Kind) {
    let fx = fx(kind);
    let mut store = Store::open(fx.paths.clone()).unwrap();
    store.create_session("s1", "cli", fx.dir.path()).unwrap();
    let a = SubagentId::generate();
    store.create_subagent(&new_sub(&a)).unwrap();
    assert_eq!(store.resolve(&a.as_str()[..20]).unwrap(), a);
    assert_eq!(store.resolve(&a.as_str().to_uppercase()).unwrap(), a);
    assert!(matches!(store.resolve("zz"), Err(StoreError::NotFound(_))));
    assert!(matches!(store.resolve("../x"), Err(StoreError::NotFound(_))));
    let b = SubagentId::generate();
    store.create_subagent(&new_sub(&b)).unwrap();
    assert!(matches!(store.resolve(&a.as_str()[..2]), Err(StoreError::Ambiguous { .. })));
    assert_eq!(store.list(false, 10).unwrap().len(), 2);
    assert!(store.request_cancel(&a).unwrap());
    assert!(store.cancel_requested(&a).unwrap());
    store.update(&a, &orphaned_update()).unwrap();
    assert_eq!(store.get(&a).unwrap().unwrap().failure_reason.as_deref(), Some("orphaned"));
    assert_eq!(store.list(false, 10).unwrap().len(), 1);
    // No limit: on PostgreSQL too (a negative LIMIT is refused there).
    assert_eq!(store.list(true, usize::MAX).unwrap().len(), 2);
    assert!(store.orchestrations(true, usize::MAX).unwrap().is_empty());
}

fn concurrent_first_opens_migrate_once(kind: Kind) {
    let fx = fx(kind);
    let paths = fx.paths.clone();
    let handles: Vec<_> = (0..6)
        .map(|_| {
            let p = paths.clone();
            std::thread::spawn(move || Store::open(p).map(|_| ()))
        })
        .collect();
    for h in handles {
        h.join().unwrap().unwrap();
    }
}

fn locks_follow_the_table_release_and_reclaim_dead_holders(kind: Kind) {
    use herd_core::workspace::Hold;
    let fx = fx(kind);
    let mut store = Store::open(fx.paths.clone()).unwrap();
    store.create_session("s1", "cli", fx.dir.path()).unwrap();
    let ids: Vec<SubagentId> = (0..4).map(|_| SubagentId::generate()).collect();
    for id in &ids {
        store.create_subagent(&new_sub(id)).unwrap();
    }
    let alive = |pid: u32, _: Option<u64>| pid != 999;
    let me = (std::process::id(), Some(42));
    let take = |s: &mut Store, id: &SubagentId, hold, owner| {
        s.acquire_lock("/w", id.as_str(), hold, owner, &alive).unwrap()
    };
    // Two shared holders together; an exclusive request is refused, naming both.
    assert!(take(&mut store, &ids[0], Hold::Shared, me).is_ok());
    assert!(take(&mut store, &ids[1], Hold::None, me).is_ok());
    let blocked = take(&mut store, &ids[2], Hold::Exclusive, me).unwrap_err();
    let names: Vec<&str> = blocked.iter().map(|h| h.holder.as_str()).collect();
    assert_eq!(names, [ids[0].as_str(), ids[1].as_str()]);
    // Released on the holders' end: the exclusive request goes through and blocks everyone.
    store.release_locks(ids[0].as_str()).unwrap();
    store.release_locks(ids[1].as_str()).unwrap();
    assert!(take(&mut store, &ids[2], Hold::Exclusive, me).is_ok());
    assert!(take(&mut store, &ids[3], Hold::None, me).is_err());
    // Another directory is independent.
    assert!(
        store.acquire_lock("/other", ids[3].as_str(), Hold::Exclusive, me, &alive).unwrap().is_ok()
    );
    store.release_locks(ids[3].as_str()).unwrap();

    // A holder whose owner process is dead is reclaimed by the next request.
    store.release_locks(ids[2].as_str()).unwrap();
    assert!(take(&mut store, &ids[2], Hold::Exclusive, (999, Some(1))).is_ok());
    assert!(take(&mut store, &ids[3], Hold::Exclusive, me).is_ok());
    assert_eq!(store.locks().unwrap().len(), 1);
    // A holder whose run ended is reclaimed by the sweep.
    store.update(&ids[3], &orphaned_update()).unwrap();
    assert_eq!(store.reclaim_locks(&alive).unwrap(), 1);
    assert!(store.locks().unwrap().is_empty());
}

/// Random acquire/release sequences never leave an exclusive holder beside anyone else, and a
/// refused request names live holders only.
fn lock_invariants_hold_under_random_sequences(kind: Kind) {
    use herd_core::workspace::Hold;
    use proptest::prelude::*;
    let fx = fx(kind);
    let mut store = Store::open(fx.paths.clone()).unwrap();
    store.create_session("s1", "cli", fx.dir.path()).unwrap();
    let ids: Vec<SubagentId> = (0..4).map(|_| SubagentId::generate()).collect();
    for id in &ids {
        store.create_subagent(&new_sub(id)).unwrap();
    }
    let store = std::cell::RefCell::new(store);
    let holds = [Hold::None, Hold::Shared, Hold::Exclusive];
    let ops = proptest::collection::vec((0usize..4, 0usize..4, any::<bool>()), 1..40);
    let mut runner = proptest::test_runner::TestRunner::default();
    runner
        .run(&ops, |ops| {
            let mut s = store.borrow_mut();
            for id in &ids {
                s.release_locks(id.as_str()).unwrap();
            }
            let alive = |_: u32, _: Option<u64>| true;
            for (who, what, on_a) in ops {
                let path = if on_a { "/a" } else { "/b" };
                let id = ids[who].as_str();
                if what == 3 {
                    s.release_locks(id).unwrap();
                    continue;
                }
                let got = s.acquire_lock(path, id, holds[what], (1, None), &alive).unwrap();
                let rows: Vec<_> =
                    s.locks().unwrap().into_iter().filter(|l| l.path == path).collect();
                match got {
                    Ok(()) => prop_assert!(rows.iter().any(|l| l.holder == id)),
                    Err(blockers) => {
                        prop_assert!(!blockers.is_empty());
                        prop_assert!(blockers.iter().all(|b| b.holder != id));
                    }
                }
                let exclusive = rows.iter().filter(|l| l.mode == "exclusive").count();
                prop_assert!(exclusive == 0 || rows.len() == 1, "{rows:?}");
            }
            Ok(())
        })
        .unwrap();
}

async fn a_run_marked_orphaned_has_its_waiting_requests_closed(kind: Kind) {
    let (_fx, paths, mut store, id) = store_with_one_subagent(kind);
    let writer = Writer::start(&paths).unwrap();
    let w = writer.handle();
    w.update(&id, Update { status: Some(Status::Running), ..Update::default() }).await.unwrap();
    w.create_permission_request(herd_store::NewPermissionRequest {
        id: "perm_1".into(),
        subagent_id: id.to_string(),
        cli_request_id: "r1".into(),
        tool: "Bash".into(),
        input_preview: "rm x".into(),
        input_sha256: "0".repeat(64),
        expires_at: herd_store::now_ms() + 60_000,
    })
    .await
    .unwrap();
    w.flush().await.unwrap();
    assert_eq!(store.pending_requests(None).unwrap().len(), 1);
    // What a herd sweeping a dead owner's runs writes.
    store.update(&id, &orphaned_update()).unwrap();
    assert!(store.pending_requests(None).unwrap().is_empty(), "nobody is left to answer it");
    let r = store.permission_request("perm_1").unwrap().unwrap();
    assert_eq!(r.status, "cancelled");
    writer.shutdown().await.unwrap();
}

async fn an_orphaned_plan_fails_its_running_steps_and_cancels_those_never_started(kind: Kind) {
    let (_fx, paths, mut store, _id) = store_with_one_subagent(kind);
    let step = |key: &str| herd_store::NewStep {
        key: key.into(),
        name: key.into(),
        prompt: "p".into(),
        model: None,
        cwd: None,
        tools: None,
        depends_on: vec![],
        contract: "{}".into(),
    };
    let writer = Writer::start(&paths).unwrap();
    let w = writer.handle();
    w.create_orchestration(herd_store::NewOrchestration {
        id: "o1".into(),
        session: "s1".into(),
        name: "plan".into(),
        strategy: "parallel".into(),
        plan: "{}".into(),
        source_file: None,
        steps: vec![step("a"), step("b"), step("c")],
        owner_pid: 999_999,
        owner_start_time: Some(1),
    })
    .await
    .unwrap();
    w.set_step(herd_store::StepChange::new("o1", "a", "running", None)).await.unwrap();
    w.set_step(herd_store::StepChange::new("o1", "b", "running", None)).await.unwrap();
    w.set_step(herd_store::StepChange::new("o1", "b", "completed", None)).await.unwrap();
    w.flush().await.unwrap();

    store.fail_orphaned_orchestration("o1").unwrap();
    let steps: Vec<_> = store
        .steps("o1")
        .unwrap()
        .into_iter()
        .map(|s| (s.step_key, s.status, s.failure_reason))
        .collect();
    assert_eq!(
        steps,
        vec![
            ("a".into(), "failed".into(), Some("orphaned".into())),
            ("b".into(), "completed".into(), None),
            ("c".into(), "cancelled".into(), Some("orphaned".into())),
        ]
    );
    assert_eq!(store.orchestration("o1").unwrap().unwrap().status, "interrupted");
    assert_eq!(store.plan_events("o1").unwrap().last().unwrap().kind, "plan_interrupted");

    // Resumed: what had not completed is pending again; a running plan is not reopened.
    assert!(store.reopen_orchestration("o1", (std::process::id(), None)).unwrap());
    let statuses: Vec<_> = store.steps("o1").unwrap().into_iter().map(|s| s.status).collect();
    assert_eq!(statuses, ["pending", "completed", "pending"]);
    let o = store.orchestration("o1").unwrap().unwrap();
    assert_eq!((o.status.as_str(), o.completed_at), ("running", None));
    let last = store.plan_events("o1").unwrap().pop().unwrap();
    assert_eq!(
        (last.kind.as_str(), last.payload.as_str()),
        ("plan_resumed", r#"{"completed_steps":["b"]}"#)
    );
    assert!(!store.reopen_orchestration("o1", (std::process::id(), None)).unwrap());
}
