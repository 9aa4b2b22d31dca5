//! Finding the real agent CLIs for tests: `HERD_<NAME>_BIN`, else the workspace's pinned
//! `.tools/`, else PATH; a test that needs one fails when it is missing unless told to skip.

use std::path::{Path, PathBuf};

/// The pins `.ci/run` installs (binary, npm package, version per line).
const PINS: &str = include_str!("../../../.config/agent-clis.tsv");

/// The agent CLIs herd's tests run for real.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentCli {
    Claude,
    Codex,
    Gemini,
    /// `@zed-industries/codex-acp`: an ACP agent built on codex.
    CodexAcp,
    /// `@zed-industries/claude-code-acp`: an ACP agent built on the Claude Agent SDK.
    ClaudeCodeAcp,
}

impl AgentCli {
    pub const ALL: [AgentCli; 5] = [
        AgentCli::Claude,
        AgentCli::Codex,
        AgentCli::Gemini,
        AgentCli::CodexAcp,
        AgentCli::ClaudeCodeAcp,
    ];

    /// The executable's name (in `node_modules/.bin/` and on PATH).
    pub const fn binary(self) -> &'static str {
        match self {
            AgentCli::Claude => "claude",
            AgentCli::Codex => "codex",
            AgentCli::Gemini => "gemini",
            AgentCli::CodexAcp => "codex-acp",
            AgentCli::ClaudeCodeAcp => "claude-code-acp",
        }
    }

    /// The variable naming the binary explicitly.
    pub const fn override_var(self) -> &'static str {
        match self {
            AgentCli::Claude => "HERD_CLAUDE_BIN",
            AgentCli::Codex => "HERD_CODEX_BIN",
            AgentCli::Gemini => "HERD_GEMINI_BIN",
            AgentCli::CodexAcp => "HERD_CODEX_ACP_BIN",
            AgentCli::ClaudeCodeAcp => "HERD_CLAUDE_CODE_ACP_BIN",
        }
    }

    /// `(npm package, version)` pinned in `.config/agent-clis.tsv`.
    pub fn pin(self) -> (&'static str, &'static str) {
        PINS.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let mut f = l.split('\t');
                Some((f.next()?, f.next()?, f.next()?))
            })
            .find(|(bin, _, _)| *bin == self.binary())
            .map_or(("?", "?"), |(_, package, version)| (package, version))
    }

    /// The command that installs the pinned version where the tests look first.
    pub fn install_command(self) -> String {
        let (package, version) = self.pin();
        format!("npm install --prefix .tools {package}@{version}   (or: bash .ci/run)")
    }

    /// The binary to test with: `$HERD_<NAME>_BIN` if set, else the workspace's
    /// `.tools/node_modules/.bin/<name>` if present, else `<name>` on PATH.
    pub fn find(self) -> Option<PathBuf> {
        if let Some(bin) = std::env::var_os(self.override_var()).filter(|v| !v.is_empty()) {
            return Some(PathBuf::from(bin));
        }
        let local = tools_bin_dir().join(self.binary());
        if is_executable(&local) {
            return Some(local);
        }
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path).map(|dir| dir.join(self.binary())).find(|p| is_executable(p))
    }

    /// [`Self::find`] for a test that needs the CLI: `None` (after a loud notice) only when
    /// `HERD_SKIP_REAL_CLIS=1`.
    ///
    /// # Panics
    /// When the CLI is missing and skipping was not asked for; the message names the install
    /// command. (`HERD_REQUIRE_REAL_CLIS=1`, the old way to ask for this, is still accepted.)
    pub fn require(self) -> Option<PathBuf> {
        if let Some(found) = self.find() {
            if !is_executable(&found) && found.components().count() > 1 {
                panic!(
                    "{}={} does not name an executable file",
                    self.override_var(),
                    found.display()
                );
            }
            return Some(found);
        }
        let name = self.binary();
        if skip_real_clis() {
            eprintln!("=== SKIPPED: {name} not installed and HERD_SKIP_REAL_CLIS=1 ===");
            return None;
        }
        panic!(
            "the real `{name}` CLI is needed by this test and was not found \
             ({} unset, not in {}, not on PATH). Install it: {} \
             — or set HERD_SKIP_REAL_CLIS=1 to skip the tests that need it",
            self.override_var(),
            tools_bin_dir().display(),
            self.install_command()
        );
    }
}

/// Whether tests needing a missing agent CLI are skipped instead of failing.
pub fn skip_real_clis() -> bool {
    std::env::var("HERD_SKIP_REAL_CLIS").is_ok_and(|v| v == "1")
}

/// `<workspace>/.tools/node_modules/.bin`.
pub fn tools_bin_dir() -> PathBuf {
    // crates/herd-testkit -> the workspace root.
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.ancestors().nth(2).unwrap_or(manifest_dir).join(".tools/node_modules/.bin")
}

/// The `claude` binary, see [`AgentCli::find`].
pub fn claude_bin() -> Option<PathBuf> {
    AgentCli::Claude.find()
}

/// See [`AgentCli::require`].
pub fn require_claude() -> Option<PathBuf> {
    AgentCli::Claude.require()
}

/// The `codex` binary, see [`AgentCli::find`].
pub fn codex_bin() -> Option<PathBuf> {
    AgentCli::Codex.find()
}

/// See [`AgentCli::require`].
pub fn require_codex() -> Option<PathBuf> {
    AgentCli::Codex.require()
}

/// The `gemini` binary, see [`AgentCli::find`].
pub fn gemini_bin() -> Option<PathBuf> {
    AgentCli::Gemini.find()
}

/// See [`AgentCli::require`].
pub fn require_gemini() -> Option<PathBuf> {
    AgentCli::Gemini.require()
}

/// The `codex-acp` binary, see [`AgentCli::find`].
pub fn codex_acp_bin() -> Option<PathBuf> {
    AgentCli::CodexAcp.find()
}

/// See [`AgentCli::require`].
pub fn require_codex_acp() -> Option<PathBuf> {
    AgentCli::CodexAcp.require()
}

/// The `claude-code-acp` binary, see [`AgentCli::find`].
pub fn claude_code_acp_bin() -> Option<PathBuf> {
    AgentCli::ClaudeCodeAcp.find()
}

/// See [`AgentCli::require`].
pub fn require_claude_code_acp() -> Option<PathBuf> {
    AgentCli::ClaudeCodeAcp.require()
}

#[cfg(unix)]
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable(path: &Path) -> bool {
    path.is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cli_has_a_pin() {
        for cli in AgentCli::ALL {
            let (package, version) = cli.pin();
            assert!(package.starts_with('@'), "{cli:?}: {package}");
            assert!(version.split('.').count() == 3, "{cli:?}: {version}");
            assert!(cli.install_command().contains(&format!("{package}@{version}")));
        }
        assert_eq!(AgentCli::Codex.pin(), ("@openai/codex", "0.169.0"));
    }
}
