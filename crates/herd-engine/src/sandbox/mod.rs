//! The filesystem sandbox every agent runs in: the `sandbox:` setting, whether bubblewrap works
//! here (probed once per process), and the decision for one run; the mounts are in [`plan`].
//!
//! With it, the agent and everything it starts see the whole system read-only and can write only
//! its working directory (an isolated run: its worktree, and the repository's git objects and
//! refs), a private `/tmp`, and its CLI's own state; herd's state and config, the CLIs' project
//! settings, git hooks and config, and the person's start-up files stay read-only inside those.

mod init;
pub mod plan;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use herd_backends::{Backend, Invocation};
use serde::{Deserialize, Serialize};

pub use init::init_main;
pub use plan::{Mount, MountKind, Placeholders, SandboxPlan, confine};

use crate::Engine;
use crate::workspace::refs::Layout;

/// The argument that selects the in-sandbox init in the herd binary (`herd __sandbox-init
/// PROGRAM ARGS…`): pid 1 of the agent's pid namespace.
pub const INIT_ARG: &str = "__sandbox-init";

/// The descriptor (its number) on which the init reports how the agent ended; set by the guard.
pub const STATUS_FD_VAR: &str = "HERD_SANDBOX_STATUS_FD";

/// Narrows the configured mode for one herd process (`auto` → `required`); it never widens:
/// an agent can set variables for a herd it starts, and must not switch its sandbox off.
pub const MODE_VAR: &str = "HERD_SANDBOX";

/// The Debian package that has bubblewrap.
pub const PACKAGE: &str = "bubblewrap";

/// `sandbox:` in `.herd/config.yml`. Ordered from the weakest to the strictest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    /// Never: agents write wherever their user can.
    Off,
    /// Use it where the host has it; say so once (and in each run's record) where it does not.
    #[default]
    Auto,
    /// Refuse to start a run without it.
    Required,
}

impl SandboxMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Auto => "auto",
            Self::Required => "required",
        }
    }
}

impl std::str::FromStr for SandboxMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(Self::Off),
            "auto" => Ok(Self::Auto),
            "required" => Ok(Self::Required),
            _ => Err(format!("{s:?}: expected auto, required or off")),
        }
    }
}

/// How a run's processes are confined, from the project's config.
#[derive(Debug, Clone, Default)]
pub struct Confinement {
    pub mode: SandboxMode,
    /// Let the agent CLI load the repository's own settings (`trust_project_settings: true`).
    pub trust_project_settings: bool,
    /// Paths that never become writable, with the others herd always protects: the project's
    /// `.herd/` (its config, and its state by default).
    pub protect: Vec<PathBuf>,
}

impl Confinement {
    /// The mode in force: the configured one, made stricter (never weaker) by `HERD_SANDBOX`.
    pub fn effective_mode(&self) -> Result<SandboxMode, String> {
        match std::env::var(MODE_VAR) {
            Ok(v) if !v.trim().is_empty() => {
                let env: SandboxMode = v.trim().parse().map_err(|e| format!("{MODE_VAR}={e}"))?;
                Ok(self.mode.max(env))
            }
            _ => Ok(self.mode),
        }
    }

    /// What a run gets under this confinement (probing the host on first use).
    pub fn decide(&self) -> Decision {
        let mode = match self.effective_mode() {
            Ok(m) => m,
            Err(e) => return Decision::Refuse(e),
        };
        match (mode, availability()) {
            (SandboxMode::Off, _) => Decision::Unconfined {
                reason: "sandbox: off in .herd/config.yml".into(),
                warn: false,
            },
            (_, Availability::Bwrap(p)) => Decision::Confine(p.clone()),
            (SandboxMode::Auto, Availability::Missing(why)) => {
                Decision::Unconfined { reason: why.clone(), warn: true }
            }
            (SandboxMode::Required, Availability::Missing(why)) => Decision::Refuse(format!(
                "sandbox: required (in .herd/config.yml, or {MODE_VAR}), but no sandbox is \
                 available: {why}. Install the Debian package `{PACKAGE}` (apt-get install \
                 {PACKAGE}), or set `sandbox: auto` to run agents unconfined where it is missing"
            )),
        }
    }

