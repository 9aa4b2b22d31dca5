//! Plans served by several `herd worker` processes through one PostgreSQL store: a worker killed
//! with kill -9 mid-run loses only the steps it held, which run again elsewhere, exactly once.
//!
//! Each worker is a process of its own with a state directory of its own (as on its own
//! machine); they share the working directory, where the steps write their side effects.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::workers::Worker;
use common::{World, wait_until};
use herd_store::{Backend, StatePaths, Store};
use nix::sys::signal::{Signal, kill};
use serde_json::Value;

/// Layers × steps per layer of the test plan.
const LAYERS: usize = 5;
const WIDTH: usize = 8;
/// How long each step runs (it writes a tick every 0.1 s meanwhile), in ms.
const STEP_MS: u64 = 1500;

fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos()
}

/// The plan: LAYERS layers of WIDTH steps, each step after two of the layer before; every step
/// appends `<step> <run id> start|tick|end <ns>` lines to `effects` while it runs.
fn plan(effects: &Path) -> String {
    let mut y =
        String::from("name: wide\ndefaults: {cli: command, prompt: go, retries: 1}\nsteps:\n");
    for l in 0..LAYERS {
        for i in 0..WIDTH {
            let id = format!("s{l}{i}");
            let deps = if l == 0 {
                String::new()
            } else {
                format!(", depends_on: [s{}{i}, s{}{}]", l - 1, l - 1, (i + 1) % WIDTH)
            };
            let script = format!(
                "E={e}; t() {{ echo \"{id} $HERD_SUBAGENT_ID $1 $(date +%s%N)\" >> $E; }}; t start; \
                 end=$(( $(date +%s%N) + {ns} )); while [ $(date +%s%N) -lt $end ]; do t tick; \
                 sleep 0.1; done; t end",
                e = effects.display(),
                ns = STEP_MS * 1_000_000,
            );
            y.push_str(&format!("  - {{id: {id}{deps}, command: [sh, -c, '{script}']}}\n"));
        }
    }
    y
}

/// Processes (not zombies) whose environment has `var=value` for one of `values`.
fn procs_with_env(var: &str, values: &BTreeSet<String>) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rfind(')').map(|i| s[i + 1..].trim_start().starts_with('Z')))
            .unwrap_or(true);
        if zombie {
            continue;
        }
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else { continue };
        let hit = env.split(|&b| b == 0).any(|kv| {
            let kv = String::from_utf8_lossy(kv);
            kv.split_once('=').is_some_and(|(k, v)| k == var && values.contains(v))
        });
        if hit {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            out.push((pid, String::from_utf8_lossy(&cmd).replace('\0', " ")));
        }
    }
    out
}

/// Every (step, run) of the side-effect file with its lines' kinds and times.
#[derive(Default, Debug)]
struct Effects {
    /// step → run → (kind, ns) in file order.
    runs: BTreeMap<String, BTreeMap<String, Vec<(String, u128)>>>,
}

impl Effects {
    fn read(path: &Path) -> Effects {
        let mut e = Effects::default();
        for line in std::fs::read_to_string(path).unwrap().lines() {
            let f: Vec<&str> = line.split(' ').collect();
            assert_eq!(f.len(), 4, "torn side-effect line: {line:?}");
            let ns: u128 = f[3].parse().unwrap_or_else(|_| panic!("bad time in {line:?}"));
            e.runs
                .entry(f[0].to_owned())
                .or_default()
                .entry(f[1].to_owned())
                .or_default()
                .push((f[2].to_owned(), ns));
        }
        e
    }
}

