//! One run's sandbox: which paths it may write, which stay read-only inside those (with empty
//! placeholder directories where a protected path does not exist yet), and the bwrap argv.

use std::fs::File;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use herd_backends::Invocation;

use crate::workspace::refs::Layout;

/// What one mount does, in the order mounts of the same depth are made (later wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MountKind {
    /// An empty, private tmpfs (`/tmp`, the person's runtime dir).
    Tmpfs,
    /// Seen read-only again under a tmpfs (HOME, the binaries, when they live in /tmp).
    Visible,
    /// Writable.
    Writable,
    /// Read-only inside a writable area.
    Protected,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub path: PathBuf,
    pub kind: MountKind,
}

/// Everything the bwrap command line needs (pure data; see [`confine`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPlan {
    pub bwrap: PathBuf,
    /// The herd binary, run as the sandbox's pid 1 ([`super::INIT_ARG`]).
    pub init: PathBuf,
    pub cwd: PathBuf,
    pub mounts: Vec<Mount>,
    /// Point `TMPDIR` at the private `/tmp` (the one outside is not writable in here).
    pub tmpdir: bool,
}

impl SandboxPlan {
    /// The writable paths, for the run's record.
    pub fn writable(&self) -> Vec<String> {
        self.mounts
            .iter()
            .filter(|m| m.kind == MountKind::Writable)
            .map(|m| m.path.display().to_string())
            .collect()
    }
}

/// `inv` run inside the sandbox `plan` describes: bwrap with the whole system read-only, a
/// private /tmp, /dev and /proc, its own pid namespace and session, no capabilities, then the
/// mounts (shallowest first; at one depth tmpfs, visible, writable, protected — so a protected
/// path inside a writable one stays read-only), and herd's init as pid 1 running `inv`.
pub fn confine(inv: Invocation, plan: &SandboxPlan) -> Invocation {
    let mut mounts = plan.mounts.clone();
    mounts.sort_by(|a, b| {
        (a.path.components().count(), a.kind, &a.path).cmp(&(
            b.path.components().count(),
            b.kind,
            &b.path,
        ))
    });
    mounts.dedup();
    let mut args: Vec<String> = [
        "--die-with-parent",
        "--unshare-pid",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
    ]
    .map(String::from)
    .into();
    for m in &mounts {
        let p = m.path.display().to_string();
        match m.kind {
            MountKind::Tmpfs => args.extend(["--tmpfs".into(), p]),
            MountKind::Visible | MountKind::Protected => {
                args.extend(["--ro-bind".into(), p.clone(), p]);
            }
            MountKind::Writable => args.extend(["--bind".into(), p.clone(), p]),
        }
    }
    args.extend(["--chdir".into(), plan.cwd.display().to_string()]);
    if plan.tmpdir {
        args.extend(["--setenv", "TMPDIR", "/tmp"].map(String::from));
    }
    args.extend(["--as-pid-1".into(), "--".into(), plan.init.display().to_string()]);
    args.push(super::INIT_ARG.into());
    args.push(inv.program.display().to_string());
    args.extend(inv.args);
    Invocation { program: plan.bwrap.clone(), args }
}

/// What a run's sandbox is made from.
#[derive(Debug, Clone)]
pub struct Inputs<'a> {
    pub bwrap: &'a Path,
    pub init: &'a Path,
    pub program: &'a Path,
    pub cwd: &'a Path,
    /// An isolated run's worktree (writable as a whole; else the cwd is).
    pub worktree: Option<&'a Path>,
    pub git: Option<&'a Layout>,
    /// HOME as the agent gets it.
    pub home: Option<&'a Path>,
    /// The CLI's own state directories (claude `~/.claude`, codex `$CODEX_HOME`), writable.
    pub cli_state: &'a [PathBuf],
    /// What configures the CLI in those directories (read-only), each with whether it gets a
    /// placeholder while missing.
    pub cli_protected: &'a [(&'a str, bool)],
    /// Whether the agent may write its working directory (and, for a worktree, the repository's
    /// git objects and refs); else it only reads them.
    pub workspace_writable: bool,
    /// herd's state directory.
    pub state_dir: &'a Path,
    /// More paths never to make writable (the project's `.herd/`).
    pub protect: &'a [PathBuf],
    /// herd's own user config (`$XDG_CONFIG_HOME/herd`).
    pub user_config: Option<PathBuf>,
    /// `TMPDIR` in the agent's environment.
    pub tmpdir: Option<&'a str>,
    pub uid: u32,
    /// Files herd wrote for the CLI to read (gemini's policy): seen, read-only.
    pub run_files: &'a [PathBuf],
}

