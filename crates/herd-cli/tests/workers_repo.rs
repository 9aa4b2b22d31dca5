//! Isolated steps on several machines: two workers, each with its own clone of a shared
//! repository, run a plan's isolated steps, push their branches, and merge them into the
//! integration branch on the shared remote in plan order — a conflict fails only its step.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::workers::Worker;
use common::{World, wait_until};
use serde_json::Value;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim_end().to_owned()
}

/// A bare repository `shared.git` in `dir` (the shared remote), and the person's checkout in
/// `w.work` with one commit (a README and a .gitignore of `ignored`) and it as `origin`.
fn shared_repo(w: &World, dir: &Path, ignored: &str) -> std::path::PathBuf {
    let remote = dir.join("shared.git");
    git(dir, &["init", "--quiet", "--bare", "-b", "main", &remote.to_string_lossy()]);
    git(&w.work, &["init", "--quiet", "-b", "main"]);
    std::fs::write(w.work.join("README"), "start\n").unwrap();
    std::fs::write(w.work.join(".gitignore"), format!("{ignored}\n")).unwrap();
    git(&w.work, &["add", "."]);
    git(&w.work, &["commit", "--quiet", "-m", "start"]);
    git(&w.work, &["remote", "add", "origin", &remote.to_string_lossy()]);
    remote
}

/// Workers `0..n`, each with clones of its own (a machine of its own), once all registered.
fn workers(w: &World, pg: &herd_testkit::PgDb, dir: &Path, n: usize) -> Vec<Worker> {
    let started: Vec<Worker> = (0..n)
        .map(|i| {
            let clones = dir.join(format!("clones{i}")).display().to_string();
            Worker::start(w, pg, dir, i, &["--max-concurrent", "2", "--clones", &clones])
        })
        .collect();
    let registered = || pg.try_rows("SELECT count(*) FROM workers WHERE status = 'active'");
    let want = n.to_string();
    assert!(
        wait_until(Duration::from_secs(30), || registered()
            .is_ok_and(|r| r[0][0].as_deref() == Some(want.as_str()))),
        "the workers did not register"
    );
    started
}

/// Steps that finish out of order (a sleeps longest); d needs a's and b's merged work; y and
/// z both rewrite README, so z — after y in plan order — conflicts.
const PLAN: &str = "name: code
defaults: {cli: command, prompt: go, workspace: isolated}
steps:
  - {id: a, command: [sh, -c, 'sleep 1.5; echo a > a.txt']}
  - {id: b, command: [sh, -c, 'sleep 0.7; echo b > b.txt']}
  - {id: c, command: [sh, -c, 'echo c > c.txt']}
  - {id: d, depends_on: [a, b], command: [sh, -c, 'test -f a.txt && test -f b.txt && echo d > d.txt']}
  - {id: y, command: [sh, -c, 'sleep 0.3; echo y > README']}
  - {id: z, command: [sh, -c, 'echo z > README']}
";

#[test]
fn workers_on_two_machines_merge_isolated_steps_into_the_shared_remote_in_plan_order() {
    let pg = herd_testkit::pg_db();
    let w = World::new();
    let dir = tempfile::tempdir().unwrap();
    // The shared remote, and the person's checkout (a clone of it) where the plan is run.
    let remote = shared_repo(&w, dir.path(), "code.yml");
    git(&w.work, &["push", "--quiet", "origin", "main"]);
    // A commit the remote has not seen: the plan's base is this checkout's HEAD, as on one
    // machine, so the workers see it.
    std::fs::write(w.work.join("local.txt"), "local\n").unwrap();
    git(&w.work, &["add", "local.txt"]);
    git(&w.work, &["commit", "--quiet", "-m", "local"]);
    let head = git(&w.work, &["rev-parse", "HEAD"]);
    std::fs::write(w.work.join("code.yml"), PLAN).unwrap();

    let clones: Vec<String> =
        (0..2).map(|n| dir.path().join(format!("clones{n}")).display().to_string()).collect();
    let workers = workers(&w, &pg, dir.path(), 2);

    let out =
        w.herd(&["run", "code.yml", "--json"]).env("HERD_STORE_URL", &pg.url).output().unwrap();
    let logs: String = workers
        .iter()
        .map(|x| std::fs::read_to_string(&x.log).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n---\n");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!("{e}: {stdout}\n{}\n{logs}", String::from_utf8_lossy(&out.stderr))
    });
    assert_eq!(out.status.code(), Some(1), "the conflict fails the plan: {report:#}\n{logs}");
    let plan = report["id"].as_str().unwrap().to_owned();
    let status = |k: &str| {
        let s = report["steps"].as_array().unwrap().iter().find(|s| s["step_key"] == k).unwrap();
        (s["status"].as_str().unwrap().to_owned(), s["failure_reason"].as_str().map(str::to_owned))
    };
    for k in ["a", "b", "c", "d", "y"] {
        assert_eq!(status(k), ("completed".into(), None), "{k}: {report:#}\n{logs}");
    }
    assert_eq!(status("z"), ("failed".into(), Some("merge_conflict".into())), "{report:#}");

    // The integration branch on the shared remote: one merge per step, in plan order (merge
    // order: d after its dependencies), on top of the person's HEAD.
    let integration = format!("herd/{plan}/integration");
    assert_eq!(report["integration_branch"], integration.as_str(), "{report:#}");
    assert_eq!(report["repo"], remote.to_str().unwrap(), "{report:#}");
    let remote_git = |args: &[&str]| {
        let mut a = vec!["--git-dir", remote.to_str().unwrap()];
        a.extend_from_slice(args);
        git(dir.path(), &a)
    };
    let subjects = remote_git(&["log", "--first-parent", "--format=%s", &integration]);
    let merged: Vec<&str> = subjects
        .lines()
        .filter_map(|l| l.strip_prefix("herd: merge step "))
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert_eq!(merged, ["y", "d", "c", "b", "a"], "newest first:\n{subjects}");
    assert!(remote_git(&["merge-base", "--is-ancestor", &head, &integration]).is_empty());
    let files = remote_git(&["ls-tree", "--name-only", &integration]);
    for f in ["a.txt", "b.txt", "c.txt", "d.txt", "local.txt"] {
        assert!(files.lines().any(|l| l == f), "{f} is not merged:\n{files}");
    }
    assert_eq!(remote_git(&["show", &format!("{integration}:README")]), "y");
    // Each step's branch was pushed (z's too: its work is kept for a person).
    let branches = remote_git(&["branch", "--list", &format!("herd/{plan}/*")]);
    for k in ["a", "b", "c", "d", "y", "z"] {
        assert!(branches.contains(&format!("herd/{plan}/{k}")), "{k}: {branches}");
    }
    // The steps ran in the workers' clones, never in the person's checkout.
    assert_eq!(git(&w.work, &["rev-parse", "HEAD"]), head);
    assert_eq!(git(&w.work, &["status", "--porcelain"]), "");
    let ran_in: Vec<String> = pg
        .rows(&format!(
            "SELECT a.working_directory FROM orchestration_steps s \
             JOIN subagents a ON a.id = s.subagent_id WHERE s.orchestration_id = '{plan}'"
        ))
        .into_iter()
        .filter_map(|r| r[0].clone())
        .collect();
    assert_eq!(ran_in.len(), 6, "{ran_in:?}");
    for d in &ran_in {
        assert!(clones.iter().any(|c| d.starts_with(c.as_str())), "{d} is not in a clone");
    }
    for x in workers {
        let summary = x.drain();
        assert_eq!(summary["lost"], 0, "{summary}");
    }
}