    /// Refuse settings a run cannot start with (required, and no sandbox here).
    pub fn check(&self) -> Result<(), String> {
        match self.decide() {
            Decision::Refuse(why) => Err(why),
            _ => Ok(()),
        }
    }
}

impl Decision {
    /// What the run's stored contract says about its sandbox.
    pub fn record(&self, mode: SandboxMode) -> serde_json::Value {
        match self {
            Self::Confine(_) => serde_json::json!({"mode": mode.as_str(), "mechanism": "bwrap"}),
            Self::Unconfined { reason, .. } | Self::Refuse(reason) => {
                serde_json::json!({"mode": mode.as_str(), "mechanism": null, "reason": reason})
            }
        }
    }
}

/// Say once per herd process (on stderr) that agents run without a sandbox here.
pub(crate) fn warn_once(reason: &str) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        eprintln!(
            "herd: warning: agents run without a filesystem sandbox: {reason} \
             (sandbox: auto in .herd/config.yml; `sandbox: required` refuses to run without one)"
        );
    }
}

/// One run's agent, about to start.
struct RunSetup<'a> {
    pub bwrap: &'a Path,
    /// The herd binary (the sandbox's init).
    pub herd: &'a Path,
    pub backend: &'static dyn Backend,
    pub spec: &'a herd_backends::RunSpec,
    pub cwd: &'a Path,
    pub worktree: Option<&'a Path>,
    pub git: Option<&'a Layout>,
    /// The agent's environment.
    pub env: &'a [(String, String)],
    pub state_dir: &'a Path,
    pub confine: &'a Confinement,
    /// Files herd wrote for the CLI to read (gemini's policy).
    pub run_files: &'a [PathBuf],
}

/// `inv` confined: the bwrap command line, and the placeholders the run holds until it ends.
fn wrap(inv: Invocation, s: &RunSetup<'_>) -> Result<(Invocation, Placeholders), String> {
    let var = |k: &str| s.env.iter().find(|(ek, _)| ek == k).map(|(_, v)| v.as_str());
    let home = var("HOME").map(PathBuf::from);
    // The CLI's state: the directory its variable names (codex `CODEX_HOME`), else its
    // directories under HOME.
    let named = s.backend.state_dir_var(s.spec).and_then(var).filter(|v| !v.is_empty());
    let cli_state: Vec<PathBuf> = match (named, home.as_ref().filter(|h| h.is_dir())) {
        (Some(dir), _) => vec![PathBuf::from(dir)],
        (None, Some(h)) => s.backend.home_state(s.spec).iter().map(|d| h.join(d)).collect(),
        (None, None) => Vec::new(),
    };
    let user_config = crate::protected::user_config();
    let inputs = plan::Inputs {
        bwrap: s.bwrap,
        init: s.herd,
        program: &inv.program,
        cwd: s.cwd,
        worktree: s.worktree,
        git: s.git,
        home: home.as_deref(),
        cli_state: &cli_state,
        cli_protected: s.backend.protected_state(s.spec),
        workspace_writable: s.backend.workspace_writable(s.spec),
        state_dir: s.state_dir,
        protect: &s.confine.protect,
        user_config,
        tmpdir: var("TMPDIR"),
        uid: nix::unistd::getuid().as_raw(),
        run_files: s.run_files,
    };
    let (plan, holders) = plan::build(&inputs)?;
    Ok((confine(inv, &plan), holders))
}

