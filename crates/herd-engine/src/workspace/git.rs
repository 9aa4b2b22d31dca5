//! The `git` binary as herd's only way into a repository: machine-readable flags in, git's own
//! error text out (verbatim, with the command that produced it).

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A git command that failed; `stderr` is git's text, unchanged.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("`git {args}` in {dir} failed (exit {code}):\n{stderr}")]
    Failed { args: String, dir: String, code: i32, stderr: String, stdout: String },
    #[error("cannot run git (is it installed?): {0}")]
    Spawn(std::io::Error),
    #[error("`git {args}` in {dir} did not finish in {}s and was killed", .after.as_secs())]
    Timeout { args: String, dir: String, after: Duration },
}

/// The longest any one git command may take (a hook or a lock wait that never ends).
pub const GIT_TIMEOUT: Duration = Duration::from_secs(600);

/// `git -C <dir> …`.
#[derive(Debug, Clone)]
pub struct Git {
    dir: PathBuf,
}

impl Git {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new("git");
        c.arg("-C").arg(&self.dir).args(args);
        c.env("GIT_TERMINAL_PROMPT", "0").stdin(Stdio::null());
        c
    }

    fn output(&self, args: &[&str]) -> Result<Output, GitError> {
        self.output_within(args, GIT_TIMEOUT)
    }

    /// Run to completion, or kill git once `limit` has passed.
    fn output_within(&self, args: &[&str], limit: Duration) -> Result<Output, GitError> {
        let mut child = self
            .command(args)
            // Its own group: a hook or alias git started goes down with it.
            .process_group(0)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(GitError::Spawn)?;
        // Drained on their own threads, so a chatty git never blocks on a full pipe.
        let drain = |r: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                if let Some(mut r) = r {
                    let _ = r.read_to_end(&mut buf);
                }
                buf
            })
        };
        let out = drain(child.stdout.take().map(|r| Box::new(r) as Box<dyn Read + Send>));
        let err = drain(child.stderr.take().map(|r| Box::new(r) as Box<dyn Read + Send>));
        let start = Instant::now();
        let mut pause = Duration::from_micros(200);
        let status = loop {
            if let Some(status) = child.try_wait().map_err(GitError::Spawn)? {
                break status;
            }
            if start.elapsed() >= limit {
                let group = nix::unistd::Pid::from_raw(child.id() as i32);
                let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
                let _ = child.wait();
                return Err(GitError::Timeout {
                    args: args.join(" "),
                    dir: self.dir.display().to_string(),
                    after: limit,
                });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        };
        let stdout = out.join().unwrap_or_default();
        let stderr = err.join().unwrap_or_default();
        Ok(Output { status, stdout, stderr })
    }

    fn failed(&self, args: &[&str], out: &Output) -> GitError {
        GitError::Failed {
            args: args.join(" "),
            dir: self.dir.display().to_string(),
            code: out.status.code().unwrap_or(-1),
            stderr: String::from_utf8_lossy(&out.stderr).trim_end().to_owned(),
            stdout: String::from_utf8_lossy(&out.stdout).trim_end().to_owned(),
        }
    }

    /// Run `git args`; stdout on success.
    pub fn run(&self, args: &[&str]) -> Result<String, GitError> {
        let out = self.output(args)?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(self.failed(args, &out))
        }
    }

    /// `git worktree <args>`, one at a time per repository. git reads every entry of
    /// `.git/worktrees` while it adds one, and fails on an entry another `git worktree add` is
    /// still writing ("failed to read .git/worktrees/x/commondir"): a plan's parallel steps did
    /// that. The turn is a file lock in the repository's git directory, so separate herd
    /// processes take turns too; if that file cannot be made, git runs unlocked as before.
    pub fn worktree(&self, args: &[&str]) -> Result<String, GitError> {
        let common = self.run(&["rev-parse", "--git-common-dir"])?;
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.dir.join(common.trim_end()).join("herd-worktree.lock"));
        // Held until dropped, after git has finished.
        let _turn = lock.ok().filter(|f| f.lock().is_ok());
        // `add` runs post-checkout on a tree agents may have written (a merged integration tip).
        let guard = self.hook_guard();
        let full: Vec<&str> = guard
            .iter()
            .map(String::as_str)
            .chain(std::iter::once("worktree"))
            .chain(args.iter().copied())
            .collect();
        self.run(&full)
    }

    /// Run a yes/no query: exit 0 is yes, exit 1 is no, anything else an error.
    pub fn test(&self, args: &[&str]) -> Result<bool, GitError> {
        let out = self.output(args)?;
        match out.status.code() {
            Some(0) => Ok(true),
            Some(1) => Ok(false),
            _ => Err(self.failed(args, &out)),
        }
    }

    /// The top of the working tree that holds `dir`, as git says (see also [`worktree_top`]).
    pub fn toplevel(&self) -> Result<PathBuf, GitError> {
        Ok(PathBuf::from(self.run(&["rev-parse", "--show-toplevel"])?.trim_end()))
    }

    /// The commit a revision names.
    pub fn commit_of(&self, rev: &str) -> Result<String, GitError> {
        let spec = format!("{rev}^{{commit}}");
        Ok(self
            .run(&["rev-parse", "--verify", "--quiet", "--end-of-options", &spec])
            .map_err(|e| match e {
                GitError::Failed { args, dir, code, stdout, .. } => GitError::Failed {
                    args,
                    dir,
                    code,
                    stdout,
                    stderr: format!("fatal: {rev:?} does not name a commit"),
                },
                other => other,
            })?
            .trim()
            .to_owned())
    }

    pub fn branch_exists(&self, branch: &str) -> Result<bool, GitError> {
        self.test(&["show-ref", "--verify", "--quiet", &format!("refs/heads/{branch}")])
    }

    /// Is `ancestor` reachable from `tip`?
    pub fn is_ancestor(&self, ancestor: &str, tip: &str) -> Result<bool, GitError> {
        self.test(&["merge-base", "--is-ancestor", ancestor, tip])
    }

    /// Paths with uncommitted changes (tracked or untracked), from `status --porcelain -z`.
    pub fn dirty_paths(&self) -> Result<Vec<String>, GitError> {
        let out = self.run(&["status", "--porcelain=v1", "-z", "--untracked-files=all"])?;
        let mut paths = Vec::new();
        let mut fields = out.split('\0').filter(|f| !f.is_empty());
        while let Some(f) = fields.next() {
            let (code, path) = f.split_at(f.len().min(3));
            paths.push(path.to_owned());
            // A rename or copy carries its source path as the next field.
            if code.starts_with('R') || code.starts_with('C') {
                fields.next();
            }
        }
        Ok(paths)
    }

    /// `-c user.name/-c user.email` when git has no identity configured (a fresh HOME, CI):
    /// herd commits must not fail for that. A configured identity is always used as is.
    pub fn identity_args(&self) -> Vec<String> {
        if self.run(&["var", "GIT_COMMITTER_IDENT"]).is_ok()
            && self.run(&["var", "GIT_AUTHOR_IDENT"]).is_ok()
        {
            return Vec::new();
        }
        ["-c", "user.name=herd", "-c", "user.email=herd@localhost"].map(String::from).to_vec()
    }

    /// `-c core.hooksPath=<common dir>/hooks` when the repository's hooks live in its working
    /// tree (`core.hooksPath` relative, e.g. husky's `.husky/_`, or pointing into the tree): an
    /// agent can rewrite those in its sandbox, and herd's own checkouts, commits and merges of
    /// its work run outside it. The repository's `.git/hooks` (read-only to agents) still run.
    pub fn hook_guard(&self) -> Vec<String> {
        let Ok(v) = self.run(&["config", "--get", "core.hooksPath"]) else { return Vec::new() };
        let v = v.trim();
        // `~/…` is the person's HOME, which no agent writes.
        if v.is_empty() || v.starts_with('~') {
            return Vec::new();
        }
        let Ok(top) = self.toplevel() else { return Vec::new() };
        let hooks = if Path::new(v).is_absolute() { PathBuf::from(v) } else { top.join(v) };
        if !super::absolute(&hooks).starts_with(super::absolute(&top)) {
            return Vec::new();
        }
        match self.run(&["rev-parse", "--path-format=absolute", "--git-common-dir"]) {
            Ok(common) => vec!["-c".into(), format!("core.hooksPath={}/hooks", common.trim_end())],
            // Not knowing where the safe ones are: none run.
            Err(_) => vec!["-c".into(), "core.hooksPath=/dev/null".into()],
        }
    }

    /// Commit everything in the working tree (`add -A`); `None` when there was nothing to commit.
    pub fn commit_all(&self, message: &str) -> Result<Option<String>, GitError> {
        if self.dirty_paths()?.is_empty() {
            return Ok(None);
        }
        self.run(&["add", "-A"])?;
        let mut ident = self.identity_args();
        ident.extend(self.hook_guard());
        let mut args: Vec<&str> = ident.iter().map(String::as_str).collect();
        args.extend(["commit", "--quiet", "-m", message]);
        self.run(&args)?;
        Ok(Some(self.commit_of("HEAD")?))
    }

    /// Files with unresolved conflicts.
    pub fn conflicted(&self) -> Result<Vec<String>, GitError> {
        let out = self.run(&["diff", "--name-only", "--diff-filter=U", "-z"])?;
        Ok(out.split('\0').filter(|s| !s.is_empty()).map(str::to_owned).collect())
    }
}

