//! The worker queue on PostgreSQL: dependencies resolved in the database, one claimant per
//! step, fenced writes, lease expiry re-queues (counted against retries), dependents fail.

use herd_store::{Backend, NewOrchestration, NewStep, QueuedStep, StatePaths, Store};

fn step(key: &str, deps: &[&str]) -> NewStep {
    NewStep {
        key: key.into(),
        name: key.into(),
        prompt: "p".into(),
        model: None,
        cwd: None,
        tools: None,
        depends_on: deps.iter().map(|d| d.to_string()).collect(),
        contract: "{}".into(),
    }
}

/// Plan `id` of session `s1` with `steps`.
fn orch(id: &str, steps: Vec<NewStep>) -> NewOrchestration {
    NewOrchestration {
        id: id.into(),
        session: "s1".into(),
        name: id.into(),
        strategy: "dag".into(),
        plan: "{}".into(),
        source_file: None,
        steps,
        owner_pid: 1,
        owner_start_time: None,
    }
}

fn open(pg: &herd_testkit::PgDb, dir: &std::path::Path) -> Store {
    Store::open(StatePaths::new(dir).with_store(Backend::Postgres(pg.url.clone()))).unwrap()
}

#[test]
fn steps_are_claimed_once_in_dependency_order_and_fenced() {
    let pg = herd_testkit::pg_db();
    let dir = tempfile::tempdir().unwrap();
    let mut s = open(&pg, dir.path());
    let other = open(&pg, dir.path());
    s.create_session("s1", "cli", dir.path()).unwrap();
    let o =
        orch("pln_q", vec![step("a", &[]), step("b", &["a"]), step("c", &["b"]), step("gpu", &[])]);
    let q = |retries, labels: &[&str]| QueuedStep {
        retries,
        labels: labels.iter().map(|l| l.to_string()).collect(),
    };
    s.submit_orchestration(
        &o,
        "steps: []",
        &[q(1, &[]), q(0, &[]), q(0, &[]), q(0, &["gpu"])],
        None,
    )
    .unwrap();
    assert_eq!(s.plan_text("pln_q").unwrap().as_deref(), Some("steps: []"));
    let none: Vec<String> = vec![];
    // Only `a` is ready for a worker without labels; nobody else gets it while it is held.
    let a = s.claim_step("w1", &none, 60_000, "r1").unwrap().unwrap();
    assert_eq!((a.key.as_str(), a.attempt, a.fence), ("a", 1, 1));
    assert!(other.claim_step("w2", &none, 60_000, "r2").unwrap().is_none());
    // The labelled step goes to a worker with the label.
    let gpu = other.claim_step("w2", &["gpu".into()], 60_000, "r2").unwrap().unwrap();
    assert_eq!(gpu.key, "gpu");
    assert!(other.finish_claim(&gpu, "completed", None).unwrap());

    // `a`'s lease expires: it is pending again (attempt counted), and w1's late write is refused.
    let short = s.claim_step("w1", &none, 60_000, "r").unwrap();
    assert!(short.is_none());
    s.heartbeat("w1", 1, "active", -1).unwrap();
    assert_eq!(other.requeue_expired().unwrap(), 1);
    let again = other.claim_step("w2", &none, 60_000, "r3").unwrap().unwrap();
    assert_eq!((again.key.as_str(), again.attempt, again.fence), ("a", 2, 3));
    assert!(!s.finish_claim(&a, "completed", None).unwrap(), "fenced: w1 lost its lease");
    assert!(other.finish_claim(&again, "completed", None).unwrap());

    // Then b; its final failure fails c (dependency_failed) and ends the plan.
    let b = s.claim_step("w1", &none, 60_000, "r4").unwrap().unwrap();
    assert_eq!(b.key, "b");
    assert!(s.finish_claim(&b, "failed", Some("exit 1")).unwrap());
    let steps: Vec<_> = s
        .steps("pln_q")
        .unwrap()
        .into_iter()
        .map(|r| (r.step_key, r.status, r.failure_reason, r.attempts))
        .collect();
    assert_eq!(
        steps,
        vec![
            ("a".into(), "completed".into(), None, 2),
            ("b".into(), "failed".into(), Some("exit 1".into()), 1),
            ("c".into(), "failed".into(), Some("dependency_failed(b)".into()), 0),
            ("gpu".into(), "completed".into(), None, 1),
        ]
    );
    assert_eq!(s.orchestration("pln_q").unwrap().unwrap().status, "failed");
    assert!(s.claim_step("w1", &["gpu".into()], 60_000, "r5").unwrap().is_none());
}

