//! Workspaces end to end, on real git repositories with the real claude running shell commands
//! (scripted Bash calls) in its cwd: isolated steps merged in plan order, a merge conflict that
//! loses nothing, advisory locks (wait, RESOURCE_EXHAUSTED, a dead holder reclaimed), prune.

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::{World, git, init_repo, procs_with_cmdline, wait_until};
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

/// `herd run --json` of `plan`, written beside the state directory (outside the repository, so
/// the plan file never makes the checkout dirty).
fn run_beside(w: &World, file: &str, plan: &str) -> (i32, Value) {
    let plan_file = w.state.parent().unwrap().join(file);
    std::fs::write(&plan_file, plan).unwrap();
    w.json(&["run", plan_file.to_str().unwrap(), "--json"])
}

/// A scenario whose one Bash call runs `cmd`, then (after `delay`) says done.
fn bash_then_done(scenario: &str, cmd: &str, delay: Duration) {
    MockServer::shared().script(
        scenario,
        Script::new()
            .tool_use("Bash", json!({"command": cmd, "description": "work"}))
            .text("done: {{last_tool_result}}")
            .delay(delay),
    );
}

fn step<'a>(v: &'a Value, id: &str) -> &'a Value {
    v["steps"].as_array().unwrap().iter().find(|s| s["id"] == id).unwrap()
}

fn assert_checkout_untouched(w: &World, head: &str) {
    assert_eq!(git(&w.work, &["status", "--porcelain=v1", "--untracked-files=all"]), "");
    assert_eq!(git(&w.work, &["rev-parse", "HEAD"]).trim(), head);
    assert_eq!(git(&w.work, &["symbolic-ref", "--short", "HEAD"]).trim(), "main");
    assert_eq!(std::fs::read_to_string(w.work.join("base.txt")).unwrap(), "line\n");
    assert!(!w.work.join(".git/MERGE_HEAD").exists());
}

