//! Workspace rules: where a subagent works (shared, locked, isolated), which advisory locks may
//! be held together on one directory (seed 000's table), branch names, and the merge order.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Where a task or step works (DESIGN §5).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkspaceMode {
    /// The given directory, optimistic (no lock taken; an exclusive holder still blocks it).
    #[default]
    Shared,
    /// The given directory under an advisory SHARED or EXCLUSIVE lock.
    Locked,
    /// Its own git worktree on its own branch, merged back in plan order.
    Isolated,
}

/// An advisory lock on a directory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LockMode {
    /// Many readers together; blocks an exclusive request.
    Shared,
    /// One holder alone; blocks every other run in the directory.
    #[default]
    Exclusive,
}

/// What a run holds on its directory: nothing (an unlocked shared run is still registered, so
/// that an exclusive request waits for it), a shared lock or an exclusive one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Hold {
    None,
    Shared,
    Exclusive,
}

impl Hold {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Shared => "shared",
            Self::Exclusive => "exclusive",
        }
    }
}

impl From<Option<LockMode>> for Hold {
    fn from(m: Option<LockMode>) -> Self {
        match m {
            None => Self::None,
            Some(LockMode::Shared) => Self::Shared,
            Some(LockMode::Exclusive) => Self::Exclusive,
        }
    }
}

impl FromStr for Hold {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Self::None),
            "shared" => Ok(Self::Shared),
            "exclusive" => Ok(Self::Exclusive),
            other => Err(format!("unknown lock mode {other:?} (expected shared or exclusive)")),
        }
    }
}

impl fmt::Display for Hold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for LockMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "shared" => Ok(Self::Shared),
            "exclusive" => Ok(Self::Exclusive),
            other => Err(format!("unknown lock mode {other:?} (expected shared or exclusive)")),
        }
    }
}

impl FromStr for WorkspaceMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "shared" => Ok(Self::Shared),
            "locked" => Ok(Self::Locked),
            "isolated" => Ok(Self::Isolated),
            other => {
                Err(format!("unknown workspace {other:?} (expected shared, locked or isolated)"))
            }
        }
    }
}

/// Seed 000's table: may a run asking for `want` start while `held` are held on the directory?
///
/// | want \ held | none  | shared | exclusive |
/// | none        | allow | allow  | block     |
/// | shared      | allow | allow  | block     |
/// | exclusive   | block | block  | block     |
pub fn admits(held: &[Hold], want: Hold) -> bool {
    match want {
        Hold::None | Hold::Shared => !held.contains(&Hold::Exclusive),
        Hold::Exclusive => held.is_empty(),
    }
}

/// A git branch component made of `s`: characters git refuses in ref names become `-`.
pub fn branch_component(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_') { c } else { '-' })
        .collect();
    if out.is_empty() {
        out.push('x');
    }
    out
}

/// The branch of step `step` in run `run`: `herd/<run>/<step>`.
pub fn step_branch(run: &str, step: &str) -> String {
    format!("herd/{}/{}", branch_component(run), branch_component(step))
}

/// The default integration branch of run `run`: `herd/<run>/integration`.
pub fn integration_branch(run: &str) -> String {
    format!("herd/{}/integration", branch_component(run))
}