/// Three isolated steps a layer, each writing its own file; the last step needs them all.
fn wide_plan() -> String {
    let mut y = String::from(
        "name: wide\ndefaults: {cli: command, prompt: go, workspace: isolated, retries: 1}\nsteps:\n",
    );
    for i in 0..6 {
        y.push_str(&format!(
            "  - {{id: s{i}, command: [sh, -c, 'sleep 1.5; echo {i} > f{i}.txt']}}\n"
        ));
    }
    y.push_str(
        "  - {id: all, depends_on: [s0, s1, s2, s3, s4, s5], command: [sh, -c, \
         'cat f0.txt f1.txt f2.txt f3.txt f4.txt f5.txt > all.txt']}\n",
    );
    y
}

#[test]
fn a_worker_killed_with_isolated_steps_under_way_loses_only_them_and_the_merges_stay_in_order() {
    let pg = herd_testkit::pg_db();
    let w = World::new();
    let dir = tempfile::tempdir().unwrap();
    let remote = shared_repo(&w, dir.path(), "wide.yml");
    std::fs::write(w.work.join("wide.yml"), wide_plan()).unwrap();
    let mut workers = workers(&w, &pg, dir.path(), 3);
    let run = w
        .herd(&["run", "wide.yml", "--json"])
        .env("HERD_STORE_URL", &pg.url)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Kill a worker while it holds a step's lease (its agent is running).
    let mut held = Vec::new();
    let killed = wait_until(Duration::from_secs(30), || {
        let rows = pg.rows(
            "SELECT lease_owner, step_key FROM orchestration_steps \
             WHERE status = 'running' AND lease_owner IS NOT NULL",
        );
        let Some(owner) = rows.first().and_then(|r| r[0].clone()) else { return false };
        let Some(i) = workers.iter().position(|x| x.id == owner) else { return false };
        held = rows
            .iter()
            .filter(|r| r[0].as_deref() == Some(&owner))
            .map(|r| r[1].clone().unwrap())
            .collect();
        nix::sys::signal::kill(workers[i].pid(), nix::sys::signal::Signal::SIGKILL).unwrap();
        let mut dead = workers.remove(i);
        let _ = dead.child.wait();
        true
    });
    assert!(killed, "no worker held a step");
    let out = run.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{e}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(out.status.code(), Some(0), "{report:#}");
    let plan = report["id"].as_str().unwrap().to_owned();
    // Only the killed worker's steps ran twice (their second attempt on another branch).
    for s in report["steps"].as_array().unwrap() {
        let k = s["step_key"].as_str().unwrap();
        let expected = if held.iter().any(|h| h == k) { 2 } else { 1 };
        assert_eq!(s["attempts"], expected, "{k} (killed worker held {held:?}): {report:#}");
    }
    let remote_git = |args: &[&str]| {
        let mut a = vec!["--git-dir", remote.to_str().unwrap()];
        a.extend_from_slice(args);
        git(dir.path(), &a)
    };
    let integration = format!("herd/{plan}/integration");
    let subjects = remote_git(&["log", "--first-parent", "--reverse", "--format=%s", &integration]);
    let merged: Vec<&str> = subjects
        .lines()
        .filter_map(|l| l.strip_prefix("herd: merge step "))
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    assert_eq!(merged, ["s0", "s1", "s2", "s3", "s4", "s5", "all"], "{subjects}");
    assert_eq!(remote_git(&["show", &format!("{integration}:all.txt")]), "0\n1\n2\n3\n4\n5");
    for x in workers {
        x.drain();
    }
}
