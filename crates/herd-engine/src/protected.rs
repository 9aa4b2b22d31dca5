//! The paths no rule and no auto-approve lets an agent write: herd's state and config, the agent
//! CLIs' project and user settings, a repository's git dirs, shell start-up files and `~/.ssh`.
//! One list: the gate sends a call touching one to a person, the sandbox binds them read-only.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::workspace::refs::Layout;

/// Project-level files where an agent CLI looks for settings, hooks and MCP servers.
pub(crate) const PROJECT_NAMES: &[&str] = &[".herd", ".claude", ".gemini", ".codex", ".mcp.json"];

/// Under HOME: what a shell, ssh or git runs or trusts at start-up, and the agent CLIs' own
/// settings. The sandbox makes all of HOME read-only; the gate asks about these by name.
const HOME_NAMES: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".config/fish",
    ".inputrc",
    ".ssh",
    ".gnupg",
    ".netrc",
    ".gitconfig",
    ".config/git",
    ".claude",
    ".claude.json",
    ".codex",
    ".gemini",
];

/// Where one run's protected paths are.
#[derive(Debug, Clone, Default)]
pub(crate) struct Roots<'a> {
    /// The run's working directory (canonical).
    pub cwd: PathBuf,
    /// An isolated run's worktree.
    pub worktree: Option<PathBuf>,
    pub git: Option<&'a Layout>,
    /// herd's state directory.
    pub state_dir: PathBuf,
    /// More paths never to make writable (the project's `.herd/`).
    pub protect: &'a [PathBuf],
    /// herd's own user config (`$XDG_CONFIG_HOME/herd`).
    pub user_config: Option<PathBuf>,
}

/// herd's own user config directory (`$XDG_CONFIG_HOME/herd`).
pub(crate) fn user_config() -> Option<PathBuf> {
    crate::agents::user_agents_dir().and_then(|d| d.parent().map(Path::to_path_buf))
}

fn canon(p: &Path) -> PathBuf {
    p.canonicalize().unwrap_or_else(|_| p.to_path_buf())
}

/// The protected paths both the gate and the sandbox know, each with whether the sandbox may
/// put a placeholder where it does not exist yet (so it can be bound read-only).
pub(crate) fn common(r: &Roots<'_>) -> Vec<(PathBuf, bool)> {
    let mut out: Vec<(PathBuf, bool)> = vec![(canon(&r.state_dir), false)];
    out.extend(r.protect.iter().map(|p| (canon(p), true)));
    if let Some(u) = &r.user_config {
        out.push((canon(u), true));
    }
    let mut roots = vec![r.cwd.clone()];
    roots.extend(r.worktree.as_deref().map(canon));
    roots.extend(r.git.map(|g| g.top.clone()));
    roots.sort();
    roots.dedup();
    for root in &roots {
        out.extend(PROJECT_NAMES.iter().map(|n| (root.join(n), true)));
    }
    if let Some(g) = r.git {
        out.extend(git_protected(g));
    }
    out
}

/// In a repository's git dirs: what runs code (config, hooks, submodules' config and hooks),
/// what points a worktree at its repository (`.git` files, `commondir`, `gitdir`), and the
/// other worktrees' HEAD, index and HEAD reflog (not the agent's; the reflogs tell whose a
/// moved ref is). The objects and refs stay writable: the agent commits on its own branch.
pub(crate) fn git_protected(g: &Layout) -> Vec<(PathBuf, bool)> {
    let mut out = vec![(g.common.join("config"), false), (g.common.join("hooks"), true)];
    modules(&g.common.join("modules"), 0, &mut out);
    if let Some(f) = &g.gitfile {
        out.push((f.clone(), false));
    }
    if g.is_linked() {
        for n in ["commondir", "gitdir", "config.worktree"] {
            out.push((g.git_dir.join(n), false));
        }
        for n in ["HEAD", "index", "logs/HEAD"] {
            out.push((g.common.join(n), false));
        }
    }
    if let Ok(entries) = std::fs::read_dir(g.common.join("worktrees")) {
        for e in entries.flatten() {
            let p = e.path();
            if p != g.git_dir {
                out.push((p, false));
            }
        }
    }
    out
}

/// Submodules' git dirs (`modules/<name>`, nested): their config and hooks.
fn modules(dir: &Path, depth: u32, out: &mut Vec<(PathBuf, bool)>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.join("config").is_file() {
            out.push((p.join("config"), false));
            out.push((p.join("hooks"), false));
            if depth < 4 {
                modules(&p.join("modules"), depth + 1, out);
            }
        } else if p.is_dir() && depth < 8 {
            // Submodule names may have slashes.
            modules(&p, depth + 1, out);
        }
    }
}