#[test]
fn workers_register_and_listen() {
    let pg = herd_testkit::pg_db();
    let dir = tempfile::tempdir().unwrap();
    let s = open(&pg, dir.path());
    s.register_worker("w1", "host-a", &["linux".into()], 4).unwrap();
    s.heartbeat("w1", 2, "draining", 1000).unwrap();
    let w = s.workers().unwrap();
    assert_eq!((w[0].host.as_str(), w[0].running, w[0].status.as_str()), ("host-a", 2, "draining"));
    assert_eq!(w[0].labels, ["linux"]);
    // A notification wakes a listener at once; without one it times out.
    let listener = open(&pg, dir.path());
    listener.listen_steps().unwrap();
    assert!(!listener.wait_notification(std::time::Duration::from_millis(50)));
    let t = std::time::Instant::now();
    s.requeue_expired().unwrap();
    let mut s2 = open(&pg, dir.path());
    s2.create_session("s1", "cli", dir.path()).unwrap();
    let o = orch("pln_n", vec![step("a", &[])]);
    s2.submit_orchestration(&o, "x", &[QueuedStep::default()], None).unwrap();
    assert!(listener.wait_notification(std::time::Duration::from_secs(5)));
    assert!(t.elapsed() < std::time::Duration::from_secs(5));
}

#[test]
fn a_step_waits_for_every_dependency_of_its_own_plan() {
    let pg = herd_testkit::pg_db();
    let dir = tempfile::tempdir().unwrap();
    let mut s = open(&pg, dir.path());
    s.create_session("s1", "cli", dir.path()).unwrap();
    // `join` comes first in plan order but needs both `a` and `b`.
    let one = orch("pln_1", vec![step("join", &["a", "b"]), step("a", &[]), step("b", &[])]);
    s.submit_orchestration(&one, "x", &vec![QueuedStep::default(); 3], None).unwrap();
    let none: Vec<String> = vec![];
    let a = s.claim_step("w1", &none, 60_000, "r").unwrap().unwrap();
    let b = s.claim_step("w1", &none, 60_000, "r").unwrap().unwrap();
    assert_eq!((a.key.as_str(), b.key.as_str()), ("a", "b"));
    // A later plan with steps of the same keys, left pending (no worker has their label):
    // they are not `join`'s dependencies.
    let two = orch("pln_2", vec![step("a", &[]), step("b", &[])]);
    let elsewhere = QueuedStep { retries: 0, labels: vec!["elsewhere".into()] };
    s.submit_orchestration(&two, "x", &vec![elsewhere; 2], None).unwrap();
    assert!(s.claim_step("w1", &none, 60_000, "r").unwrap().is_none());
    assert!(s.finish_claim(&a, "completed", None).unwrap());
    assert!(s.claim_step("w1", &none, 60_000, "r").unwrap().is_none(), "b still runs");
    assert!(s.finish_claim(&b, "completed", None).unwrap());
    let join = s.claim_step("w1", &none, 60_000, "r").unwrap().unwrap();
    assert_eq!((join.orch.as_str(), join.key.as_str()), ("pln_1", "join"));
    assert!(s.finish_claim(&join, "completed", None).unwrap());
    assert_eq!(s.orchestration("pln_1").unwrap().unwrap().status, "completed");
}

