//! Git refs an agent must not move: where a working tree's git files are, a snapshot of the
//! repository's refs and HEADs before a run, the comparison after it, and putting back the rest.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use herd_core::{RefChange, RefChangeKind};

use super::{Git, GitError};

/// Where a working tree's git administrative files are (read from the files, no git started).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The top of the working tree (it holds `.git`).
    pub top: PathBuf,
    /// Its own git dir: `<top>/.git`, or `<common>/worktrees/<name>` for a linked worktree.
    pub git_dir: PathBuf,
    /// The repository's common dir: objects, refs, config, hooks.
    pub common: PathBuf,
    /// `<top>/.git` when it is a file pointing elsewhere (a linked worktree, a submodule).
    pub gitfile: Option<PathBuf>,
}

impl Layout {
    /// The layout of the working tree holding `dir`, if any.
    pub fn of(dir: &Path) -> Option<Layout> {
        let top = super::git::worktree_top(dir)?;
        let top = top.canonicalize().unwrap_or(top);
        let dot = top.join(".git");
        let meta = dot.symlink_metadata().ok()?;
        let (git_dir, gitfile) = if meta.is_dir() {
            (dot, None)
        } else {
            let text = std::fs::read_to_string(&dot).ok()?;
            let target = text.lines().next()?.strip_prefix("gitdir:")?.trim();
            (absolute_in(&top, target), Some(dot))
        };
        let common = match std::fs::read_to_string(git_dir.join("commondir")) {
            Ok(c) => absolute_in(&git_dir, c.trim()),
            Err(_) => git_dir.clone(),
        };
        let canon = |p: PathBuf| p.canonicalize().unwrap_or(p);
        Some(Layout { top, git_dir: canon(git_dir), common: canon(common), gitfile })
    }

    /// Whether this is a linked worktree (its git dir is under `<common>/worktrees/`).
    pub fn is_linked(&self) -> bool {
        self.git_dir != self.common
    }

    /// The git dirs of every worktree of the repository: the main one (the common dir) first,
    /// then `<common>/worktrees/*`.
    pub fn all_git_dirs(&self) -> Vec<PathBuf> {
        let mut dirs = vec![self.common.clone()];
        if let Ok(entries) = std::fs::read_dir(self.common.join("worktrees")) {
            let mut linked: Vec<PathBuf> =
                entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
            linked.sort();
            dirs.extend(linked);
        }
        dirs
    }
}

fn absolute_in(base: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() { p.to_path_buf() } else { base.join(p) }
}

/// The top of the working tree whose git dir is `git_dir` (for the main one, the common dir's
/// parent), where git commands about its HEAD run.
fn worktree_of(git_dir: &Path, layout: &Layout) -> PathBuf {
    if *git_dir == layout.common {
        return layout.common.parent().unwrap_or(&layout.common).to_path_buf();
    }
    match std::fs::read_to_string(git_dir.join("gitdir")) {
        Ok(g) => {
            let dot = absolute_in(git_dir, g.trim());
            dot.parent().unwrap_or(&dot).to_path_buf()
        }
        Err(_) => git_dir.to_path_buf(),
    }
}

/// Which refs a run may change: its own branch, and refs no person keeps work on.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    /// The run's own branch (`refs/heads/…`): an isolated run's `herd/<run>/<step>`, or the
    /// branch checked out where a shared run started.
    pub own_branch: Option<String>,
    /// An isolated run's integration branch: checked even though it may live under `herd/`.
    pub integration: Option<String>,
    /// With a sandbox, other worktrees' HEADs (and their reflogs) are read-only to the agent:
    /// a change there is someone else's, so they are not compared (only used to tell whose a
    /// moved ref is). Without one they are compared too.
    pub foreign_heads_writable: bool,
}

/// Refs that are never the agent's to answer for: remote-tracking refs (a fetch moves them),
/// herd's own (`refs/herd/…`) and herd's branches (`refs/heads/herd/…`, moved by herd itself
/// while plan steps run side by side) — except the run's integration branch.
fn exempt(name: &str, scope: &Scope) -> bool {
    if scope.own_branch.as_deref() == Some(name) {
        return true;
    }
    if scope.integration.as_deref() == Some(name) {
        return false;
    }
    name.starts_with("refs/remotes/")
        || name.starts_with("refs/herd/")
        || name.starts_with("refs/heads/herd/")
}