#[test]
fn isolated_steps_merge_in_plan_order_and_the_checkout_is_untouched() {
    let w = world_or_skip!();
    let head = init_repo(&w);
    // Finishing order c, b, a: the merge order must still be a, b, c.
    bash_then_done("ws3_a", "echo A > a.txt && cat .env && pwd", Duration::from_millis(2500));
    bash_then_done("ws3_b", "echo B > b.txt && pwd", Duration::from_millis(1200));
    bash_then_done("ws3_c", "mkdir -p sub && echo C > sub/c.txt && pwd", Duration::ZERO);
    let plan = "name: iso3\nstrategy: parallel\n\
        defaults: {cli: claude, timeout: 60s, workspace: isolated, allow: [Bash]}\nsteps:\n\
        \x20 - {id: a, prompt: \"SCENARIO=ws3_a write a\"}\n\
        \x20 - {id: b, prompt: \"SCENARIO=ws3_b write b\"}\n\
        \x20 - {id: c, prompt: \"SCENARIO=ws3_c write c\", setup: \"echo set-up > $HERD_WORKTREE/setup.txt && test \\\"$HERD_BRANCH\\\" = \\\"$(git branch --show-current)\\\" && test \\\"$HERD_REPO\\\" = \\\"REPO\\\"\"}\n";
    let plan = plan.replace("REPO", &w.work.canonicalize().unwrap().display().to_string());
    let (code, v) = run_beside(&w, "iso3.yml", &plan);
    assert_eq!(code, 0, "{v}");
    let run = v["id"].as_str().unwrap();
    let integ = format!("herd/{run}/integration");
    assert_eq!(v["integration_branch"], integ.as_str());
    for id in ["a", "b", "c"] {
        assert_eq!(step(&v, id)["status"], "completed", "{id}: {v}");
    }
    // Plan order on the integration branch's first-parent history, whatever the finish order.
    let log = git(&w.work, &["log", "--first-parent", "--format=%s", "-3", &integ]);
    let subjects: Vec<&str> = log.lines().rev().collect();
    assert_eq!(subjects.len(), 3, "{log}");
    for (s, id) in subjects.iter().zip(["a", "b", "c"]) {
        assert!(s.starts_with(&format!("herd: merge step {id} (")), "{log}");
    }
    assert_eq!(git(&w.work, &["show", &format!("{integ}:a.txt")]), "A\n");
    assert_eq!(git(&w.work, &["show", &format!("{integ}:b.txt")]), "B\n");
    assert_eq!(git(&w.work, &["show", &format!("{integ}:sub/c.txt")]), "C\n");
    // `herd show` says where each step worked and how its merge went.
    let a_id = step(&v, "a")["subagent_id"].as_str().unwrap().to_owned();
    let (_, shown) = w.json(&["show", &a_id, "--json"]);
    assert_eq!(shown["worktree"]["branch"], format!("herd/{run}/a").as_str(), "{shown}");
    assert_eq!(shown["worktree"]["status"], "merged", "{shown}");
    let text = String::from_utf8_lossy(&w.run(&["show", &a_id]).stdout).into_owned();
    assert!(text.contains(&format!("(herd/{run}/a → {integ}, merged)")), "{text}");
    // Auto-commit took the agent's new files (and setup's); each step's own commit is there.
    let c_msg = git(&w.work, &["log", "-1", "--format=%B", &format!("herd/{run}/c")]);
    assert!(c_msg.starts_with("herd: c: SCENARIO=ws3_c write c"), "{c_msg}");
    assert_eq!(git(&w.work, &["show", &format!("{integ}:setup.txt")]), "set-up\n");
    assert_checkout_untouched(&w, &head);
    assert!(!w.work.join("a.txt").exists());

    // Each agent ran in its own worktree (outside the repo), with .env copied in.
    let (_, wts) = w.json(&["worktrees", "list", "--json"]);
    let wts = wts.as_array().unwrap();
    assert_eq!(wts.len(), 3, "the integration worktree is gone: {wts:?}");
    for id in ["a", "b", "c"] {
        let sub = step(&v, id)["subagent_id"].as_str().unwrap();
        let wt = wts.iter().find(|r| r["subagent_id"] == sub).unwrap();
        assert_eq!(wt["status"], "merged");
        let path = wt["path"].as_str().unwrap();
        assert!(!Path::new(path).starts_with(&w.work), "{path}");
        let events = w.events(sub);
        let result = events.iter().find(|e| e["kind"] == "tool_result").unwrap();
        assert!(result["content"].as_str().unwrap().contains(path), "{result}");
        let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
        let pos = |k: &str| {
            kinds.iter().position(|x| *x == k).unwrap_or_else(|| panic!("{k}: {kinds:?}"))
        };
        assert!(pos("worktree_created") < pos("subagent_started"));
        assert!(pos("result") < pos("subagent_waiting_for_merge"));
        assert!(pos("subagent_waiting_for_merge") < pos("worktree_merged"));
        assert_eq!(kinds.last(), Some(&"subagent_closed"));
        let (_, row) = w.json(&["show", sub, "--json"]);
        assert_eq!(row["status"], "completed");
        let closed = events.last().unwrap();
        assert_eq!(
            (&closed["final_status"], &closed["close_reason"]),
            (&json!("completed"), &json!("merged"))
        );
    }
    let a_events = w.events(step(&v, "a")["subagent_id"].as_str().unwrap());
    let a_out = a_events.iter().find(|e| e["kind"] == "tool_result").unwrap();
    assert!(a_out["content"].as_str().unwrap().contains("SECRET=1"), ".worktreeinclude: {a_out}");
}