/// How merging one branch went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Merge {
    /// Merged; the merge commit.
    Merged(String),
    /// The branch is already contained in the checked-out branch: nothing was done.
    NothingToMerge,
    /// Conflicted; the merge was aborted. Git's output and the conflicted files.
    Conflict { files: Vec<String>, output: String },
}

impl Git {
    /// Merge `branch` into the checked-out branch with a merge commit (`--no-ff`, so the
    /// integration branch's first-parent history lists the steps in merge order). A conflict
    /// is aborted at once, leaving the working tree as it was.
    pub fn merge(&self, branch: &str, message: &str) -> Result<Merge, GitError> {
        // git would answer "Already up to date" and succeed: say so instead of a merge.
        if self.is_ancestor(branch, "HEAD")? {
            return Ok(Merge::NothingToMerge);
        }
        let mut ident = self.identity_args();
        ident.extend(self.hook_guard());
        let mut args: Vec<&str> = ident.iter().map(String::as_str).collect();
        args.extend(["merge", "--no-ff", "--no-edit", "-m", message, "--end-of-options", branch]);
        let out = self.output(&args)?;
        if out.status.success() {
            return Ok(Merge::Merged(self.commit_of("HEAD")?));
        }
        let files = self.conflicted()?;
        let output = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // Only abort a merge that is in progress (MERGE_HEAD); anything else is git's error.
        let in_progress = self.test(&["rev-parse", "--verify", "--quiet", "MERGE_HEAD"])?;
        if in_progress {
            self.run(&["merge", "--abort"])?;
        }
        if files.is_empty() && !in_progress {
            return Err(self.failed(&args, &out));
        }
        Ok(Merge::Conflict { files, output: output.trim_end().to_owned() })
    }
}