/// One worktree's HEAD as it was, and how long its HEAD reflog was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadState {
    pub git_dir: PathBuf,
    /// `ref: refs/heads/x` or a commit id.
    pub head: String,
    pub reflog_len: u64,
    /// The run's own worktree.
    pub own: bool,
}

/// The repository as it was before the run.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub layout: Layout,
    pub scope: Scope,
    pub refs: BTreeMap<String, String>,
    pub heads: Vec<HeadState>,
}

/// One HEAD reflog line: the values it moved from and to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReflogEntry {
    pub old: String,
    pub new: String,
}

/// The repository as it is after the run: refs, each worktree's HEAD, and what each worktree's
/// HEAD reflog gained meanwhile.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub refs: BTreeMap<String, String>,
    /// By git dir: HEAD now (`None`: the worktree is gone) and the reflog lines added.
    pub heads: BTreeMap<PathBuf, (Option<String>, Vec<ReflogEntry>)>,
}

fn read_head(git_dir: &Path) -> Option<String> {
    std::fs::read_to_string(git_dir.join("HEAD")).ok().map(|s| s.trim().to_owned())
}

fn reflog_len(git_dir: &Path) -> u64 {
    std::fs::metadata(git_dir.join("logs/HEAD")).map_or(0, |m| m.len())
}

/// The reflog lines written after the first `from` bytes.
fn reflog_tail(git_dir: &Path, from: u64) -> Vec<ReflogEntry> {
    let Ok(all) = std::fs::read(git_dir.join("logs/HEAD")) else { return Vec::new() };
    let tail = all.get(from as usize..).unwrap_or_default();
    String::from_utf8_lossy(tail)
        .lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            Some(ReflogEntry { old: f.next()?.to_owned(), new: f.next()?.to_owned() })
        })
        .collect()
}

fn all_refs(layout: &Layout) -> Result<BTreeMap<String, String>, GitError> {
    let out = Git::new(&layout.top).run(&["for-each-ref", "--format=%(refname) %(objectname)"])?;
    Ok(out
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(n, v)| (n.to_owned(), v.to_owned()))
        .collect())
}

impl Snapshot {
    /// Record the refs and HEADs of the repository holding `layout` (one `git for-each-ref`).
    /// A shared run's own branch is the one checked out in its worktree now.
    pub fn take(layout: Layout, mut scope: Scope) -> Result<Snapshot, GitError> {
        let refs = all_refs(&layout)?;
        let heads: Vec<HeadState> = layout
            .all_git_dirs()
            .into_iter()
            .filter_map(|g| {
                let head = read_head(&g)?;
                let own = g == layout.git_dir;
                Some(HeadState { reflog_len: reflog_len(&g), git_dir: g, head, own })
            })
            .collect();
        if scope.own_branch.is_none() {
            scope.own_branch = heads
                .iter()
                .find(|h| h.own)
                .and_then(|h| h.head.strip_prefix("ref: "))
                .map(str::to_owned);
        }
        Ok(Snapshot { layout, scope, refs, heads })
    }

    /// The repository now, for [`changes`].
    pub fn observe(&self) -> Result<Observed, GitError> {
        let refs = all_refs(&self.layout)?;
        let heads = self
            .heads
            .iter()
            .map(|h| {
                (h.git_dir.clone(), (read_head(&h.git_dir), reflog_tail(&h.git_dir, h.reflog_len)))
            })
            .collect();
        Ok(Observed { refs, heads })
    }
}

/// The commit a HEAD value stands for, given the refs.
fn head_commit<'a>(head: &'a str, refs: &'a BTreeMap<String, String>) -> Option<&'a str> {
    match head.strip_prefix("ref: ") {
        Some(r) => refs.get(r).map(String::as_str),
        None => Some(head),
    }
}