#[test]
fn a_conflict_fails_the_later_step_keeps_its_branch_and_prune_only_takes_merged_work() {
    let w = world_or_skip!();
    let head = init_repo(&w);
    // b finishes first; plan order still merges a first, so b is the one that conflicts.
    bash_then_done("wsc_a", "echo A > base.txt", Duration::from_millis(2000));
    bash_then_done("wsc_b", "echo B > base.txt", Duration::ZERO);
    bash_then_done("wsc_c", "echo C > c.txt", Duration::ZERO);
    let plan = "strategy: dag\n\
        defaults: {cli: claude, timeout: 60s, workspace: isolated, allow: [Bash]}\nsteps:\n\
        \x20 - {id: a, prompt: \"SCENARIO=wsc_a edit\"}\n\
        \x20 - {id: b, prompt: \"SCENARIO=wsc_b edit\"}\n\
        \x20 - {id: c, prompt: \"SCENARIO=wsc_c add\"}\n";
    let (code, v) = run_beside(&w, "conflict.yml", plan);
    assert_eq!(code, 1, "{v}");
    let run = v["id"].as_str().unwrap();
    let integ = format!("herd/{run}/integration");
    assert_eq!(step(&v, "a")["status"], "completed", "{v}");
    assert_eq!(step(&v, "b")["status"], "failed", "{v}");
    assert_eq!(step(&v, "b")["failure_reason"], "merge_conflict");
    // The following step still merged.
    assert_eq!(step(&v, "c")["status"], "completed", "{v}");
    assert_eq!(git(&w.work, &["show", &format!("{integ}:base.txt")]), "A\n");
    assert_eq!(git(&w.work, &["show", &format!("{integ}:c.txt")]), "C\n");
    assert_checkout_untouched(&w, &head);
    // herd show PLAN has each step's merge: into where, and how it went.
    let shown = String::from_utf8_lossy(&w.run(&["show", run]).stdout).into_owned();
    let merges = &shown[shown.find("\nmerges:\n").expect(&shown)..];
    for (s, result) in [("a", "merged ("), ("b", "conflict"), ("c", "merged (")] {
        let line = format!("herd/{run}/{s} → {integ}: {result}");
        assert!(merges.contains(&line), "{line} missing:\n{shown}");
    }
    // The loser's branch and commit are intact.
    let b_branch = format!("herd/{run}/b");
    assert_eq!(git(&w.work, &["show", &format!("{b_branch}:base.txt")]), "B\n");
    assert!(git(&w.work, &["log", "-1", "--format=%s", &b_branch]).starts_with("herd: b: "));
    let b_sub = step(&v, "b")["subagent_id"].as_str().unwrap();
    let kinds = w.kinds(b_sub);
    let tail: Vec<&str> = kinds.iter().rev().take(4).rev().map(String::as_str).collect();
    assert_eq!(
        tail,
        ["subagent_waiting_for_merge", "merge_conflict", "subagent_failed", "subagent_closed"]
    );
    let conflict = w.events(b_sub).into_iter().find(|e| e["kind"] == "merge_conflict").unwrap();
    assert_eq!(conflict["files"], json!(["base.txt"]), "{conflict}");
    let all = git(&w.work, &["log", "--all", "--format=%H"]);

    // Prune: a dry run removes nothing; then merged worktrees go, the unmerged one stays.
    let (_, wts) = w.json(&["worktrees", "list", "--json"]);
    let path_of = |step: &str| {
        let sub = self::step(&v, step)["subagent_id"].as_str().unwrap().to_owned();
        let r = wts.as_array().unwrap().iter().find(|r| r["subagent_id"] == sub.as_str()).unwrap();
        (r["id"].as_str().unwrap().to_owned(), r["path"].as_str().unwrap().to_owned())
    };
    let ((a_id, a_path), (b_id, b_path)) = (path_of("a"), path_of("b"));
    let (code, dry) = w.json(&["worktrees", "prune", "--dry-run", "--json"]);
    assert_eq!(code, 0, "{dry}");
    assert!(Path::new(&a_path).exists());
    let verdict =
        |r: &Value, id: &str| r.as_array().unwrap().iter().find(|x| x["id"] == id).unwrap().clone();
    assert_eq!(verdict(&dry, &a_id)["result"], "would remove");
    let (code, pruned) = w.json(&["worktrees", "prune", "--json"]);
    assert_eq!(code, 0, "{pruned}");
    assert_eq!(verdict(&pruned, &a_id)["result"], "removed");
    let kept = verdict(&pruned, &b_id);
    assert_eq!(kept["result"], "kept");
    assert!(kept["why"].as_str().unwrap().contains("not merged"), "{kept}");
    assert!(!Path::new(&a_path).exists() && Path::new(&b_path).exists());
    assert!(git(&w.work, &["branch", "--list", &format!("herd/{run}/a")]).is_empty());
    assert_eq!(git(&w.work, &["show", &format!("{b_branch}:base.txt")]), "B\n");
    // A dirty worktree is refused even by an explicit remove; a clean unmerged one keeps its branch.
    std::fs::write(Path::new(&b_path).join("scratch.txt"), "wip").unwrap();
    let out = w.run(&["worktrees", "remove", &b_id]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("uncommitted changes"));
    std::fs::remove_file(Path::new(&b_path).join("scratch.txt")).unwrap();
    let out = w.run(&["worktrees", "remove", &b_id]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!Path::new(&b_path).exists());
    assert_eq!(git(&w.work, &["show", &format!("{b_branch}:base.txt")]), "B\n");
    // No test ever finds a lost commit: every commit reachable before is reachable now.
    let now = git(&w.work, &["log", "--all", "--format=%H"]);
    for c in all.lines() {
        if !now.contains(c) {
            // Only a merged step branch was deleted; its commits are in the integration branch.
            assert!(
                git(&w.work, &["branch", "--contains", c, "--all"]).contains(&integ),
                "lost {c}"
            );
        }
    }
    assert_checkout_untouched(&w, &head);
}

