//! Isolated steps on several machines: the repository a submitted plan names, each worker's
//! clone of it, pushing a step's branch, and merging into the shared integration branch.
//!
//! The shared remote is the only place machines meet: the submitter pushes its base commit
//! there (`herd/<plan>/base`), a worker pushes each step's branch (`herd/<plan>/<step>`), and
//! the one worker holding a plan's merge lock merges them into the integration branch in plan
//! order and pushes it. Nothing is ever force-pushed but a step's own branch.

use std::path::{Path, PathBuf};

use herd_core::workspace::integration_branch;
use herd_store::PlanRepo;

use super::{Git, GitError, IsolationPlan, Merge, WorkspaceError, absolute};

/// The remote's name in a worker's clone.
const ORIGIN: &str = "origin";

/// The repository and base of a plan submitted from `dir`: `repo` as the plan names it, else
/// the `origin` of the checkout holding `dir`. When that checkout has the commit (it is a
/// clone of the repository), its `HEAD` is the base and is pushed as `herd/<plan>/base` so
/// every worker can fetch it; otherwise the base is the remote's default branch.
pub fn submission_repo(
    dir: &Path,
    repo: Option<&str>,
    plan_id: &str,
    into: Option<&str>,
) -> Result<PlanRepo, WorkspaceError> {
    let top = Git::new(dir).toplevel().ok().map(|t| absolute(&t));
    let origin = top.as_ref().and_then(|t| {
        Some(Git::new(t).run(&["remote", "get-url", ORIGIN]).ok()?.trim().to_owned())
    });
    let url = match (repo, &origin) {
        (Some(r), _) => local_or_url(dir, r),
        (None, Some(o)) => local_or_url(top.as_deref().unwrap_or(dir), o),
        (None, None) => {
            return Err(WorkspaceError::Invalid(format!(
                "the plan has isolated steps and goes to workers on other machines: they need a \
                 repository they can all fetch from and push to. Set `repo: URL` in the plan, or \
                 give the repository of {} an `origin` remote",
                dir.display()
            )));
        }
    };
    // This checkout is a clone of the plan's repository: its HEAD, as on one machine.
    let local = top
        .filter(|t| repo.is_none() || origin.as_deref().is_some_and(|o| local_or_url(t, o) == url));
    let base = match local {
        Some(t) => {
            let git = Git::new(&t);
            let base = git.commit_of("HEAD")?;
            let refspec = format!("{base}:refs/heads/herd/{plan_id}/base");
            git.run(&["push", "--quiet", &url, &refspec]).map_err(|e| {
                WorkspaceError::Invalid(format!(
                    "cannot push the plan's base commit to {url} (workers start from it):\n{e}"
                ))
            })?;
            base
        }
        None => {
            let out = Git::new(dir).run(&["ls-remote", &url, "HEAD"]).map_err(|e| {
                WorkspaceError::Invalid(format!("cannot read the repository {url}:\n{e}"))
            })?;
            out.split_whitespace().next().map(str::to_owned).ok_or_else(|| {
                WorkspaceError::Invalid(format!(
                    "the repository {url} has no HEAD (is it empty?): its steps need a commit to \
                     start from"
                ))
            })?
        }
    };
    let integration_branch = into.map_or_else(|| integration_branch(plan_id), str::to_owned);
    Ok(PlanRepo { url, base, integration_branch })
}

/// A local path as an absolute one (every worker on this machine reads it alike); a URL as is.
fn local_or_url(dir: &Path, r: &str) -> String {
    let p = Path::new(r);
    if r.contains("://") || (!p.is_absolute() && r.contains(':')) {
        return r.to_owned();
    }
    absolute(&dir.join(p)).display().to_string()
}

/// A worker's clone of a plan's repository (no checkout of its own: steps and merges each
/// get a worktree of it).
#[derive(Debug, Clone)]
pub struct RepoClone {
    pub dir: PathBuf,
    /// Where its worktrees go.
    pub root: PathBuf,
}

