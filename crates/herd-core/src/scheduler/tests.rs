use super::*;
use proptest::prelude::*;

/// Drive a scheduler to the end with a seeded outcome per step; check the invariants on the way.
fn simulate(
    deps: &[Vec<usize>],
    fails: &[bool],
    retries: &[u32],
    bound: usize,
    order_seed: u64,
) -> Vec<StepState> {
    let mut s = Scheduler::new(deps, retries, bound);
    let mut running: Vec<(usize, u32)> = Vec::new();
    let mut finished = false;
    let mut pending_actions = s.start();
    let mut rng = order_seed;
    let mut attempts = vec![0u32; deps.len()];
    loop {
        for a in pending_actions.drain(..) {
            match a {
                Action::Start { step, attempt } => {
                    for &d in &deps[step] {
                        assert_eq!(
                            s.states()[d],
                            StepState::Completed,
                            "started {step} before dependency {d}"
                        );
                    }
                    attempts[step] = attempt;
                    running.push((step, attempt));
                }
                Action::DependencyFailed { step, cause } => {
                    assert!(matches!(s.states()[cause], StepState::Failed));
                    assert!(matches!(s.states()[step], StepState::DependencyFailed { .. }));
                }
                Action::Skip { .. } => {}
                Action::Finished { .. } => finished = true,
            }
        }
        assert!(s.running() <= bound.max(1), "bound exceeded");
        assert_eq!(s.running(), running.len());
        if running.is_empty() {
            break;
        }
        rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let (step, attempt) = running.remove((rng >> 33) as usize % running.len());
        // A failing step fails on every attempt but the last allowed one succeeds when retries say so.
        let ok = !fails[step] || (retries[step] > 0 && attempt == retries[step] + 1);
        pending_actions = s.on_finished(step, ok);
    }
    assert!(finished, "never finished");
    assert!(s.states().iter().all(StepState::is_done), "a step never ended: {:?}", s.states());
    s.states().to_vec()
}

fn descends_from(deps: &[Vec<usize>], k: usize, root: usize) -> bool {
    deps[k].iter().any(|&d| d == root || descends_from(deps, d, root))
}

proptest! {
    #[test]
    fn invariants_hold_on_random_dags(
        n in 1usize..25,
        raw_edges in proptest::collection::vec((0usize..25, 0usize..25), 0..60),
        fails in proptest::collection::vec(any::<bool>(), 25),
        bound in 1usize..6,
        seed in any::<u64>(),
    ) {
        // Edges only from later to earlier steps: acyclic by construction.
        let mut deps = vec![Vec::new(); n];
        for (a, b) in raw_edges {
            let (a, b) = (a % n, b % n);
            if b < a && !deps[a].contains(&b) { deps[a].push(b); }
        }
        let fails = &fails[..n];
        let states = simulate(&deps, fails, &vec![0; n], bound, seed);
        for (k, st) in states.iter().enumerate() {
            let failed_ancestor = (0..n).any(|r| fails[r] && descends_from(&deps, k, r));
            match st {
                StepState::Completed => prop_assert!(!fails[k] && !failed_ancestor),
                StepState::Failed => prop_assert!(fails[k] && !failed_ancestor),
                StepState::DependencyFailed { step } => {
                    prop_assert!(failed_ancestor);
                    prop_assert!(fails[*step] && descends_from(&deps, k, *step));
                }
                other => prop_assert!(false, "unexpected {other:?}"),
            }
        }
    }
}

#[test]
fn retries_rerun_a_failed_step() {
    let deps = vec![vec![], vec![0]];
    let states = simulate(&deps, &[true, false], &[2, 0], 1, 7);
    assert_eq!(states, vec![StepState::Completed, StepState::Completed]);
    let states = simulate(&deps, &[true, false], &[0, 0], 1, 7);
    assert_eq!(states, vec![StepState::Failed, StepState::DependencyFailed { step: 0 }]);
}

#[test]
fn stop_starting_skips_pending_steps_and_finishes() {
    let deps = vec![vec![], vec![0], vec![]];
    let mut s = Scheduler::new(&deps, &[0, 0, 0], 1);
    assert_eq!(s.start(), vec![Action::Start { step: 0, attempt: 1 }]);
    let acts = s.stop_starting();
    assert_eq!(acts, vec![Action::Skip { step: 1 }, Action::Skip { step: 2 }]);
    let acts = s.on_finished(0, true);
    assert_eq!(acts, vec![Action::Finished { all_completed: false }]);
}

#[test]
fn ten_thousand_layered_steps_schedule_fast() {
    let n = 10_000;
    let mut deps = vec![Vec::new(); n];
    let mut x: u64 = 42;
    for (i, d) in deps.iter_mut().enumerate().skip(100) {
        let layer_start = (i / 100 - 1) * 100;
        for _ in 0..3 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            let p = layer_start + (x >> 33) as usize % 100;
            if !d.contains(&p) {
                d.push(p);
            }
        }
    }
    let states = simulate(&deps, &vec![false; n], &vec![0; n], 8, 1);
    assert!(states.iter().all(|s| *s == StepState::Completed));
}