/// Build the plan for one run: creates the CLI state directories the agent must be able to
/// write (as the CLI itself would) and placeholder directories for protected paths that do not
/// exist yet. The placeholders are removed when the returned [`Placeholders`] is dropped.
pub fn build(i: &Inputs<'_>) -> Result<(SandboxPlan, Placeholders), String> {
    let canon = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let cwd = canon(i.cwd);
    let mut mounts: Vec<Mount> = Vec::new();
    let mut add = |path: PathBuf, kind| mounts.push(Mount { path, kind });
    add("/tmp".into(), MountKind::Tmpfs);
    let runtime = PathBuf::from(format!("/run/user/{}", i.uid));
    if runtime.is_dir() {
        add(runtime, MountKind::Tmpfs);
    }
    let home = i.home.filter(|h| h.is_dir()).map(canon);
    // What lives in /tmp and must be seen again over the private one.
    // A workspace the agent may only read is not bound writable below: it is seen again.
    let workspace = i.worktree.map_or_else(|| cwd.clone(), canon);
    let read_only = (!i.workspace_writable).then(|| {
        let git = i.git.map(|g| [g.common.clone(), g.git_dir.clone()]);
        std::iter::once(workspace.clone()).chain(git.into_iter().flatten())
    });
    let always = [home.clone(), Some(canon(i.init))];
    let files = i.run_files.iter().map(|f| canon(f));
    let seen = always.into_iter().flatten().chain(program_paths(i.program));
    for p in seen.chain(read_only.into_iter().flatten()).chain(files) {
        if p.starts_with("/tmp") {
            add(p, MountKind::Visible);
        }
    }

    // Writable: the run's directory (an isolated run: its whole worktree), the repository's git
    // dir (objects and refs, to commit), the CLI's state. A run whose CLI may only read its
    // workspace (codex mapped to read-only) gets the CLI's state alone.
    let mut writable = Vec::new();
    if i.workspace_writable {
        writable.push(workspace);
        if let Some(g) = i.git {
            writable.push(g.common.clone());
            if !g.git_dir.starts_with(&g.common) {
                writable.push(g.git_dir.clone());
            }
        }
    }
    let mut cli_dirs = Vec::new();
    for dir in i.cli_state {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {} for the agent: {e}", dir.display()))?;
        cli_dirs.push(canon(dir));
    }
    writable.extend(cli_dirs.iter().cloned());
    writable.sort();
    writable.dedup();
    let inside = |p: &Path| writable.iter().any(|w| p.starts_with(w));

    // Protected: (path, may get a placeholder when missing).
    let roots = crate::protected::Roots {
        cwd: cwd.clone(),
        worktree: i.worktree.map(Path::to_path_buf),
        git: i.git,
        state_dir: i.state_dir.to_path_buf(),
        protect: i.protect,
        user_config: i.user_config.clone(),
    };
    let mut protected = crate::protected::common(&roots);
    if let Some(h) = &home {
        // A working directory that holds HOME does not make HOME writable: start-up files,
        // ~/.ssh, ~/.gitconfig, ~/.claude.json stay as they are (the CLI state below is bound
        // writable again, deeper).
        protected.push((h.clone(), false));
    }
    for c in &cli_dirs {
        for (name, placeholder) in i.cli_protected {
            protected.push((c.join(name), *placeholder));
        }
    }

    // A path is writable in the sandbox when the deepest mount above it is a writable one: a
    // protected path under another protected one (a run in HOME: its `.mcp.json`) needs nothing.
    let existing: Vec<PathBuf> = protected
        .iter()
        .map(|(p, _)| p)
        .filter(|p| p.symlink_metadata().is_ok_and(|m| !m.file_type().is_symlink()))
        .filter(|p| !cli_dirs.contains(p))
        .cloned()
        .collect();
    let depth = |p: &Path| p.components().count();
    let writable_at = |p: &Path| {
        let w = writable.iter().filter(|w| p.starts_with(w)).map(|w| depth(w)).max();
        let q = existing.iter().filter(|q| p.starts_with(q) && *q != p).map(|q| depth(q)).max();
        w.is_some_and(|w| q.is_none_or(|q| w > q))
    };
    let mut holders = Placeholders::default();
    for (p, placeholder) in protected {
        // The CLI's own state stays writable even where it is also a project's `.claude` (a
        // run in HOME); what configures the CLI in it is protected by name.
        if !writable_at(&p) || cli_dirs.contains(&p) {
            continue;
        }
        match p.symlink_metadata() {
            // A link is followed: its target is protected where it is writable (the link itself
            // sits in a writable directory and can be replaced).
            Ok(m) if m.file_type().is_symlink() => {
                if let Ok(t) = p.canonicalize()
                    && inside(&t)
                {
                    mounts.push(Mount { path: t, kind: MountKind::Protected });
                }
            }
            Ok(m) if is_placeholder(&p, &m) => {
                holders.hold(&p)?;
                mounts.push(Mount { path: p, kind: MountKind::Protected });
            }
            Ok(_) => mounts.push(Mount { path: p, kind: MountKind::Protected }),
            Err(_) if placeholder => {
                holders.make(&p)?;
                mounts.push(Mount { path: p, kind: MountKind::Protected });
            }
            Err(_) => {}
        }
    }
    mounts.extend(writable.into_iter().map(|path| Mount { path, kind: MountKind::Writable }));
    let tmpdir = i.tmpdir.is_some_and(|t| t != "/tmp");
    let plan =
        SandboxPlan { bwrap: i.bwrap.to_path_buf(), init: canon(i.init), cwd, mounts, tmpdir };
    Ok((plan, holders))
}