impl RepoClone {
    /// The clone of `url` under `root` (made on first use; a clone cut short is replaced).
    pub fn open(root: &Path, url: &str) -> Result<RepoClone, WorkspaceError> {
        let slug = slug(url);
        let dir = root.join(&slug);
        let wt_root = root.join(format!("{slug}.herd-worktrees"));
        if !dir.join(".git").exists() {
            std::fs::create_dir_all(root).map_err(super::io(root))?;
            // Into a fresh directory, then renamed: another worker on this machine may be
            // cloning too; whoever renames first wins, the other clone is dropped.
            let tmp = root.join(format!(".{slug}.{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&tmp);
            let t = tmp.to_string_lossy().into_owned();
            Git::new(root).run(&["clone", "--quiet", "--no-checkout", url, &t])?;
            if std::fs::rename(&tmp, &dir).is_err() {
                let _ = std::fs::remove_dir_all(&tmp);
            }
        }
        Ok(RepoClone { dir: absolute(&dir), root: absolute(&wt_root) })
    }

    /// Fetch every branch of the remote (a ref another worker is updating makes git fail
    /// once: it is tried again).
    pub fn fetch(&self) -> Result<(), GitError> {
        let git = Git::new(&self.dir);
        let args = ["fetch", "--quiet", "--force", ORIGIN];
        git.run(&args).or_else(|_| git.run(&args)).map(drop)
    }

    /// The commit of the remote's `branch` as last fetched.
    pub fn remote_commit(&self, branch: &str) -> Option<String> {
        Git::new(&self.dir).commit_of(&format!("refs/remotes/{ORIGIN}/{branch}")).ok()
    }

    /// `rev` as the remote knows it (a branch), else as a commit or tag.
    pub fn resolve(&self, rev: &str) -> Result<String, GitError> {
        self.remote_commit(rev).map_or_else(|| Git::new(&self.dir).commit_of(rev), Ok)
    }

    /// The isolation of plan `plan_id` in this clone: its steps' worktrees go under the
    /// clone's worktree root, from `base`, merged into `integration`.
    pub fn isolation(&self, plan_id: &str, repo: &PlanRepo) -> IsolationPlan {
        IsolationPlan::in_clone(
            self.dir.clone(),
            self.root.clone(),
            plan_id,
            repo.base.clone(),
            repo.integration_branch.clone(),
        )
    }

    /// Push `branch` (a step's own, so forced: a retry replaces it) from worktree `dir`.
    pub fn push_branch(dir: &Path, branch: &str) -> Result<(), GitError> {
        let refspec = format!("+{branch}:refs/heads/{branch}");
        Git::new(dir).run(&["push", "--quiet", ORIGIN, &refspec]).map(drop)
    }

    /// Merge the remote's `branch` into the integration branch of `iso` and push it; the
    /// integration starts from `base` while the remote has no such branch. Only the holder of
    /// the plan's merge lock calls this, so the push is a fast-forward.
    pub fn merge(
        &self,
        iso: &IsolationPlan,
        branch: &str,
        message: &str,
    ) -> Result<Merge, WorkspaceError> {
        self.fetch()?;
        let start = match self.remote_commit(&iso.integration_branch) {
            Some(c) => c,
            None => iso.base.clone(),
        };
        let path = &iso.integration_path;
        let p = path.to_string_lossy().into_owned();
        let git = Git::new(path);
        if path.join(".git").exists() {
            git.run(&["checkout", "--quiet", "--force", "--detach", &start])?;
            git.run(&["clean", "--quiet", "-fdx"])?;
        } else {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(super::io(parent))?;
            }
            Git::new(&self.dir).worktree(&["add", "--quiet", "--detach", &p, &start])?;
        }
        let merged = git.merge(&format!("refs/remotes/{ORIGIN}/{branch}"), message)?;
        if matches!(merged, Merge::Merged(_))
            || self.remote_commit(&iso.integration_branch).is_none()
        {
            let refspec = format!("HEAD:refs/heads/{}", iso.integration_branch);
            git.run(&["push", "--quiet", ORIGIN, &refspec])?;
        }
        Ok(merged)
    }
}

/// A directory name for `url`: readable, and distinct for distinct URLs.
fn slug(url: &str) -> String {
    let tail = url.trim_end_matches('/').rsplit(['/', ':']).next().unwrap_or("repo");
    let tail: String = tail
        .trim_end_matches(".git")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
        .take(40)
        .collect();
    // FNV-1a: stable across runs and machines (std's hasher is seeded per process).
    let hash = url
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    format!("{}-{:08x}", if tail.is_empty() { "repo" } else { &tail }, hash as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_readable_and_tell_urls_apart() {
        let a = slug("git@github.com:org/herd.git");
        let b = slug("https://example.com/other/herd.git");
        assert!(a.starts_with("herd-") && b.starts_with("herd-"), "{a} {b}");
        assert_ne!(a, b);
        assert_eq!(a, slug("git@github.com:org/herd.git"));
        assert!(slug("/").starts_with("repo-"));
    }

    #[test]
    fn local_paths_are_made_absolute_and_urls_kept() {
        let d = Path::new("/tmp");
        assert_eq!(local_or_url(d, "https://h/x.git"), "https://h/x.git");
        assert_eq!(local_or_url(d, "git@h:x.git"), "git@h:x.git");
        assert!(local_or_url(d, "shared.git").ends_with("/shared.git"));
        assert!(Path::new(&local_or_url(d, "shared.git")).is_absolute());
    }
}
