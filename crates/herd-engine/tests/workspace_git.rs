//! The git driver on real repositories: porcelain parsing (renames, spaces, untracked), commits
//! without a configured identity, a clean merge, and a conflict aborted with git's text kept.

use std::path::Path;

use herd_engine::workspace::{Git, GitError, Merge};

fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let git = Git::new(dir.path());
    git.run(&["init", "-q", "-b", "main"]).unwrap();
    std::fs::write(dir.path().join("f.txt"), "one\n").unwrap();
    std::fs::write(dir.path().join("old name.txt"), "x\n").unwrap();
    git.commit_all("init").unwrap().expect("a first commit");
    dir
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

#[test]
fn dirty_paths_parse_renames_spaces_and_untracked_files() {
    let dir = repo();
    let git = Git::new(dir.path());
    assert!(git.dirty_paths().unwrap().is_empty());
    git.run(&["mv", "old name.txt", "new name.txt"]).unwrap();
    write(dir.path(), "f.txt", "two\n");
    std::fs::create_dir(dir.path().join("d")).unwrap();
    write(dir.path(), "d/u v.txt", "u\n");
    let mut paths = git.dirty_paths().unwrap();
    paths.sort();
    assert_eq!(paths, ["d/u v.txt", "f.txt", "new name.txt"]);
    // Nothing to commit is not an error; something to commit gives the new head.
    let head = git.commit_all("work").unwrap().unwrap();
    assert_eq!(git.commit_of("HEAD").unwrap(), head);
    assert_eq!(git.commit_all("again").unwrap(), None);
}

#[test]
fn merges_are_merge_commits_and_conflicts_are_aborted_with_the_branch_kept() {
    let dir = repo();
    let git = Git::new(dir.path());
    for (branch, text) in [("x", "from x\n"), ("y", "from y\n")] {
        git.run(&["checkout", "-q", "-b", branch, "main"]).unwrap();
        write(dir.path(), "f.txt", text);
        git.commit_all(branch).unwrap();
    }
    git.run(&["checkout", "-q", "main"]).unwrap();
    let Merge::Merged(commit) = git.merge("x", "merge x").unwrap() else { panic!("x conflicted") };
    let parents = git.run(&["rev-list", "--parents", "-n1", &commit]).unwrap();
    assert_eq!(parents.split_whitespace().count(), 3, "a merge commit: {parents}");
    let before = git.commit_of("HEAD").unwrap();
    let Merge::Conflict { files, output } = git.merge("y", "merge y").unwrap() else {
        panic!("y merged")
    };
    assert_eq!(files, ["f.txt"]);
    assert!(output.contains("CONFLICT"), "{output}");
    // Aborted: clean tree, same head, y untouched.
    assert!(git.dirty_paths().unwrap().is_empty());
    assert_eq!(git.commit_of("HEAD").unwrap(), before);
    assert!(!dir.path().join(".git/MERGE_HEAD").exists());
    assert_eq!(git.run(&["show", "y:f.txt"]).unwrap(), "from y\n");
    assert!(git.is_ancestor("x", "main").unwrap() && !git.is_ancestor("y", "main").unwrap());
}

#[test]
fn git_errors_keep_gits_own_words() {
    let dir = repo();
    let err = Git::new(dir.path()).run(&["checkout", "-q", "no-such-branch"]).unwrap_err();
    let GitError::Failed { stderr, code, .. } = &err else { panic!("{err}") };
    assert!(stderr.contains("no-such-branch"), "{stderr}");
    assert_ne!(*code, 0);
    assert!(err.to_string().contains("`git checkout -q no-such-branch`"), "{err}");
    let err = Git::new(dir.path()).commit_of("nope").unwrap_err();
    assert!(err.to_string().contains("\"nope\" does not name a commit"), "{err}");
    let outside = tempfile::tempdir().unwrap();
    assert!(Git::new(outside.path()).toplevel().is_err());
}

#[test]
fn worktree_top_agrees_with_git() {
    use herd_engine::workspace::git::worktree_top;
    let dir = repo();
    let root = dir.path().canonicalize().unwrap();
    std::fs::create_dir_all(root.join("a/b")).unwrap();
    let linked = root.join("linked");
    Git::new(&root).run(&["worktree", "add", "-q", "-b", "w", linked.to_str().unwrap()]).unwrap();
    std::fs::create_dir_all(linked.join("c")).unwrap();
    for d in [root.clone(), root.join("a/b"), linked.clone(), linked.join("c")] {
        let git = Git::new(&d).toplevel().unwrap().canonicalize().unwrap();
        assert_eq!(worktree_top(&d), Some(git), "{}", d.display());
    }
    let outside = tempfile::tempdir().unwrap();
    if Git::new(outside.path()).toplevel().is_err() {
        assert_eq!(worktree_top(outside.path()), None);
    }
}