impl Engine {
    /// The command line that starts the agent: `inv` itself, or `inv` inside the sandbox (with
    /// the placeholders the run holds until it ends).
    pub(crate) fn confined(
        &self,
        decision: &Decision,
        inv: herd_backends::Invocation,
        req: &crate::TaskRequest,
        env: &[(String, String)],
        layout: Option<crate::workspace::refs::Layout>,
        run_files: &[PathBuf],
    ) -> Result<(herd_backends::Invocation, Option<Placeholders>), String> {
        let bwrap = match decision {
            Decision::Confine(b) => b,
            Decision::Unconfined { .. } => return Ok((inv, None)),
            Decision::Refuse(why) => return Err(why.clone()),
        };
        let worktree = match &req.workspace {
            crate::workspace::WorkspaceReq::Isolated(spec) => Some(spec.path.as_path()),
            crate::workspace::WorkspaceReq::Shared { .. } => None,
        };
        let setup = RunSetup {
            bwrap,
            herd: &self.guard.program,
            backend: herd_backends::backend(req.backend),
            spec: &req.spec,
            cwd: &req.cwd,
            worktree,
            git: layout.as_ref(),
            env,
            state_dir: &self.paths().root,
            confine: &req.permissions.confine,
            run_files,
        };
        let (inv, holders) =
            wrap(inv, &setup).map_err(|e| format!("cannot set up the sandbox: {e}"))?;
        Ok((inv, Some(holders)))
    }
}

/// The decision for one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Run it under bubblewrap (this binary).
    Confine(PathBuf),
    /// Run it as is; `warn`: say so on stderr (once per process).
    Unconfined { reason: String, warn: bool },
    /// Do not run it.
    Refuse(String),
}

/// Whether this host can confine agents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Availability {
    Bwrap(PathBuf),
    /// Why not (no bwrap on PATH, or it cannot make namespaces here).
    Missing(String),
}

/// The host's answer, probed once per process: `bwrap` on PATH, and a trivial sandbox of the
/// kind herd makes (pid namespace, its own /proc, no capabilities) running `true`.
pub fn availability() -> &'static Availability {
    static PROBED: OnceLock<Availability> = OnceLock::new();
    PROBED.get_or_init(|| probe(std::env::var_os("PATH").as_deref()))
}

fn probe(path: Option<&std::ffi::OsStr>) -> Availability {
    let Some(bwrap) = path
        .into_iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join("bwrap"))
        .find(|p| is_executable(p))
    else {
        return Availability::Missing(format!(
            "bwrap (bubblewrap) is not on PATH (the Debian package `{PACKAGE}` has it)"
        ));
    };
    let truth = ["/usr/bin/true", "/bin/true"].into_iter().find(|p| Path::new(p).exists());
    let Some(truth) = truth else {
        return Availability::Missing("no /usr/bin/true to probe bwrap with".into());
    };
    let child = Command::new(&bwrap)
        .args(["--die-with-parent", "--unshare-pid", "--new-session", "--cap-drop", "ALL"])
        .args(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"])
        .arg(truth)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => return Availability::Missing(format!("{} cannot start: {e}", bwrap.display())),
    };
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if start.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(2));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Availability::Missing(format!(
                    "{} did not finish a probe",
                    bwrap.display()
                ));
            }
        }
    };
    if status.success() {
        return Availability::Bwrap(bwrap);
    }
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    Availability::Missing(format!(
        "{} cannot make a sandbox here ({}): {}",
        bwrap.display(),
        status,
        err.trim()
    ))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_order_from_weakest_to_strictest() {
        assert_eq!("auto".parse::<SandboxMode>(), Ok(SandboxMode::Auto));
        assert!("maybe".parse::<SandboxMode>().unwrap_err().contains("auto, required or off"));
        assert!(SandboxMode::Off < SandboxMode::Auto && SandboxMode::Auto < SandboxMode::Required);
        assert_eq!(SandboxMode::default(), SandboxMode::Auto);
    }

    #[test]
    fn no_bwrap_on_path_is_reported_with_the_package() {
        let dir = tempfile::tempdir().unwrap();
        match probe(Some(dir.path().as_os_str())) {
            Availability::Missing(why) => assert!(why.contains("bubblewrap"), "{why}"),
            other => panic!("{other:?}"),
        }
        // A bwrap that cannot make a sandbox is named with what it said.
        let fake = dir.path().join("bwrap");
        std::fs::write(&fake, "#!/bin/sh\necho 'no namespaces for you' >&2\nexit 1\n").unwrap();
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        match probe(Some(dir.path().as_os_str())) {
            Availability::Missing(why) => assert!(why.contains("no namespaces for you"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
