//! Benchmark: validate and schedule a 10,000-step layered DAG (seeded random edges) to
//! completion with a no-op executor; the floor is a bare Kahn topological pass over the same
//! graph, measured in the same run. Target: < 50 ms in all.
//!
//! Run: `cargo bench -p herd-core --bench scheduling`

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use herd_core::plan::{PlanFile, StepFields, StepFile, Strategy};
use herd_core::scheduler::{Action, Scheduler};

const LAYERS: usize = 100;
const WIDTH: usize = 100;

fn graph(seed: u64) -> Vec<Vec<usize>> {
    let mut x = seed;
    let mut deps = vec![Vec::new(); LAYERS * WIDTH];
    for (i, d) in deps.iter_mut().enumerate().skip(WIDTH) {
        let prev = (i / WIDTH - 1) * WIDTH;
        for _ in 0..3 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let p = prev + (x >> 33) as usize % WIDTH;
            if !d.contains(&p) {
                d.push(p);
            }
        }
    }
    deps
}

fn plan_file(deps: &[Vec<usize>]) -> PlanFile {
    PlanFile {
        name: Some("bench".into()),
        strategy: Strategy::Dag,
        steps: deps
            .iter()
            .enumerate()
            .map(|(i, d)| StepFile {
                id: format!("s{i}"),
                depends_on: d.iter().map(|j| format!("s{j}")).collect(),
                fields: StepFields {
                    prompt: Some("go".into()),
                    cli: Some("command".into()),
                    command: Some(vec!["true".into()]),
                    ..StepFields::default()
                },
            })
            .collect(),
        ..PlanFile::default()
    }
}

fn herd(file: PlanFile) -> Duration {
    let start = Instant::now();
    let plan = file.validate("bench.yml", "").expect("valid");
    let deps: Vec<Vec<usize>> = plan.steps.iter().map(|s| s.deps.clone()).collect();
    let mut s = Scheduler::new(&deps, &vec![0; deps.len()], 8);
    let mut queue: VecDeque<usize> = VecDeque::new();
    let mut finished = false;
    let mut actions = s.start();
    loop {
        for a in actions.drain(..) {
            match a {
                Action::Start { step, .. } => queue.push_back(step),
                Action::Finished { all_completed } => finished = all_completed,
                _ => {}
            }
        }
        let Some(step) = queue.pop_front() else { break };
        actions = s.on_finished(step, true);
    }
    assert!(finished);
    start.elapsed()
}

fn kahn(deps: &[Vec<usize>]) -> Duration {
    let start = Instant::now();
    let n = deps.len();
    let mut indeg: Vec<usize> = deps.iter().map(Vec::len).collect();
    let mut out = vec![Vec::new(); n];
    for (i, d) in deps.iter().enumerate() {
        for &j in d {
            out[j].push(i);
        }
    }
    let mut q: VecDeque<usize> = (0..n).filter(|&i| indeg[i] == 0).collect();
    let mut seen = 0;
    while let Some(i) = q.pop_front() {
        seen += 1;
        for &k in &out[i] {
            indeg[k] -= 1;
            if indeg[k] == 0 {
                q.push_back(k);
            }
        }
    }
    assert_eq!(seen, n);
    start.elapsed()
}

fn main() {
    let deps = graph(42);
    let edges: usize = deps.iter().map(Vec::len).sum();
    println!("scheduling: {} steps, {edges} edges, {LAYERS} layers", deps.len());
    let (mut h, mut k) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        k.push(kahn(&deps));
        h.push(herd(plan_file(&deps)));
    }
    h.sort();
    k.sort();
    let (hm, km) = (h[2], k[2]);
    println!("bare Kahn toposort:            {:>8.2} ms", km.as_secs_f64() * 1e3);
    println!("herd validate + schedule:      {:>8.2} ms", hm.as_secs_f64() * 1e3);
    println!(
        "ratio {:.1}x the bare pass; target < 50 ms in all: {}",
        hm.as_secs_f64() / km.as_secs_f64(),
        if hm < Duration::from_millis(50) { "PASS" } else { "FAIL" }
    );
}