/// The order in which finished steps are merged: plan order, except that a step always comes
/// after the steps it depends on (the smallest topological order by plan index). Merging in
/// this order never waits on a step that itself waits for a merge. `deps` must be acyclic.
pub fn merge_order(deps: &[Vec<usize>]) -> Vec<usize> {
    let n = deps.len();
    let mut waiting: Vec<usize> = deps.iter().map(Vec::len).collect();
    let mut dependents = vec![Vec::new(); n];
    for (i, d) in deps.iter().enumerate() {
        for &j in d {
            dependents[j].push(i);
        }
    }
    let mut ready: BTreeSet<usize> = (0..n).filter(|&i| waiting[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = ready.pop_first() {
        order.push(i);
        for &k in &dependents[i] {
            waiting[k] -= 1;
            if waiting[k] == 0 {
                ready.insert(k);
            }
        }
    }
    order
}

/// The commit message of a step's uncommitted work: `herd: <step>: <first line of the task>`.
pub fn commit_message(step: &str, prompt: &str) -> String {
    let first = prompt.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    let mut line = format!("herd: {step}: {first}");
    if line.len() > 72 {
        line = format!("{}…", crate::truncate_str(&line, 71));
    }
    format!("{line}\n\nCommitted by herd when the agent finished (auto_commit).\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ALL: [Hold; 3] = [Hold::None, Hold::Shared, Hold::Exclusive];

    #[test]
    fn the_seed_table() {
        use Hold::*;
        // (want, held, allowed)
        let table = [
            (None, None, true),
            (None, Shared, true),
            (None, Exclusive, false),
            (Shared, None, true),
            (Shared, Shared, true),
            (Shared, Exclusive, false),
            (Exclusive, None, false),
            (Exclusive, Shared, false),
            (Exclusive, Exclusive, false),
        ];
        for (want, held, ok) in table {
            assert_eq!(admits(&[held], want), ok, "{want} with {held} held");
        }
        for want in ALL {
            assert!(admits(&[], want));
        }
    }

    #[test]
    fn branches_are_valid_ref_components() {
        assert_eq!(step_branch("pln_01ab", "fix api"), "herd/pln_01ab/fix-api");
        assert_eq!(integration_branch("r"), "herd/r/integration");
        assert_eq!(branch_component(""), "x");
        assert_eq!(branch_component("a..b~^:"), "a--b---");
    }

    #[test]
    fn merge_order_is_plan_order_when_it_can_be() {
        assert_eq!(merge_order(&[vec![], vec![], vec![]]), vec![0, 1, 2]);
        // Step 0 depends on step 2: 2 must be merged first, the rest keep their order.
        assert_eq!(merge_order(&[vec![2], vec![], vec![]]), vec![1, 2, 0]);
        assert_eq!(merge_order(&[vec![], vec![0], vec![0]]), vec![0, 1, 2]);
    }

    #[test]
    fn commit_messages_are_one_short_subject() {
        let m = commit_message("a", "\n  write hello.txt\nthen stop");
        assert!(m.starts_with("herd: a: write hello.txt\n\n"), "{m}");
        let long = commit_message("a", &"x".repeat(200));
        assert!(long.lines().next().unwrap().chars().count() <= 72);
    }

    fn dag() -> impl Strategy<Value = Vec<Vec<usize>>> {
        // Edges only from later to earlier indices in a shuffled labelling: always acyclic.
        (1usize..12).prop_flat_map(|n| {
            (
                proptest::collection::vec(
                    proptest::collection::vec(any::<prop::sample::Index>(), 0..3),
                    n,
                ),
                Just((0..n).collect::<Vec<_>>()).prop_shuffle(),
            )
                .prop_map(move |(edges, perm)| {
                    let mut deps = vec![Vec::new(); n];
                    for (rank, picks) in edges.iter().enumerate() {
                        for p in picks {
                            if rank == 0 {
                                continue;
                            }
                            let target = perm[p.index(rank)];
                            let me = perm[rank];
                            if !deps[me].contains(&target) {
                                deps[me].push(target);
                            }
                        }
                    }
                    deps
                })
        })
    }

    proptest! {
        #[test]
        fn lock_rules_hold(held in proptest::collection::vec(0usize..3, 0..5), want in 0usize..3) {
            let held: Vec<Hold> = held.into_iter().map(|i| ALL[i]).collect();
            let want = ALL[want];
            let ok = admits(&held, want);
            // An exclusive holder excludes everyone; an exclusive request needs the place empty.
            if held.contains(&Hold::Exclusive) { prop_assert!(!ok); }
            if want == Hold::Exclusive { prop_assert_eq!(ok, held.is_empty()); }
            // Without an exclusive holder, shared and unlocked runs always coexist.
            if !held.contains(&Hold::Exclusive) && want != Hold::Exclusive { prop_assert!(ok); }
            // Admitting is monotone: fewer holders never block more.
            if ok && !held.is_empty() { prop_assert!(admits(&held[1..], want)); }
        }

        #[test]
        fn merge_order_is_a_topological_permutation(deps in dag()) {
            let order = merge_order(&deps);
            let n = deps.len();
            prop_assert_eq!(order.len(), n);
            let mut pos = vec![usize::MAX; n];
            for (p, &i) in order.iter().enumerate() { pos[i] = p; }
            prop_assert!(pos.iter().all(|&p| p < n));
            for (i, d) in deps.iter().enumerate() {
                for &j in d { prop_assert!(pos[j] < pos[i], "{} before its dependency {}", i, j); }
            }
            // With no edges between them, two steps keep plan order.
            if deps.iter().all(Vec::is_empty) {
                prop_assert_eq!(order, (0..n).collect::<Vec<_>>());
            }
        }
    }
}