#[test]
fn a_pushed_step_waits_for_one_merger_and_its_merge_ends_it_once() {
    use herd_core::{FailureReason, Status};
    use herd_store::{MergeEnd, PlanRepo};
    let pg = herd_testkit::pg_db();
    let dir = tempfile::tempdir().unwrap();
    let mut s = open(&pg, dir.path());
    let other = open(&pg, dir.path());
    s.create_session("s1", "cli", dir.path()).unwrap();
    let o = orch("pln_m", vec![step("a", &[]), step("b", &["a"]), step("c", &[])]);
    let repo = PlanRepo {
        url: "/srv/app.git".into(),
        base: "0123abcd".into(),
        integration_branch: "herd/pln_m/integration".into(),
    };
    s.submit_orchestration(&o, "x", &vec![QueuedStep::default(); 3], Some(&repo)).unwrap();
    assert_eq!(other.plan_repo("pln_m").unwrap(), Some(repo));
    let none: Vec<String> = vec![];
    let a = s.claim_step("w1", &none, 60_000, "r1").unwrap().unwrap();
    let c = s.claim_step("w1", &none, 60_000, "r2").unwrap().unwrap();
    assert_eq!((a.key.as_str(), c.key.as_str()), ("a", "c"));
    // A stale holder (an older fence) cannot hand the step over.
    let stale = herd_store::Claim { fence: a.fence - 1, ..a.clone() };
    assert!(!s.await_merge(&stale, "herd/pln_m/a", "h0").unwrap());
    assert!(s.await_merge(&a, "herd/pln_m/a", "h1").unwrap());
    // Waiting, it holds no lease (nothing expires it) and is still open: `b` is not ready.
    assert_eq!(other.requeue_expired().unwrap(), 0);
    assert!(other.claim_step("w2", &none, 60_000, "r3").unwrap().is_none());
    assert_eq!(other.plans_awaiting_merge().unwrap(), vec!["pln_m".to_owned()]);
    let waiting = other.merge_candidates("pln_m").unwrap();
    assert_eq!(waiting[0].merge_branch.as_deref(), Some("herd/pln_m/a"));
    assert_eq!(waiting[0].merge_head.as_deref(), Some("h1"));
    // One merger per plan: the lock is refused to another connection until given back, and a
    // merger whose connection ends frees it.
    assert!(s.try_merge_lock("pln_m").unwrap());
    assert!(!other.try_merge_lock("pln_m").unwrap());
    assert!(other.try_merge_lock("pln_other").unwrap());
    s.merge_unlock("pln_m").unwrap();
    assert!(other.try_merge_lock("pln_m").unwrap());
    drop(other);
    let third = open(&pg, dir.path());
    assert!(third.try_merge_lock("pln_m").unwrap(), "the lock outlived its connection");
    // Merged: the step completes once (a second merger finds nothing waiting); `b` is ready.
    let merged = MergeEnd {
        status: Status::Completed,
        failure: None,
        commit: Some("m1".into()),
        events: Vec::new(),
    };
    assert!(third.finish_merge("pln_m", "a", &merged).unwrap());
    assert!(!third.finish_merge("pln_m", "a", &merged).unwrap());
    assert!(third.plans_awaiting_merge().unwrap().is_empty());
    let b = third.claim_step("w2", &none, 60_000, "r3").unwrap().unwrap();
    assert_eq!(b.key, "b");
    // A conflict fails the step; the plan ends once every step has.
    assert!(s.await_merge(&c, "herd/pln_m/c", "h2").unwrap());
    let conflict = MergeEnd {
        status: Status::Failed,
        failure: Some(FailureReason::MergeConflict),
        commit: None,
        events: Vec::new(),
    };
    assert!(third.finish_merge("pln_m", "c", &conflict).unwrap());
    assert!(third.finish_claim(&b, "completed", None).unwrap());
    let (row, steps) =
        (third.orchestration("pln_m").unwrap().unwrap(), third.steps("pln_m").unwrap());
    let st: Vec<(&str, &str, Option<&str>)> = steps
        .iter()
        .map(|s| (s.step_key.as_str(), s.status.as_str(), s.failure_reason.as_deref()))
        .collect();
    assert_eq!(
        st,
        [
            ("a", "completed", None),
            ("b", "completed", None),
            ("c", "failed", Some("merge_conflict"))
        ]
    );
    assert_eq!(row.status, "failed");
}