/// One run's protected paths as the gate checks them (canonical; a path is protected when it
/// is one of them or lies inside one). Worked out at the first call that writes something: a run
/// whose agent never does (a command) pays nothing for it.
#[derive(Debug, Default)]
pub struct Protected {
    /// What the list is made from (`None`: nothing is protected).
    from: Option<(OwnedRoots, Option<PathBuf>)>,
    paths: OnceLock<Vec<PathBuf>>,
}

/// [`Roots`] kept for later.
#[derive(Debug, Clone)]
struct OwnedRoots {
    cwd: PathBuf,
    worktree: Option<PathBuf>,
    git: Option<Layout>,
    state_dir: PathBuf,
    protect: Vec<PathBuf>,
    user_config: Option<PathBuf>,
}

impl Protected {
    /// The common list, the repository's git dirs as a whole (an agent has no reason to write
    /// into them by hand: git does that) and the files under `home` that [`HOME_NAMES`] lists.
    pub(crate) fn new(r: &Roots<'_>, home: Option<&Path>) -> Self {
        let owned = OwnedRoots {
            cwd: r.cwd.clone(),
            worktree: r.worktree.clone(),
            git: r.git.cloned(),
            state_dir: r.state_dir.clone(),
            protect: r.protect.to_vec(),
            user_config: r.user_config.clone(),
        };
        Self { from: Some((owned, home.map(Path::to_path_buf))), paths: OnceLock::new() }
    }

    fn paths(&self) -> &[PathBuf] {
        self.paths.get_or_init(|| match &self.from {
            Some((o, home)) => {
                let r = Roots {
                    cwd: o.cwd.clone(),
                    worktree: o.worktree.clone(),
                    git: o.git.as_ref(),
                    state_dir: o.state_dir.clone(),
                    protect: &o.protect,
                    user_config: o.user_config.clone(),
                };
                list(&r, home.as_deref())
            }
            None => Vec::new(),
        })
    }

    /// The protected path `path` (canonical) is or lies inside, if any.
    pub fn covering(&self, path: &Path) -> Option<&Path> {
        self.paths().iter().find(|p| path.starts_with(p)).map(PathBuf::as_path)
    }

    /// A protected path that lies inside the directory `dir` (canonical) or is it.
    pub fn inside(&self, dir: &Path) -> Option<&Path> {
        self.paths().iter().find(|p| p.starts_with(dir)).map(PathBuf::as_path)
    }
}

fn list(r: &Roots<'_>, home: Option<&Path>) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = common(r).into_iter().map(|(p, _)| p).collect();
    if let Some(g) = r.git {
        paths.extend([g.common.clone(), g.git_dir.clone()]);
        paths.extend(g.gitfile.clone());
    } else {
        paths.push(r.cwd.join(".git"));
    }
    if let Some(h) = home {
        let h = canon(h);
        paths.extend(HOME_NAMES.iter().map(|n| h.join(n)));
    }
    // A protected path reached through a symlink is protected where it leads.
    let mut resolved: Vec<PathBuf> =
        paths.iter().filter_map(|p| crate::gate::canonical(Path::new("/"), p, None).ok()).collect();
    paths.append(&mut resolved);
    paths.sort();
    paths.dedup();
    paths
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_list_covers_the_common_one_git_dirs_and_start_up_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let (work, home, state) = (root.join("work"), root.join("home"), root.join("state"));
        for d in [&work, &home, &state] {
            std::fs::create_dir_all(d).unwrap();
        }
        let r = Roots { cwd: work.clone(), state_dir: state.clone(), ..Roots::default() };
        let p = Protected::new(&r, Some(&home));
        for hit in [
            state.join("herd.db"),
            work.join(".herd/config.yml"),
            work.join(".claude/settings.json"),
            work.join(".mcp.json"),
            work.join(".git/hooks/pre-commit"),
            home.join(".bashrc"),
            home.join(".ssh/authorized_keys"),
            home.join(".claude/settings.json"),
        ] {
            assert!(p.covering(&hit).is_some(), "{} is not protected", hit.display());
        }
        for miss in [work.join("src/main.rs"), work.join(".herdsman"), home.join("notes.txt")] {
            assert_eq!(p.covering(&miss), None, "{} is protected", miss.display());
        }
    }
}
