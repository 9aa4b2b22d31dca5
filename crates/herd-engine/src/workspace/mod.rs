//! Workspaces (DESIGN §5): isolated git worktrees (create, set up, auto-commit, merge into an
//! integration worktree), the request types, and the errors; locks and teardown live beside.

pub mod git;
mod lifecycle;
pub mod refs;
pub mod remote;
pub mod teardown;

use std::path::{Path, PathBuf};
use std::time::Duration;

use herd_core::workspace::LockMode;

pub use git::{Git, GitError, Merge};
pub use lifecycle::IsolationPlan;
pub(crate) use lifecycle::lock_key;

/// Where a task runs.
#[derive(Debug, Clone)]
pub enum WorkspaceReq {
    /// The given directory: unlocked (`lock: None`, still registered so an exclusive request
    /// waits for it) or under an advisory lock. `wait`: wait for a conflicting holder, or fail
    /// at once with RESOURCE_EXHAUSTED.
    Shared { lock: Option<LockMode>, wait: bool },
    /// Its own worktree on its own branch.
    Isolated(Box<IsolatedSpec>),
}

impl Default for WorkspaceReq {
    fn default() -> Self {
        Self::Shared { lock: None, wait: false }
    }
}

/// Everything needed to create, set up and finish one isolated worktree.
#[derive(Debug, Clone)]
pub struct IsolatedSpec {
    /// The record's id (`wt_…`).
    pub worktree_id: String,
    /// The plan run (or task) this worktree belongs to.
    pub run_id: String,
    pub step: String,
    /// The repository's top directory (the user's checkout; never modified).
    pub repo: PathBuf,
    pub root: PathBuf,
    pub path: PathBuf,
    pub branch: String,
    /// The commit the branch starts from, and how it was named.
    pub base: String,
    pub base_label: String,
    pub integration_branch: String,
    pub setup: Option<String>,
    pub setup_timeout: Duration,
    pub auto_commit: bool,
    pub commit_message: String,
}

/// Workspace failures; git's own text is kept in [`GitError`].
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{0}")]
    Invalid(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> WorkspaceError + '_ {
    move |source| WorkspaceError::Io { path: path.display().to_string(), source }
}

/// The worktree root: configured (relative to `base_dir`), else `HERD_WORKTREE_ROOT`, else
/// `<repo>.herd-worktrees` beside the repository — outside its working tree.
pub fn worktree_root(configured: Option<&str>, base_dir: &Path, repo: &Path) -> PathBuf {
    let explicit = configured
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HERD_WORKTREE_ROOT").map(PathBuf::from));
    match explicit {
        Some(p) if p.is_absolute() => p,
        Some(p) => base_dir.join(p),
        None => {
            let name = repo.file_name().map_or_else(|| "repo".into(), |n| n.to_string_lossy());
            repo.parent().unwrap_or(repo).join(format!("{name}.herd-worktrees"))
        }
    }
}

/// Refuse a root inside the repository's working tree (the agents' files would show up in
/// the user's `git status`), unless it is git-ignored there.
pub fn check_root(repo: &Path, root: &Path) -> Result<(), WorkspaceError> {
    let abs = absolute(root);
    if let Ok(rel) = abs.strip_prefix(repo) {
        let rel = rel.to_string_lossy();
        let ignored = !rel.is_empty()
            && Git::new(repo).test(&["check-ignore", "-q", "--", &rel]).unwrap_or(false);
        if !ignored {
            return Err(WorkspaceError::Invalid(format!(
                "worktree root {} is inside the repository {}; pick one outside it \
                 (worktree_root / HERD_WORKTREE_ROOT) or git-ignore it",
                abs.display(),
                repo.display()
            )));
        }
    }
    Ok(())
}

/// `p` made absolute and canonical as far as it exists.
pub fn absolute(p: &Path) -> PathBuf {
    if let Ok(c) = p.canonicalize() {
        return c;
    }
    match (p.parent(), p.file_name()) {
        (Some(parent), Some(name)) if !parent.as_os_str().is_empty() => absolute(parent).join(name),
        _ => std::env::current_dir().map(|d| d.join(p)).unwrap_or_else(|_| p.to_path_buf()),
    }
}

/// `git worktree add -b <branch> <path> <base>`, then copy the `.worktreeinclude` files.
pub fn create_worktree(spec: &IsolatedSpec) -> Result<Vec<String>, WorkspaceError> {
    if let Some(parent) = spec.path.parent() {
        std::fs::create_dir_all(parent).map_err(io(parent))?;
    }
    let path = spec.path.to_string_lossy();
    Git::new(&spec.repo).worktree(&["add", "-b", &spec.branch, &path, &spec.base])?;
    copy_includes(&spec.repo, &spec.path)
}

/// Copy the git-ignored files that `.worktreeinclude` (gitignore syntax) lists from the repo
/// into the new worktree (e.g. `.env`); tracked files are already there. Returns their paths.
pub fn copy_includes(repo: &Path, worktree: &Path) -> Result<Vec<String>, WorkspaceError> {
    let list = repo.join(".worktreeinclude");
    if !list.is_file() {
        return Ok(Vec::new());
    }
    let git = Git::new(repo);
    let files = |extra: &str| -> Result<Vec<String>, GitError> {
        let out = git.run(&["ls-files", "--others", "--ignored", "-z", extra])?;
        Ok(out.split('\0').filter(|s| !s.is_empty()).map(str::to_owned).collect())
    };
    let ignored = files("--exclude-standard")?;
    let listed = files(&format!("--exclude-from={}", list.display()))?;
    let mut copied = Vec::new();
    for rel in ignored.into_iter().filter(|f| listed.contains(f)) {
        let (from, to) = (repo.join(&rel), worktree.join(&rel));
        if let Some(dir) = to.parent() {
            std::fs::create_dir_all(dir).map_err(io(dir))?;
        }
        std::fs::copy(&from, &to).map_err(io(&from))?;
        copied.push(rel);
    }
    Ok(copied)
}

/// Run the step's setup command (`sh -c`) in the worktree with `HERD_REPO`, `HERD_WORKTREE`
/// and `HERD_BRANCH` set; a failure carries its output.
pub async fn run_setup(spec: &IsolatedSpec) -> Result<(), String> {
    let Some(cmd) = &spec.setup else { return Ok(()) };
    let child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .current_dir(&spec.path)
        .env("HERD_REPO", &spec.repo)
        .env("HERD_WORKTREE", &spec.path)
        .env("HERD_BRANCH", &spec.branch)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = match tokio::time::timeout(spec.setup_timeout, child).await {
        Err(_) => return Err(format!("setup `{cmd}` timed out after {:?}", spec.setup_timeout)),
        Ok(Err(e)) => return Err(format!("setup `{cmd}` could not start: {e}")),
        Ok(Ok(out)) => out,
    };
    if out.status.success() {
        return Ok(());
    }
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    let text = herd_core::truncate_str(text.trim_end(), 4096).to_owned();
    let how = out.status.code().map_or_else(|| "was killed".into(), |c| format!("exited {c}"));
    Err(format!("setup `{cmd}` {how}:\n{text}"))
}

/// Commit what the agent left (if `auto_commit`); returns the branch head and whether herd
/// committed. Without auto_commit, uncommitted work stays in the worktree (not merged).
pub fn finish_branch(spec: &IsolatedSpec) -> Result<(String, bool), WorkspaceError> {
    let git = Git::new(&spec.path);
    let committed =
        if spec.auto_commit { git.commit_all(&spec.commit_message)?.is_some() } else { false };
    Ok((git.commit_of("HEAD")?, committed))
}