/// Whether another worktree (whose HEAD the agent could not write) made the change: its HEAD
/// is on `name` now and the lines its HEAD reflog gained lead from `before` to `after` (a
/// created ref: end at `after`). Without a sandbox this is taken on trust.
fn made_elsewhere(
    snap: &Snapshot,
    now: &Observed,
    name: &str,
    before: Option<&str>,
    after: &str,
) -> bool {
    let target = format!("ref: {name}");
    snap.heads.iter().filter(|h| !h.own).any(|h| {
        let Some((Some(head), tail)) = now.heads.get(&h.git_dir) else { return false };
        if *head != target || tail.is_empty() {
            return false;
        }
        match before {
            Some(from) => {
                let mut at = from;
                for e in tail {
                    if e.old == at {
                        at = &e.new;
                    }
                }
                at == after
            }
            None => tail.last().is_some_and(|e| e.new == after),
        }
    })
}

/// What the agent changed outside its own branch (pure): refs moved, created or deleted that
/// no other worktree accounts for, and HEADs it could write that point elsewhere.
pub fn changes(snap: &Snapshot, now: &Observed) -> Vec<RefChange> {
    let change = |name: &str, kind, before: Option<&String>, after: Option<&String>| RefChange {
        name: name.to_owned(),
        change: kind,
        before: before.cloned(),
        after: after.cloned(),
        worktree: None,
        kept: None,
        error: None,
    };
    let mut out = Vec::new();
    let names: std::collections::BTreeSet<&String> =
        snap.refs.keys().chain(now.refs.keys()).collect();
    for name in names {
        if exempt(name, &snap.scope) {
            continue;
        }
        let (before, after) = (snap.refs.get(name), now.refs.get(name));
        let kind = match (before, after) {
            (Some(b), Some(a)) if a == b => continue,
            (Some(_), Some(_)) => RefChangeKind::Moved,
            (None, Some(_)) => RefChangeKind::Created,
            (Some(_), None) => RefChangeKind::Deleted,
            (None, None) => continue,
        };
        if let Some(a) = after
            && made_elsewhere(snap, now, name, before.map(String::as_str), a)
        {
            continue;
        }
        out.push(change(name, kind, before, after));
    }
    for h in &snap.heads {
        if !h.own && !snap.scope.foreign_heads_writable {
            continue;
        }
        let Some((Some(head), tail)) = now.heads.get(&h.git_dir) else { continue };
        // A shared run's agent may commit on a detached HEAD: only where it points matters.
        let same = match (h.head.strip_prefix("ref: "), head.strip_prefix("ref: ")) {
            (Some(a), Some(b)) => a == b,
            (None, None) => h.own || *head == h.head,
            _ => false,
        };
        if same {
            continue;
        }
        // Someone else's worktree (no sandbox): its own reflog accounts for its checkout.
        if !h.own
            && let Some(c) = head_commit(head, &now.refs)
            && tail.last().is_some_and(|e| e.new == c)
        {
            continue;
        }
        let mut c = change("HEAD", RefChangeKind::Head, Some(&h.head), Some(head));
        c.worktree = Some(worktree_of(&h.git_dir, &snap.layout).display().to_string());
        out.push(c);
    }
    out
}