/// What must be seen for `program` to start: the directory of the path it is started by (often
/// a link, `node_modules/.bin/claude`) and, for an npm package, the outermost `node_modules` it
/// resolves its modules from, else the directory of the file the path leads to.
fn program_paths(program: &Path) -> Vec<PathBuf> {
    let canon = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let target = canon(program);
    let modules = target.ancestors().filter(|a| a.ends_with("node_modules")).last();
    let target_root = modules.or_else(|| target.parent()).map(Path::to_path_buf);
    let started_from = program.parent().map(canon);
    started_from.into_iter().chain(target_root).collect()
}

/// The mode that marks herd's placeholder directories (an empty, read-only directory).
const PLACEHOLDER_MODE: u32 = 0o555;

fn is_placeholder(p: &Path, m: &std::fs::Metadata) -> bool {
    m.is_dir()
        && m.permissions().mode() & 0o7777 == PLACEHOLDER_MODE
        && std::fs::read_dir(p).is_ok_and(|mut d| d.next().is_none())
}

/// Empty directories standing where protected paths did not exist, so they could be bound
/// read-only (an agent must not create `.claude/settings.json` or `.git/hooks` either). Empty
/// directories: to claude (measured, 2.1.197) and git an empty directory is no configuration, and
/// git does not list it. Each run holds a shared lock on those it uses; when it ends, it removes
/// them if no other run (in any herd process) holds one, and only while they are empty.
#[derive(Debug, Default)]
pub struct Placeholders {
    held: Vec<(PathBuf, File)>,
}

impl Placeholders {
    /// The placeholder paths this run holds.
    pub fn paths(&self) -> Vec<&Path> {
        self.held.iter().map(|(p, _)| p.as_path()).collect()
    }

    fn make(&mut self, p: &Path) -> Result<(), String> {
        match std::fs::create_dir(p) {
            Ok(()) => {
                let _ =
                    std::fs::set_permissions(p, std::fs::Permissions::from_mode(PLACEHOLDER_MODE));
            }
            // Another run made it meanwhile: use it.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(format!(
                    "cannot make a placeholder for protected {}: {e}",
                    p.display()
                ));
            }
        }
        self.hold(p)
    }

    /// Take a shared lock on `p`; if it was removed meanwhile (a run ending), make it again.
    fn hold(&mut self, p: &Path) -> Result<(), String> {
        for _ in 0..5 {
            let Ok(f) = File::open(p) else {
                let _ = std::fs::create_dir(p).and_then(|()| {
                    std::fs::set_permissions(p, std::fs::Permissions::from_mode(PLACEHOLDER_MODE))
                });
                continue;
            };
            if f.lock_shared().is_err() {
                continue;
            }
            let same = match (f.metadata(), std::fs::metadata(p)) {
                (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
                _ => false,
            };
            if same {
                self.held.push((p.to_path_buf(), f));
                return Ok(());
            }
        }
        Err(format!("cannot hold a placeholder for protected {}", p.display()))
    }
}