/// The nearest directory at or above `dir` that holds a `.git` (directory, or file for linked
/// worktrees and submodules): what `git rev-parse --show-toplevel` answers for ordinary trees,
/// without starting git — it is asked for every run's lock key.
pub fn worktree_top(dir: &Path) -> Option<PathBuf> {
    dir.ancestors().find(|d| d.join(".git").symlink_metadata().is_ok()).map(Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_git_that_hangs_is_killed_at_its_limit() {
        let dir = tempfile::tempdir().unwrap();
        // A shell alias stands in for a hook that never ends.
        let git = Git::new(dir.path());
        git.run(&["init", "-q"]).unwrap();
        git.run(&["config", "alias.nap", "!sleep 5"]).unwrap();
        let start = Instant::now();
        let e = git.output_within(&["nap"], Duration::from_millis(300)).unwrap_err();
        assert!(matches!(e, GitError::Timeout { .. }), "{e}");
        assert!(e.to_string().contains("`git nap`"), "{e}");
        assert!(start.elapsed() < Duration::from_secs(3), "{:?}", start.elapsed());
        // The alias's own process went down with git (its group was killed).
        std::thread::sleep(Duration::from_millis(100));
        let dir_path = dir.path().canonicalize().unwrap();
        let left: Vec<String> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| {
                let cwd = std::fs::read_link(e.path().join("cwd")).ok();
                let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
                cwd.is_some_and(|c| c.starts_with(&dir_path)) && cmd.starts_with(b"sleep\x005")
            })
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(left.is_empty(), "{left:?}");
        // A quick command is unaffected, and its output is whole.
        assert!(git.run(&["rev-parse", "--git-dir"]).unwrap().trim_end().ends_with(".git"));
    }
}