#[test]
fn three_workers_finish_a_plan_when_one_is_killed_mid_run_and_only_its_steps_run_again() {
    let pg = herd_testkit::pg_db();
    let w = World::new();
    let dir = tempfile::tempdir().unwrap();
    let effects = w.work.join("effects.log");
    std::fs::write(w.work.join("wide.yml"), plan(&effects)).unwrap();

    let mut workers: Vec<Worker> =
        (0..3).map(|n| Worker::start(&w, &pg, dir.path(), n, &["--max-concurrent", "3"])).collect();
    // (The table is there once the first worker has migrated the database.)
    let registered = || pg.try_rows("SELECT count(*) FROM workers WHERE status = 'active'");
    assert!(
        wait_until(Duration::from_secs(30), || registered()
            .is_ok_and(|r| r[0][0].as_deref() == Some("3"))),
        "the three workers did not register: {:?}",
        registered()
    );

    let mut run = w
        .herd(&["run", "wide.yml", "--json"])
        .env("HERD_STORE_URL", &pg.url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    // Kill, once a few steps have completed, a worker that holds steps right now.
    let mut victim = None;
    let found = wait_until(Duration::from_secs(60), || {
        let done = pg.rows("SELECT count(*) FROM orchestration_steps WHERE status = 'completed'");
        if done[0][0].as_deref().unwrap_or("0").parse::<u32>().unwrap() < 6 {
            return false;
        }
        let held = pg.rows(
            "SELECT lease_owner, count(*) FROM orchestration_steps WHERE status = 'running' \
             AND lease_owner IS NOT NULL GROUP BY lease_owner ORDER BY count(*) DESC",
        );
        let Some(owner) = held.first().and_then(|r| r[0].clone()) else { return false };
        let Some(i) = workers.iter().position(|x| x.id == owner) else { return false };
        kill(workers[i].pid(), Signal::SIGKILL).unwrap();
        victim = Some(i);
        true
    });
    assert!(found, "no worker held a step after 6 had completed");
    let killed_at = now_ns();
    let victim = workers.remove(victim.unwrap());
    let mut dead = victim;
    let _ = dead.child.wait();
    // What the dead worker held, from the database (nothing changes it until the lease expires).
    let held: BTreeSet<String> = pg
        .rows(&format!(
            "SELECT step_key FROM orchestration_steps WHERE status = 'running' \
             AND lease_owner = '{}'",
            dead.id
        ))
        .into_iter()
        .filter_map(|r| r[0].clone())
        .collect();
    assert!(!held.is_empty(), "the killed worker held no step");
    eprintln!("killed worker {} holding {held:?}", dead.id);

    // The plan still completes, served by the two others.
    let t = Instant::now();
    while run.try_wait().unwrap().is_none() {
        assert!(t.elapsed() < Duration::from_secs(120), "the plan did not end in 120 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = run.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(out.status.code(), Some(0), "{v:#}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(v["status"], "completed", "{v:#}");
    let orch = v["id"].as_str().unwrap().to_owned();

    // Recorded exactly once as completed: every step's row, and one step_completed event each.
    let store = Store::open(
        StatePaths::new(dir.path().join("reader")).with_store(Backend::Postgres(pg.url.clone())),
    )
    .unwrap();
    let steps = store.steps(&orch).unwrap();
    assert_eq!(steps.len(), LAYERS * WIDTH);
    for s in &steps {
        assert_eq!(s.status, "completed", "{s:?}");
        let again = held.contains(&s.step_key);
        assert_eq!(
            s.attempts,
            if again { 2 } else { 1 },
            "{s:?} (held by the dead worker: {again})"
        );
    }
    let events = store.plan_events(&orch).unwrap();
    let mut completions: HashMap<String, usize> = HashMap::new();
    // Each completion names the fence of the claim it ended.
    let mut ended: BTreeSet<(String, i64)> = BTreeSet::new();
    // The runs each worker started: (step, worker, run, fence), from the recorded claims.
    let mut claims: Vec<(String, String, String, i64)> = Vec::new();
    for e in &events {
        let step = e.step.clone().unwrap_or_default();
        let p: Value = serde_json::from_str(&e.payload).unwrap();
        match e.kind.as_str() {
            "step_completed" => {
                *completions.entry(step.clone()).or_default() += 1;
                ended.insert((step, p["fence"].as_i64().unwrap()));
            }
            "step_started" | "subagent_attempt" => claims.push((
                step,
                p["worker"].as_str().unwrap().to_owned(),
                p["subagent_id"].as_str().unwrap().to_owned(),
                p["fence"].as_i64().unwrap(),
            )),
            _ => {}
        }
    }
    for s in &steps {
        assert_eq!(completions.get(&s.step_key), Some(&1), "{}: {events:?}", s.step_key);
    }
    let dead_runs: BTreeSet<String> =
        claims.iter().filter(|c| c.1 == dead.id).map(|c| c.2.clone()).collect();
    let dead_held: BTreeSet<String> = claims
        .iter()
        .filter(|c| c.1 == dead.id && !ended.contains(&(c.0.clone(), c.3)))
        .map(|c| c.0.clone())
        .collect();
    assert_eq!(dead_held, held, "claims by the dead worker that it never finished");
    // Claims went only to the three workers, and each step to one worker per fence.
    let ids: BTreeSet<&str> =
        workers.iter().map(|x| x.id.as_str()).chain([dead.id.as_str()]).collect();
    assert!(claims.iter().all(|c| ids.contains(c.1.as_str())), "{claims:?}");

    // Side effects: exactly once per step, but twice at most for the steps the dead worker held;
    // runs of one step never overlap; every step's recorded run wrote its end.
    let fx = Effects::read(&effects);
    assert_eq!(fx.runs.len(), LAYERS * WIDTH, "steps with side effects");
    for s in &steps {
        let runs = &fx.runs[&s.step_key];
        if held.contains(&s.step_key) {
            assert!((1..=2).contains(&runs.len()), "{}: {runs:?}", s.step_key);
        } else {
            assert_eq!(runs.len(), 1, "{} ran more than once: {runs:?}", s.step_key);
        }
        let recorded = s.subagent_id.as_deref().unwrap();
        let last = runs.get(recorded).unwrap_or_else(|| panic!("{}: {runs:?}", s.step_key));
        assert_eq!(last.first().unwrap().0, "start", "{}: {last:?}", s.step_key);
        assert_eq!(last.last().unwrap().0, "end", "{}: {last:?}", s.step_key);
        let mut spans: Vec<(u128, u128, &String)> = runs
            .iter()
            .map(|(run, lines)| {
                (
                    lines.iter().map(|l| l.1).min().unwrap(),
                    lines.iter().map(|l| l.1).max().unwrap(),
                    run,
                )
            })
            .collect();
        spans.sort();
        for pair in spans.windows(2) {
            assert!(pair[0].1 < pair[1].0, "{} ran twice at once: {spans:?}", s.step_key);
        }
        for (run, lines) in runs {
            if run != recorded {
                assert!(
                    dead_runs.contains(run),
                    "{}: run {run} was not the dead worker's",
                    s.step_key
                );
                // Killed with its worker (its guard saw herd go), not left to finish — unless
                // it had finished just before the kill, its end not yet recorded.
                assert!(
                    lines.iter().all(|l| l.0 != "end" || l.1 < killed_at),
                    "{}: {lines:?}",
                    s.step_key
                );
                let late = lines.iter().map(|l| l.1).max().unwrap();
                assert!(
                    late < killed_at + 800_000_000,
                    "{}: run {run} wrote {} ms after its worker was killed",
                    s.step_key,
                    (late.saturating_sub(killed_at)) / 1_000_000
                );
            }
        }
    }
    // Nothing of the dead worker is left: neither its guard nor any process of its runs.
    let state: BTreeSet<String> = [dead.state.display().to_string()].into();
    assert!(
        wait_until(Duration::from_secs(5), || procs_with_env("HERD_SUBAGENT_ID", &dead_runs)
            .is_empty()
            && procs_with_env("HERD_STATE_DIR", &state).is_empty()),
        "left alive: {:?} {:?}",
        procs_with_env("HERD_SUBAGENT_ID", &dead_runs),
        procs_with_env("HERD_STATE_DIR", &state)
    );

    // The others drain and say what they did: together every step once, plus the re-runs.
    let mut completed = 0;
    for x in workers {
        let s = x.drain();
        assert_eq!(s["lost"], 0, "{s}");
        completed += s["completed"].as_u64().unwrap();
    }
    let by_dead = claims.iter().filter(|c| c.1 == dead.id).count() - held.len();
    assert_eq!(completed as usize + by_dead, LAYERS * WIDTH);
    drop(dead);
}

#[test]
fn a_real_claude_plan_runs_on_workers_and_its_results_feed_the_dependent_step() {
    let Some(w) = World::with_claude() else { return };
    let pg = herd_testkit::pg_db();
    let mock = herd_testkit::MockServer::shared();
    mock.script("wk_a", herd_testkit::Script::new().text("alpha result 7141"));
    mock.script("wk_b", herd_testkit::Script::new().text("beta result 2718"));
    mock.script("wk_c", herd_testkit::Script::new().text("combined both"));
    std::fs::write(
        w.work.join("agents.yml"),
        "steps:\n  - {id: a, prompt: \"SCENARIO=wk_a go\"}\n  - {id: b, prompt: \"SCENARIO=wk_b go\"}\n  \
         - {id: c, prompt: \"SCENARIO=wk_c go\", depends_on: [a, b]}\n",
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let workers: Vec<Worker> =
        (0..2).map(|n| Worker::start(&w, &pg, dir.path(), n, &["--max-concurrent", "1"])).collect();
    let out =
        w.herd(&["run", "agents.yml", "--json"]).env("HERD_STORE_URL", &pg.url).output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(out.status.code(), Some(0), "{v:#}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(v["status"], "completed", "{v:#}");
    // The dependent step's model call carries both results.
    let asked: Vec<_> =
        mock.requests_for("wk_c").into_iter().filter(|r| r.body["stream"] == true).collect();
    assert_eq!(asked.len(), 1);
    let sent = asked[0].body["messages"].to_string();
    for r in ["alpha result 7141", "beta result 2718"] {
        assert!(sent.contains(r), "{r} is not in c's request: {sent}");
    }
    // Any machine reads each step's result from the shared store.
    for (key, text) in
        [("a", "alpha result 7141"), ("b", "beta result 2718"), ("c", "combined both")]
    {
        let s = v["steps"].as_array().unwrap().iter().find(|s| s["step_key"] == key).unwrap();
        let id = s["subagent_id"].as_str().unwrap();
        let shown =
            w.herd(&["show", id, "--json"]).env("HERD_STORE_URL", &pg.url).output().unwrap();
        let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
        assert_eq!(shown["status"], "completed", "{shown:#}");
        assert!(shown["result"].to_string().contains(text), "{key}: {shown:#}");
    }
    // Both workers took part only if both got a step; each ran what it claimed, nothing lost.
    let mut ran = 0;
    for x in workers {
        let s = x.drain();
        assert_eq!(s["lost"], 0, "{s}");
        ran += s["completed"].as_u64().unwrap();
    }
    assert_eq!(ran, 3);
}