impl Drop for Placeholders {
    fn drop(&mut self) {
        for (p, f) in self.held.drain(..).rev() {
            // Only the last holder removes it, and `remove_dir` only takes an empty directory.
            if f.try_lock().is_ok() {
                let _ = std::fs::remove_dir(&p);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inv() -> Invocation {
        Invocation { program: "/usr/bin/claude".into(), args: vec!["-p".into(), "a b".into()] }
    }

    fn plan(mounts: Vec<Mount>) -> SandboxPlan {
        SandboxPlan {
            bwrap: "/usr/bin/bwrap".into(),
            init: "/opt/herd".into(),
            cwd: "/w/repo".into(),
            mounts,
            tmpdir: true,
        }
    }

    fn m(path: &str, kind: MountKind) -> Mount {
        Mount { path: path.into(), kind }
    }

    #[test]
    fn the_argv_is_read_only_root_then_mounts_by_depth_then_init_and_the_agent() {
        let p = plan(vec![
            m("/w/repo/.herd", MountKind::Protected),
            m("/w/repo", MountKind::Writable),
            m("/tmp", MountKind::Tmpfs),
            m("/home/u", MountKind::Protected),
            m("/home/u/.claude", MountKind::Writable),
            m("/home/u/.claude/settings.json", MountKind::Protected),
            m("/home/u", MountKind::Writable),
            m("/tmp/h", MountKind::Visible),
            m("/w/repo", MountKind::Writable),
        ]);
        let out = confine(inv(), &p);
        assert_eq!(out.program, PathBuf::from("/usr/bin/bwrap"));
        assert_eq!(
            out.args.join(" "),
            "--die-with-parent --unshare-pid --new-session --cap-drop ALL --ro-bind / / \
             --dev /dev --proc /proc --tmpfs /tmp --ro-bind /tmp/h /tmp/h \
             --bind /home/u /home/u --bind /w/repo /w/repo --ro-bind /home/u /home/u \
             --bind /home/u/.claude /home/u/.claude --ro-bind /w/repo/.herd /w/repo/.herd \
             --ro-bind /home/u/.claude/settings.json /home/u/.claude/settings.json \
             --chdir /w/repo --setenv TMPDIR /tmp --as-pid-1 -- /opt/herd __sandbox-init \
             /usr/bin/claude -p a b"
        );
        // The agent's arguments stay separate words, whatever they hold.
        assert_eq!(out.args.last().map(String::as_str), Some("a b"));
        let plain = SandboxPlan { tmpdir: false, ..p };
        assert!(!confine(inv(), &plain).args.contains(&"--setenv".to_owned()));
    }

    fn git(dir: &Path, args: &[&str]) {
        let ok = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap();
        assert!(ok.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&ok.stderr));
    }

    /// Whether `p` ends up writable: the last mount bwrap makes over it is a writable one.
    fn writable_in(plan: &SandboxPlan, p: &Path) -> bool {
        let args = confine(inv(), plan).args;
        let mut last = false;
        for w in args.windows(3) {
            if (w[0] == "--bind" || w[0] == "--ro-bind" || w[0] == "--tmpfs")
                && p.starts_with(&w[1])
            {
                last = w[0] == "--bind";
            }
        }
        last
    }

    fn kinds(plan: &SandboxPlan) -> Vec<(String, MountKind)> {
        plan.mounts.iter().map(|m| (m.path.display().to_string(), m.kind)).collect()
    }

    #[test]
    fn a_worktree_run_writes_its_worktree_and_git_objects_but_not_what_runs_code() {
        let t = tempfile::tempdir().unwrap();
        let base = t.path().canonicalize().unwrap();
        let repo = base.join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        std::fs::write(repo.join("f"), "x").unwrap();
        git(&repo, &["add", "f"]);
        git(&repo, &["commit", "-qm", "one"]);
        git(&repo, &["worktree", "add", "-q", "-b", "herd/r/s", "../wt"]);
        git(&repo, &["worktree", "add", "-q", "-b", "other", "../other"]);
        let wt = base.join("wt");
        let home = base.join("home");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(wt.join(".claude")).unwrap();
        let layout = Layout::of(&wt).unwrap();
        assert!(layout.is_linked());
        let state = base.join("state");
        std::fs::create_dir_all(&state).unwrap();
        let i = Inputs {
            bwrap: Path::new("/usr/bin/bwrap"),
            init: Path::new("/bin/true"),
            program: Path::new("/bin/sh"),
            cwd: &wt,
            worktree: Some(&wt),
            git: Some(&layout),
            home: Some(&home),
            cli_state: &[home.join(".claude")],
            cli_protected: herd_backends::claude::PROTECTED_STATE,
            workspace_writable: true,
            state_dir: &state,
            protect: &[repo.join(".herd")],
            user_config: Some(home.join(".config/herd")),
            tmpdir: None,
            uid: u32::MAX,
            run_files: &[],
        };
        let (plan, holders) = build(&i).unwrap();
        let got = kinds(&plan);
        let has = |p: &Path, k: MountKind| got.contains(&(p.display().to_string(), k));
        let common = repo.join(".git");
        assert!(has(&wt, MountKind::Writable), "{got:?}");
        assert!(has(&common, MountKind::Writable), "{got:?}");
        assert!(has(&home.join(".claude"), MountKind::Writable), "{got:?}");
        for p in [
            common.join("config"),
            common.join("hooks"),
            common.join("HEAD"),
            common.join("index"),
            common.join("logs/HEAD"),
            common.join("worktrees/other"),
            common.join("worktrees/wt/commondir"),
            common.join("worktrees/wt/gitdir"),
            wt.join(".git"),
            wt.join(".claude"),
            wt.join(".mcp.json"),
            wt.join(".herd"),
            home.join(".claude/settings.json"),
            home.join(".claude/settings.local.json"),
        ] {
            assert!(has(&p, MountKind::Protected), "{} in {got:?}", p.display());
        }
        for p in [&wt.join("src/a.rs"), &common.join("objects/ab"), &common.join("refs/heads/x")] {
            assert!(writable_in(&plan, p), "{}", p.display());
        }
        for p in [&repo.join("f"), &state.join("herd.db"), &common.join("hooks/pre-commit")] {
            assert!(!writable_in(&plan, p), "{}", p.display());
        }
        // Its own worktree's HEAD and index stay writable; the repository's checkout is not
        // writable at all (so its .herd needs no placeholder); nothing in /tmp is re-exposed.
        assert!(!got.iter().any(|(p, _)| p.ends_with("worktrees/wt") || p.ends_with("wt/HEAD")));
        assert!(!has(&repo.join(".herd"), MountKind::Protected));
        assert!(!repo.join(".herd").exists());
        // Placeholders are empty read-only directories, gone when the run lets go of them.
        let mcp = wt.join(".mcp.json");
        assert!(mcp.is_dir() && holders.paths().contains(&mcp.as_path()));
        assert!(!holders.paths().contains(&wt.join(".claude").as_path()));
        let (_, again) = build(&i).unwrap();
        drop(holders);
        assert!(mcp.is_dir(), "another run still holds it");
        drop(again);
        assert!(!mcp.exists());
        assert!(!home.join(".claude/settings.json").exists());
        assert!(wt.join(".claude").is_dir(), "a real directory is never removed");
    }

    #[test]
    fn an_npm_cli_in_tmp_is_seen_whole_and_by_the_path_it_is_started_by() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        let modules = root.join("tools/node_modules");
        let pkg = modules.join("@scope/cli/bin");
        std::fs::create_dir_all(&pkg).unwrap();
        std::fs::create_dir_all(modules.join(".bin")).unwrap();
        std::fs::create_dir_all(root.join("bin")).unwrap();
        std::fs::write(pkg.join("cli.js"), "").unwrap();
        std::os::unix::fs::symlink("../@scope/cli/bin/cli.js", modules.join(".bin/cli")).unwrap();
        std::os::unix::fs::symlink(modules.join(".bin/cli"), root.join("bin/cli")).unwrap();
        // Started through a link outside the package: its directory and all of node_modules.
        assert_eq!(program_paths(&root.join("bin/cli")), [root.join("bin"), modules.clone()]);
        assert_eq!(program_paths(&modules.join(".bin/cli")), [modules.join(".bin"), modules]);
        // A plain binary: its directory.
        std::fs::write(root.join("bin/plain"), "").unwrap();
        assert_eq!(program_paths(&root.join("bin/plain")), [root.join("bin"), root.join("bin")]);
    }

    #[test]
    fn a_run_in_home_cannot_write_home_and_tmp_paths_are_seen_again() {
        let t = tempfile::tempdir().unwrap();
        let home = t.path().canonicalize().unwrap();
        let state = home.join("state");
        std::fs::create_dir_all(&state).unwrap();
        let i = Inputs {
            bwrap: Path::new("/usr/bin/bwrap"),
            init: Path::new("/bin/true"),
            program: Path::new("/bin/sh"),
            cwd: &home,
            worktree: None,
            git: None,
            home: Some(&home),
            cli_state: &[home.join(".claude")],
            cli_protected: herd_backends::claude::PROTECTED_STATE,
            workspace_writable: true,
            state_dir: &state,
            protect: &[],
            user_config: None,
            tmpdir: Some("/var/tmp/x"),
            uid: u32::MAX,
            run_files: &[],
        };
        let (plan, _holders) = build(&i).unwrap();
        let got = kinds(&plan);
        let s = |p: &Path| p.display().to_string();
        assert!(got.contains(&(s(&home), MountKind::Writable)));
        assert!(got.contains(&(s(&home), MountKind::Protected)));
        assert!(got.contains(&(s(&home.join(".claude")), MountKind::Writable)));
        assert!(!got.contains(&(s(&home.join(".claude")), MountKind::Protected)), "{got:?}");
        assert!(got.contains(&(s(&home.join(".claude/settings.json")), MountKind::Protected)));
        for p in [&state, &home, &home.join(".bashrc"), &home.join(".claude/settings.json")] {
            assert!(!writable_in(&plan, p), "{} in {got:?}", p.display());
        }
        assert!(writable_in(&plan, &home.join(".claude/projects")));
        if home.starts_with("/tmp") {
            assert!(got.contains(&(s(&home), MountKind::Visible)), "{got:?}");
        }
        assert!(plan.tmpdir);
        // Nothing is made in HOME but the CLI's state and what protects it.
        assert!(!got.iter().any(|(p, _)| p.ends_with(".mcp.json") || p.ends_with(".herd")));
        assert!(!home.join(".mcp.json").exists());
        // In bwrap's order HOME ends up read-only and ~/.claude writable.
        let args = confine(inv(), &plan).args.join(" ");
        let ro = args.rfind(&format!("--ro-bind {0} {0}", s(&home))).unwrap();
        let rw = args.find(&format!("--bind {0} {0}", s(&home))).unwrap();
        let claude = args.find(&format!("--bind {0} {0}", s(&home.join(".claude")))).unwrap();
        assert!(rw < ro && ro < claude, "{args}");
    }

    #[test]
    fn a_read_only_workspace_is_seen_but_not_written() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        let (work, home, state) = (root.join("work"), root.join("home"), root.join("state"));
        for d in [&work, &home.join(".codex"), &state] {
            std::fs::create_dir_all(d).unwrap();
        }
        // codex reads a directory where its config should be as an error: an existing config
        // is protected, a missing one gets no placeholder.
        std::fs::write(home.join(".codex/config.toml"), "").unwrap();
        let i = Inputs {
            bwrap: Path::new("/usr/bin/bwrap"),
            init: Path::new("/bin/true"),
            program: Path::new("/bin/sh"),
            cwd: &work,
            worktree: None,
            git: None,
            home: Some(&home),
            cli_state: &[home.join(".codex")],
            cli_protected: herd_backends::codex::PROTECTED_STATE,
            workspace_writable: false,
            state_dir: &state,
            protect: &[],
            user_config: None,
            tmpdir: None,
            uid: u32::MAX,
            run_files: &[state.join("run.gemini-policy.toml")],
        };
        let (plan, _holders) = build(&i).unwrap();
        assert!(!writable_in(&plan, &work.join("a.txt")), "{:?}", kinds(&plan));
        assert!(writable_in(&plan, &home.join(".codex/sessions")));
        assert!(!writable_in(&plan, &home.join(".codex/config.toml")));
        // Under /tmp (bwrap's private one) it is bound again, read-only, so the run can start;
        // so are the files herd wrote for the CLI.
        for p in [&work, &state.join("run.gemini-policy.toml")] {
            let s = p.display().to_string();
            assert_eq!(
                kinds(&plan).contains(&(s, MountKind::Visible)),
                p.starts_with("/tmp"),
                "{:?}",
                kinds(&plan)
            );
        }
    }
}