#[test]
fn another_machines_runs_plans_and_locks_are_not_judged_or_swept_here() {
    use herd_core::SubagentId;
    use herd_core::workspace::Hold;
    let pg = herd_testkit::pg_db();
    let dir = tempfile::tempdir().unwrap();
    let mut s = open(&pg, dir.path());
    s.create_session("s1", "cli", dir.path()).unwrap();
    let run = |s: &mut Store| {
        let id = SubagentId::generate();
        s.create_subagent(&herd_store::NewSubagent {
            id: id.clone(),
            parent_session_id: "s1".into(),
            name: "t".into(),
            cli: "command".into(),
            prompt: "p".into(),
            model: None,
            working_directory: "/srv/app".into(),
            max_turns: None,
            timeout_ms: None,
            spec: serde_json::json!({}),
            // A pid that means nothing here: the owner is on another machine.
            owner_pid: 4_000_000,
            owner_start_time: Some(1),
        })
        .unwrap();
        id
    };
    let (mine, theirs) = (run(&mut s), run(&mut s));
    assert_eq!(s.active_runs().unwrap().len(), 2);
    pg.rows(&format!(
        "UPDATE subagents SET owner_host = 'elsewhere/boot' WHERE id = '{theirs}' RETURNING id"
    ));
    let judged: Vec<String> =
        s.active_runs().unwrap().into_iter().map(|r| r.id.to_string()).collect();
    assert_eq!(judged, [mine.to_string()], "another machine's run would be swept as orphaned");
    // A lock on the same path elsewhere is another directory: it neither blocks nor is reclaimed.
    let dead = |_: u32, _: Option<u64>| false;
    let held =
        s.acquire_lock("/srv/app", theirs.as_str(), Hold::Exclusive, (4_000_000, Some(1)), &dead);
    assert!(held.unwrap().is_ok());
    pg.rows("UPDATE worktree_locks SET owner_host = 'elsewhere/boot' RETURNING path");
    let alive = |_: u32, _: Option<u64>| true;
    let got = s.acquire_lock("/srv/app", mine.as_str(), Hold::Exclusive, (1, None), &alive);
    assert!(got.unwrap().is_ok(), "another machine's lock blocked this one");
    assert_eq!(s.reclaim_locks(&dead).unwrap(), 1, "only this machine's holder is judged");
    assert!(s.locks().unwrap().is_empty(), "this machine's list shows this machine's locks");
    let rows = pg.rows("SELECT holder FROM worktree_locks");
    assert_eq!(rows, [[Some(theirs.to_string())]], "the other machine's lock row stays");
}

#[test]
fn a_cancelled_queued_plan_gives_workers_no_more_steps_and_ends_when_its_running_ones_do() {
    let pg = herd_testkit::pg_db();
    let dir = tempfile::tempdir().unwrap();
    let mut s = open(&pg, dir.path());
    s.create_session("s1", "cli", dir.path()).unwrap();
    let o = orch("pln_c", vec![step("a", &[]), step("b", &[]), step("c", &["a"])]);
    s.submit_orchestration(&o, "x", &vec![QueuedStep::default(); 3], None).unwrap();
    let none: Vec<String> = vec![];
    let a = s.claim_step("w1", &none, 60_000, "r1").unwrap().unwrap();
    assert!(s.request_plan_cancel("pln_c").unwrap());
    // b was ready, c was not: neither is handed out any more; the plan waits for a.
    assert!(s.claim_step("w2", &none, 60_000, "r2").unwrap().is_none());
    let status = |s: &Store| -> Vec<(String, String)> {
        s.steps("pln_c").unwrap().into_iter().map(|r| (r.step_key, r.status)).collect()
    };
    let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    assert_eq!(status(&s), [pair("a", "running"), pair("b", "cancelled"), pair("c", "cancelled")]);
    assert_eq!(s.orchestration("pln_c").unwrap().unwrap().status, "running");
    assert!(s.finish_claim(&a, "cancelled", None).unwrap());
    assert_eq!(s.orchestration("pln_c").unwrap().unwrap().status, "cancelled");
}