/// Put back what [`changes`] found: a moved ref back (what it pointed to kept under
/// `refs/herd/escaped/<id>/…`), a created one removed (kept the same way), a deleted one made
/// again, a HEAD pointed where it was. Each failure is noted on its change.
pub fn restore(snap: &Snapshot, id: &str, changes: &mut [RefChange]) {
    let git = Git::new(&snap.layout.top);
    let zeros = |v: &str| "0".repeat(v.len());
    for c in changes.iter_mut() {
        let keep = |c: &mut RefChange, value: &str| -> Result<(), GitError> {
            let short = c.name.strip_prefix("refs/").unwrap_or(&c.name);
            let kept = format!("refs/herd/escaped/{id}/{short}");
            git.run(&["update-ref", "-m", "herd: kept from a ref escape", &kept, value])?;
            c.kept = Some(kept);
            Ok(())
        };
        let done = match (c.change, c.before.clone(), c.after.clone()) {
            (RefChangeKind::Moved, Some(b), Some(a)) => keep(c, &a)
                .and_then(|()| git.run(&["update-ref", "-m", "herd: ref escape", &c.name, &b, &a])),
            (RefChangeKind::Created, None, Some(a)) => {
                keep(c, &a).and_then(|()| git.run(&["update-ref", "-d", &c.name, &a]))
            }
            (RefChangeKind::Deleted, Some(b), None) => {
                git.run(&["update-ref", "-m", "herd: ref escape", &c.name, &b, &zeros(&b)])
            }
            (RefChangeKind::Head, Some(b), Some(a)) => {
                let dir = c.worktree.clone().map(PathBuf::from).unwrap_or(snap.layout.top.clone());
                let wt = Git::new(dir);
                // Commits made on a detached HEAD are kept before HEAD leaves them.
                let kept = match a.strip_prefix("ref: ") {
                    None => keep(c, &a).map(|_| ()),
                    Some(_) => Ok(()),
                };
                kept.and_then(|()| match b.strip_prefix("ref: ") {
                    Some(r) => wt.run(&["symbolic-ref", "-m", "herd: ref escape", "HEAD", r]),
                    None => {
                        wt.run(&["update-ref", "--no-deref", "-m", "herd: ref escape", "HEAD", &b])
                    }
                })
            }
            _ => Ok(String::new()),
        };
        if let Err(e) = done {
            c.error = Some(e.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(refs: &[(&str, &str)], heads: Vec<HeadState>, scope: Scope) -> Snapshot {
        Snapshot {
            layout: Layout {
                top: "/r".into(),
                git_dir: "/r/.git/worktrees/w".into(),
                common: "/r/.git".into(),
                gitfile: None,
            },
            scope,
            refs: refs.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect(),
            heads,
        }
    }

    fn head(dir: &str, head: &str, own: bool) -> HeadState {
        HeadState { git_dir: dir.into(), head: head.into(), reflog_len: 0, own }
    }

    /// A worktree's git dir, its HEAD now, and the (old, new) lines its HEAD reflog gained.
    type Head<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);

    fn observed(refs: &[(&str, &str)], heads: &[Head<'_>]) -> Observed {
        Observed {
            refs: refs.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect(),
            heads: heads
                .iter()
                .map(|(d, h, tail)| {
                    let tail = tail
                        .iter()
                        .map(|(o, n)| ReflogEntry { old: (*o).into(), new: (*n).into() })
                        .collect();
                    (PathBuf::from(d), (Some((*h).to_owned()), tail))
                })
                .collect(),
        }
    }

    fn isolated() -> Scope {
        Scope {
            own_branch: Some("refs/heads/herd/r1/task".into()),
            integration: Some("refs/heads/herd/r1/integration".into()),
            foreign_heads_writable: false,
        }
    }

    fn kinds(c: &[RefChange]) -> Vec<(String, RefChangeKind)> {
        c.iter().map(|c| (c.name.clone(), c.change)).collect()
    }

    #[test]
    fn moves_outside_the_own_branch_are_found_and_exempt_refs_are_not() {
        let before = [
            ("refs/heads/main", "a"),
            ("refs/heads/herd/r1/task", "a"),
            ("refs/heads/herd/r1/other", "a"),
            ("refs/heads/herd/r1/integration", "a"),
            ("refs/remotes/origin/main", "a"),
            ("refs/tags/v1", "t"),
            ("refs/heads/old", "o"),
        ];
        let heads = vec![
            head("/r/.git", "ref: refs/heads/main", false),
            head("/r/.git/worktrees/w", "ref: refs/heads/herd/r1/task", true),
        ];
        let s = snap(&before, heads, isolated());
        let after = [
            ("refs/heads/main", "b"),
            ("refs/heads/herd/r1/task", "c"),
            ("refs/heads/herd/r1/other", "d"),
            ("refs/heads/herd/r1/integration", "e"),
            ("refs/remotes/origin/main", "f"),
            ("refs/tags/v1", "t"),
            ("refs/heads/rogue", "g"),
            ("refs/herd/escaped/x/heads/y", "h"),
        ];
        let now = observed(
            &after,
            &[
                ("/r/.git", "ref: refs/heads/main", &[]),
                ("/r/.git/worktrees/w", "ref: refs/heads/herd/r1/task", &[]),
            ],
        );
        assert_eq!(
            kinds(&changes(&s, &now)),
            [
                ("refs/heads/herd/r1/integration".into(), RefChangeKind::Moved),
                ("refs/heads/main".into(), RefChangeKind::Moved),
                ("refs/heads/old".into(), RefChangeKind::Deleted),
                ("refs/heads/rogue".into(), RefChangeKind::Created),
            ]
        );
    }

    #[test]
    fn the_own_worktree_head_must_stay_and_foreign_heads_only_count_without_a_sandbox() {
        let before = [("refs/heads/main", "a"), ("refs/heads/herd/r1/task", "a")];
        let heads = vec![
            head("/r/.git", "ref: refs/heads/main", false),
            head("/r/.git/worktrees/w", "ref: refs/heads/herd/r1/task", true),
        ];
        let now = observed(
            &before,
            &[
                ("/r/.git", "ref: refs/heads/other", &[]),
                ("/r/.git/worktrees/w", "ref: refs/heads/main", &[]),
            ],
        );
        let s = snap(&before, heads.clone(), isolated());
        let got = changes(&s, &now);
        assert_eq!(kinds(&got), [("HEAD".into(), RefChangeKind::Head)]);
        assert_eq!(got[0].before.as_deref(), Some("ref: refs/heads/herd/r1/task"));
        let open = Scope { foreign_heads_writable: true, ..isolated() };
        assert_eq!(changes(&snap(&before, heads, open), &now).len(), 2);
    }

    #[test]
    fn a_person_committing_in_their_own_checkout_is_not_the_agent() {
        // main moved a → b → c in the main checkout, whose HEAD reflog says so.
        let before = [("refs/heads/main", "a"), ("refs/heads/herd/r1/task", "a")];
        let heads = vec![
            head("/r/.git", "ref: refs/heads/main", false),
            head("/r/.git/worktrees/w", "ref: refs/heads/herd/r1/task", true),
        ];
        let s = snap(&before, heads, isolated());
        let mine = ("/r/.git/worktrees/w", "ref: refs/heads/herd/r1/task", &[][..]);
        let ok = observed(
            &[("refs/heads/main", "c"), ("refs/heads/herd/r1/task", "a"), ("refs/heads/new", "c")],
            &[("/r/.git", "ref: refs/heads/main", &[("a", "b"), ("b", "c")]), mine],
        );
        // `new` is not on the main checkout's HEAD: it is the agent's.
        assert_eq!(kinds(&changes(&s, &ok)), [("refs/heads/new".into(), RefChangeKind::Created)]);
        // The agent moved main a → x, then the person committed x → c: the chain from a breaks.
        let sneaked = observed(
            &[("refs/heads/main", "c"), ("refs/heads/herd/r1/task", "a")],
            &[("/r/.git", "ref: refs/heads/main", &[("x", "c")]), mine],
        );
        assert_eq!(
            kinds(&changes(&s, &sneaked)),
            [("refs/heads/main".into(), RefChangeKind::Moved)]
        );
        // A branch the person created and checked out (`git checkout -b feature`).
        let created = observed(
            &[
                ("refs/heads/main", "a"),
                ("refs/heads/herd/r1/task", "a"),
                ("refs/heads/feature", "a"),
            ],
            &[("/r/.git", "ref: refs/heads/feature", &[("a", "a")]), mine],
        );
        assert!(changes(&s, &created).is_empty());
    }

    #[test]
    fn a_shared_run_may_commit_on_its_branch_or_detached_head_but_not_switch() {
        let before = [("refs/heads/main", "a"), ("refs/heads/dev", "d")];
        let main_wt = Layout {
            top: "/r".into(),
            git_dir: "/r/.git".into(),
            common: "/r/.git".into(),
            gitfile: None,
        };
        let scope = Scope { own_branch: Some("refs/heads/main".into()), ..Scope::default() };
        let mut s = snap(&before, vec![head("/r/.git", "ref: refs/heads/main", true)], scope);
        s.layout = main_wt;
        let committed = observed(
            &[("refs/heads/main", "b"), ("refs/heads/dev", "d")],
            &[("/r/.git", "ref: refs/heads/main", &[("a", "b")])],
        );
        assert!(changes(&s, &committed).is_empty());
        let switched = observed(&before, &[("/r/.git", "ref: refs/heads/dev", &[])]);
        assert_eq!(kinds(&changes(&s, &switched)), [("HEAD".into(), RefChangeKind::Head)]);
        let mut detached = s.clone();
        detached.heads[0].head = "a".into();
        let moved_on = observed(&before, &[("/r/.git", "b", &[("a", "b")])]);
        assert!(changes(&detached, &moved_on).is_empty());
    }
}