/// `herd task` holding an exclusive lock on the work dir while its Bash call sleeps.
fn start_holder(w: &World, scenario: &str, marker: &str) -> std::process::Child {
    MockServer::shared().script(
        scenario,
        Script::new()
            .tool_use("Bash", json!({"command": format!("sleep {marker}"), "description": "hold"}))
            .text("held"),
    );
    let prompt = format!("SCENARIO={scenario} go");
    let args =
        ["task", &prompt, "--cli", "claude", "--allow", "Bash", "--lock", "exclusive", "--json"];
    let child = w.herd(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let needle = format!("sleep {marker}");
    assert!(
        wait_until(Duration::from_secs(30), || !procs_with_cmdline(&needle).is_empty()),
        "the holder never started"
    );
    child
}

#[test]
fn an_exclusive_lock_makes_others_wait_or_fail_with_resource_exhausted() {
    let w = world_or_skip!();
    let holder = start_holder(&w, "lk_hold", "9.23");
    MockServer::shared().script("lk_other", Script::new().text("ran"));
    // wait: false — refused at once, the agent never starts.
    let (code, v) = w.json(&[
        "task",
        "SCENARIO=lk_other go",
        "--cli",
        "claude",
        "--lock",
        "exclusive",
        "--json",
    ]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["status"], "failed");
    let reason = v["failure_reason"].as_str().unwrap();
    assert!(reason.starts_with("RESOURCE_EXHAUSTED:") && reason.contains("exclusive"), "{reason}");
    assert!(!w.kinds(v["id"].as_str().unwrap()).iter().any(|k| k == "subagent_started"));
    // An unlocked run is blocked by an exclusive holder too (seed 000's table).
    let (code, v) = w.json(&["task", "SCENARIO=lk_other go", "--cli", "claude", "--json"]);
    assert_eq!(code, 1, "{v}");
    assert!(v["failure_reason"].as_str().unwrap().starts_with("RESOURCE_EXHAUSTED"), "{v}");
    // wait: true — queued until the holder ends, then runs.
    let waiter = w
        .herd(&[
            "task",
            "SCENARIO=lk_other go",
            "--cli",
            "claude",
            "--lock",
            "exclusive",
            "--wait",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || {
            let (_, ps) = w.json(&["ps", "--json"]);
            ps.as_array().unwrap().iter().any(|r| r["status"] == "queued")
        }),
        "the waiter was never queued"
    );
    let held = holder.wait_with_output().unwrap();
    let held: Value = serde_json::from_slice(&held.stdout).unwrap();
    assert_eq!(held["status"], "completed", "{held}");
    let out = waiter.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(v["result"], "ran");
    let kinds = w.kinds(v["id"].as_str().unwrap());
    let pos =
        |k: &str| kinds.iter().position(|x| x == k).unwrap_or_else(|| panic!("{k}: {kinds:?}"));
    assert!(pos("lock_waiting") < pos("lock_acquired"));
    assert!(pos("lock_acquired") < pos("subagent_started"));
    // Every lock was released at the end: an exclusive request goes straight through.
    let (code, v) = w.json(&[
        "task",
        "SCENARIO=lk_other go",
        "--cli",
        "claude",
        "--lock",
        "exclusive",
        "--json",
    ]);
    assert_eq!(code, 0, "{v}");
}

#[test]
fn a_dead_holders_lock_is_reclaimed() {
    let w = world_or_skip!();
    let mut holder = start_holder(&w, "lk_dead", "5.37");
    // SIGKILL: herd records nothing, its lock row stays with a dead owner.
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert!(wait_until(Duration::from_secs(10), || procs_with_cmdline("sleep 5.37").is_empty()));
    MockServer::shared().script("lk_after", Script::new().text("mine"));
    let (code, v) = w.json(&[
        "task",
        "SCENARIO=lk_after go",
        "--cli",
        "claude",
        "--lock",
        "exclusive",
        "--json",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["result"], "mine");
}

#[test]
fn locked_plan_steps_take_turns_and_a_failing_setup_fails_its_step_with_the_output() {
    let w = world_or_skip!();
    let head = init_repo(&w);
    // Two exclusive steps in parallel with wait: true run one after the other.
    for s in ["lkp_a", "lkp_b"] {
        bash_then_done(
            s,
            &format!("echo start-{s} >> order.log && sleep 1 && echo end-{s} >> order.log"),
            Duration::ZERO,
        );
    }
    let plan = "strategy: parallel\n\
        defaults: {cli: claude, timeout: 60s, allow: [Bash]}\nsteps:\n\
        \x20 - {id: a, prompt: \"SCENARIO=lkp_a go\", lock: exclusive, wait: true}\n\
        \x20 - {id: b, prompt: \"SCENARIO=lkp_b go\", workspace: locked, wait: true}\n\
        \x20 - {id: s, prompt: \"SCENARIO=lkp_never go\", workspace: isolated, setup: \"echo setup-said-no; exit 3\"}\n";
    let (code, v) = run_beside(&w, "locked.yml", plan);
    assert_eq!(code, 1, "{v}");
    assert_eq!(step(&v, "a")["status"], "completed", "{v}");
    assert_eq!(step(&v, "b")["status"], "completed", "{v}");
    let log = std::fs::read_to_string(w.work.join("order.log")).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 4, "{log}");
    assert!(lines[0].starts_with("start-") && lines[1].starts_with("end-"), "interleaved: {log}");
    assert_eq!(lines[0][6..], lines[1][4..], "interleaved: {log}");
    // One of them waited, and was blocked meanwhile.
    let waited: Vec<bool> = ["a", "b"]
        .iter()
        .map(|id| {
            w.kinds(step(&v, id)["subagent_id"].as_str().unwrap())
                .iter()
                .any(|k| k == "lock_waiting")
        })
        .collect();
    assert_eq!(waited.iter().filter(|x| **x).count(), 1, "{waited:?}");
    // The setup failure is the step's reason, with the command's output; the agent never ran.
    assert_eq!(step(&v, "s")["status"], "failed");
    let reason = step(&v, "s")["failure_reason"].as_str().unwrap();
    assert!(
        reason.starts_with("workspace: setup `echo setup-said-no; exit 3` exited 3"),
        "{reason}"
    );
    assert!(reason.contains("setup-said-no"), "{reason}");
    assert!(MockServer::shared().requests_for("lkp_never").is_empty());
    std::fs::remove_file(w.work.join("order.log")).unwrap();
    assert_checkout_untouched(&w, &head);
}

#[test]
fn an_isolated_task_merges_into_a_named_branch_and_cancel_can_clean_its_worktree() {
    let w = world_or_skip!();
    let head = init_repo(&w);
    // The checked-out branch is refused as a target: herd never merges in the user's checkout.
    let out = w.run(&[
        "task",
        "SCENARIO=iso_t go",
        "--cli",
        "claude",
        "--workspace",
        "isolated",
        "--into",
        "main",
    ]);
    assert_eq!(out.status.code(), Some(2), "a request the state refuses is the caller's to fix");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("herd never merges in your checkout") && err.contains("main"), "{err}");
    bash_then_done("iso_t", "echo T > t.txt", Duration::ZERO);
    let (code, v) = w.json(&[
        "task",
        "SCENARIO=iso_t go",
        "--cli",
        "claude",
        "--allow",
        "Bash",
        "--workspace",
        "isolated",
        "--into",
        "feature/herd",
        "--json",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["status"], "completed");
    assert_eq!(v["worktree"]["integration_branch"], "feature/herd");
    assert_eq!(git(&w.work, &["show", "feature/herd:t.txt"]), "T\n");
    assert_checkout_untouched(&w, &head);

    // Cancel a run that left uncommitted work, then discard it: only its own worktree is reset.
    MockServer::shared().script(
        "iso_wip",
        Script::new().tool_use(
            "Bash",
            json!({"command": "echo wip > wip.txt && sleep 37.71", "description": "wip"}),
        ),
    );
    let child = w
        .herd(&[
            "task",
            "SCENARIO=iso_wip go",
            "--cli",
            "claude",
            "--allow",
            "Bash",
            "--workspace",
            "isolated",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(30), || !procs_with_cmdline("sleep 37.71").is_empty()));
    let (_, ps) = w.json(&["ps", "--json"]);
    let id = ps[0]["id"].as_str().unwrap().to_owned();
    let wt = ps[0]["cwd"].as_str().unwrap().to_owned();
    assert!(Path::new(&wt).join("wip.txt").exists());
    let out = w.run(&["cancel", &id, "--cleanup-worktree"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = child.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "cancelled", "{v}");
    assert!(!Path::new(&wt).join("wip.txt").exists());
    assert!(Path::new(&wt).exists(), "the worktree itself stays");
    // A run in the user's own directory is never cleaned.
    MockServer::shared().script("iso_plain", Script::new().text("ok"));
    let (_, plain) = w.json(&["task", "SCENARIO=iso_plain go", "--cli", "claude", "--json"]);
    let out = w.run(&["cancel", plain["id"].as_str().unwrap(), "--cleanup-worktree"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a worktree herd created"));
    assert_checkout_untouched(&w, &head);
}

#[test]
fn without_auto_commit_uncommitted_work_is_not_reported_merged_and_stays() {
    let w = world_or_skip!();
    let head = init_repo(&w);
    bash_then_done("nocommit", "echo N > n.txt", Duration::ZERO);
    let plan = "defaults: {cli: claude, timeout: 60s, workspace: isolated, allow: [Bash]}\nsteps:\n\
        \x20 - {id: n, prompt: \"SCENARIO=nocommit go\", auto_commit: false}\n";
    let (code, v) = run_beside(&w, "nocommit.yml", plan);
    assert_eq!(code, 0, "{v}");
    let integ = v["integration_branch"].as_str().unwrap();
    let sub = step(&v, "n")["subagent_id"].as_str().unwrap();
    let kinds = w.kinds(sub);
    assert!(!kinds.contains(&"worktree_merged".to_owned()), "{kinds:?}");
    let nothing = w.events(sub).into_iter().find(|e| e["kind"] == "nothing_to_merge").unwrap();
    assert_eq!(nothing["uncommitted"], json!(["n.txt"]), "{nothing}");
    // The integration branch has no such file; the work waits in the worktree, which prune keeps.
    assert!(git(&w.work, &["ls-tree", "--name-only", integ]).lines().all(|f| f != "n.txt"));
    let (_, wts) = w.json(&["worktrees", "list", "--json"]);
    let wt = wts.as_array().unwrap().iter().find(|r| r["subagent_id"] == sub).unwrap().clone();
    let path = Path::new(wt["path"].as_str().unwrap());
    assert_eq!(std::fs::read_to_string(path.join("n.txt")).unwrap(), "N\n");
    w.run(&["worktrees", "prune"]);
    assert!(path.join("n.txt").exists(), "prune dropped uncommitted work");
    assert_checkout_untouched(&w, &head);
}

#[test]
fn the_worktree_root_and_base_are_configurable_and_checked_before_anything_starts() {
    let w = world_or_skip!();
    let first = init_repo(&w);
    // A second commit on main: a step based on the first must not see its file.
    std::fs::write(w.work.join("later.txt"), "later\n").unwrap();
    git(&w.work, &["add", "later.txt"]);
    git(&w.work, &["commit", "-qm", "later"]);
    let head = git(&w.work, &["rev-parse", "HEAD"]).trim().to_owned();
    bash_then_done("cfg_root", "ls && pwd", Duration::ZERO);
    let roots = w.state.parent().unwrap().join("my-roots");
    let plan = |root: &str, base: &str| {
        format!(
            "worktree_root: {root}\ndefaults: {{cli: claude, timeout: 60s, workspace: isolated, allow: [Bash], base: \"{base}\"}}\nsteps:\n  - {{id: s, prompt: \"SCENARIO=cfg_root go\"}}\n"
        )
    };
    let plan_file = w.state.parent().unwrap().join("cfg.yml");
    std::fs::write(&plan_file, plan(roots.to_str().unwrap(), &first)).unwrap();
    let (code, v) = w.json(&["run", plan_file.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{v}");
    let sub = step(&v, "s")["subagent_id"].as_str().unwrap();
    let out = w.events(sub).into_iter().find(|e| e["kind"] == "tool_result").unwrap();
    let listing = out["content"].as_str().unwrap();
    assert!(listing.contains("base.txt") && !listing.contains("later.txt"), "{listing}");
    assert!(listing.contains(roots.canonicalize().unwrap().to_str().unwrap()), "{listing}");
    assert_checkout_untouched(&w, &head);

    // A base that names no commit, or a root inside the repository: refused, nothing started.
    let before = w.json(&["ps", "--all", "--json"]).1.as_array().unwrap().len();
    std::fs::write(&plan_file, plan(roots.to_str().unwrap(), "no-such-ref")).unwrap();
    let out = w.run(&["run", plan_file.to_str().unwrap()]);
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no-such-ref"), "{err}");
    let inside = w.work.join("wt-inside");
    std::fs::write(&plan_file, plan(inside.to_str().unwrap(), &first)).unwrap();
    let out = w.run(&["run", plan_file.to_str().unwrap()]);
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("inside the repository") && err.contains("worktree_root"), "{err}");
    let after = w.json(&["ps", "--all", "--json"]).1.as_array().unwrap().len();
    assert_eq!(before, after, "a refused plan started nothing");
    assert_checkout_untouched(&w, &head);
}

#[test]
fn a_dependent_isolated_step_starts_from_the_merged_work_of_its_dependencies() {
    let w = world_or_skip!();
    let head = init_repo(&w);
    bash_then_done("dep_a", "echo from-a > a.txt", Duration::ZERO);
    bash_then_done("dep_b", "cat a.txt && echo from-b > b.txt", Duration::ZERO);
    let plan = "defaults: {cli: claude, timeout: 60s, workspace: isolated, allow: [Bash]}\nsteps:\n\
        \x20 - {id: b, prompt: \"SCENARIO=dep_b go\", depends_on: [a]}\n\
        \x20 - {id: a, prompt: \"SCENARIO=dep_a go\"}\n";
    let plan_file = w.state.parent().unwrap().join("dep.yml");
    std::fs::write(&plan_file, plan).unwrap();
    let (code, v) = w.json(&["run", plan_file.to_str().unwrap(), "--json", "--into", "work/dep"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["integration_branch"], "work/dep");
    // b is first in the file but depends on a: a merges first, and b saw a's file.
    let log = git(&w.work, &["log", "--first-parent", "--format=%s", "-2", "work/dep"]);
    let subjects: Vec<&str> = log.lines().rev().collect();
    assert!(
        subjects[0].starts_with("herd: merge step a")
            && subjects[1].starts_with("herd: merge step b"),
        "{log}"
    );
    let b_sub = step(&v, "b")["subagent_id"].as_str().unwrap();
    let out = w.events(b_sub).into_iter().find(|e| e["kind"] == "tool_result").unwrap();
    assert!(out["content"].as_str().unwrap().contains("from-a"), "{out}");
    assert_checkout_untouched(&w, &head);
}

#[test]
fn isolation_outside_a_git_repository_fails_before_anything_starts() {
    let w = World::new();
    let plan =
        "steps:\n  - {id: a, prompt: go, cli: command, command: [\"true\"], workspace: isolated}\n";
    std::fs::write(w.work.join("p.yml"), plan).unwrap();
    let out = w.run(&["run", "p.yml", "--json"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("workspace: isolated needs a git repository")
            && err.contains("not a git repository"),
        "{err}"
    );
    let (_, ps) = w.json(&["ps", "--all", "--json"]);
    assert_eq!(ps, json!([]));
}

#[test]
fn a_lock_covers_the_whole_working_tree() {
    let w = world_or_skip!();
    init_repo(&w);
    std::fs::create_dir(w.work.join("sub")).unwrap();
    let holder = start_holder(&w, "lk_tree", "4.61");
    MockServer::shared().script("lk_sub", Script::new().text("ran"));
    let sub = w.work.join("sub");
    let (code, v) = w.json(&[
        "task",
        "SCENARIO=lk_sub go",
        "--cli",
        "claude",
        "--cwd",
        sub.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 1, "{v}");
    let reason = v["failure_reason"].as_str().unwrap();
    assert!(reason.contains(&format!("{} is locked", w.work.display())), "{reason}");
    let out = holder.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn ctrl_c_on_an_isolated_plan_keeps_the_unfinished_work_and_prune_will_not_drop_it() {
    let w = world_or_skip!();
    let head = init_repo(&w);
    MockServer::shared().script(
        "cc_a",
        Script::new().tool_use(
            "Bash",
            json!({"command": "echo wip > wip.txt && sleep 38.19", "description": "w"}),
        ),
    );
    let plan = "defaults: {cli: claude, timeout: 60s, workspace: isolated, allow: [Bash]}\nsteps:\n\
        \x20 - {id: a, prompt: \"SCENARIO=cc_a go\"}\n";
    let plan_file = w.state.parent().unwrap().join("cc.yml");
    std::fs::write(&plan_file, plan).unwrap();
    let child = w
        .herd(&["run", plan_file.to_str().unwrap(), "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The sleep itself, not the shell around it: then wip.txt is written.
    let sleeping = || procs_with_cmdline("sleep 38.19").iter().any(|(_, c)| c.starts_with("sleep"));
    assert!(wait_until(Duration::from_secs(30), sleeping));
    let (code, v) = common::interrupt(child);
    assert_eq!(code, Some(130), "{v}");
    assert_eq!(step(&v, "a")["status"], "cancelled");
    let (_, wts) = w.json(&["worktrees", "list", "--json"]);
    let wts = wts.as_array().unwrap();
    assert_eq!(wts.len(), 1, "only the step's worktree is left: {wts:?}");
    assert_eq!(wts[0]["status"], "failed");
    let path = Path::new(wts[0]["path"].as_str().unwrap());
    assert_eq!(std::fs::read_to_string(path.join("wip.txt")).unwrap(), "wip\n");
    let (_, pruned) = w.json(&["worktrees", "prune", "--json"]);
    let r = &pruned[0];
    assert_eq!(r["result"], "kept", "{pruned}");
    assert!(r["why"].as_str().unwrap().contains("uncommitted changes (wip.txt)"), "{r}");
    assert!(path.join("wip.txt").exists());
    assert_checkout_untouched(&w, &head);
}

#[test]
fn a_resumed_isolated_plan_keeps_its_merged_steps_and_merges_the_rest_after_them() {
    let w = world_or_skip!();
    let head = init_repo(&w);
    let mock = MockServer::shared();
    bash_then_done("rsi_a", "echo from-a > a.txt", Duration::ZERO);
    mock.script("rsi_b", Script::new().error(500, "the model broke"));
    let plan = "defaults: {cli: claude, timeout: 60s, workspace: isolated, allow: [Bash]}\nsteps:\n\
        \x20 - {id: a, prompt: \"SCENARIO=rsi_a go\"}\n\
        \x20 - {id: b, prompt: \"SCENARIO=rsi_b go\", depends_on: [a]}\n";
    let plan_file = w.state.parent().unwrap().join("rsi.yml");
    std::fs::write(&plan_file, plan).unwrap();
    let (code, v) = w.json(&["run", plan_file.to_str().unwrap(), "--json", "--into", "work/rsi"]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(step(&v, "a")["status"], "completed", "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    let a_run = step(&v, "a")["subagent_id"].as_str().unwrap().to_owned();
    let asked_a = mock.requests_for("rsi_a").len();

    // A herd killed mid-plan leaves its integration worktree behind, the branch checked out.
    let stale = w.work.parent().unwrap().join("work.herd-worktrees").join(&id).join(".integration");
    git(&w.work, &["worktree", "add", stale.to_str().unwrap(), "work/rsi"]);

    bash_then_done("rsi_b", "cat a.txt && echo from-b > b.txt", Duration::ZERO);
    let (code, v) = w.json(&["run", "--resume", &id, "--json"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(mock.requests_for("rsi_a").len(), asked_a, "the completed step ran again");
    assert_eq!(step(&v, "a")["subagent_id"], a_run.as_str(), "{v}");
    assert_eq!(v["integration_branch"], "work/rsi", "{v}");
    // a was merged once, by the first run; b after it, from a's merged work.
    let log = git(&w.work, &["log", "--first-parent", "--format=%s", &format!("{head}..work/rsi")]);
    let subjects: Vec<&str> = log.lines().rev().collect();
    assert_eq!(subjects.len(), 2, "{log}");
    assert!(subjects[0].starts_with("herd: merge step a"), "{log}");
    assert!(subjects[1].starts_with("herd: merge step b"), "{log}");
    let b_run = step(&v, "b")["subagent_id"].as_str().unwrap();
    let out = w.events(b_run).into_iter().find(|e| e["kind"] == "tool_result").unwrap();
    assert!(out["content"].as_str().unwrap().contains("from-a"), "{out}");
    assert_eq!(git(&w.work, &["show", "work/rsi:b.txt"]), "from-b\n");
    // b's second attempt has a worktree of its own; the failed first one's branch stays.
    assert_eq!(step(&v, "b")["attempts"], 2, "{v}");
    assert!(git(&w.work, &["branch", "--list", &format!("herd/{id}/b")]).contains("b"));
    assert_checkout_untouched(&w, &head);
}
