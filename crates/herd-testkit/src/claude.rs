//! Running the real `claude` CLI against the mock: finding the binary and the environment that
//! keeps it offline, fast and isolated.

use std::path::{Path, PathBuf};

/// The environment for a `claude` child started with `env_clear()`: the mock as API endpoint,
/// a fake key, no non-essential traffic, one retry, `home` as `HOME`, and the parent's `PATH`.
///
/// `SHELL` is left out on purpose: claude finds bash on `PATH` without it, and the host's shell
/// would make runs depend on the machine. Also not included: `IS_SANDBOX=1`, which
/// `--dangerously-skip-permissions` / `--permission-mode bypassPermissions` need as root.
pub fn claude_env(mock: &crate::MockServer, home: &Path) -> Vec<(String, String)> {
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".to_owned());
    [
        ("ANTHROPIC_BASE_URL", mock.base_url()),
        ("ANTHROPIC_API_KEY", "sk-mock".to_owned()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
        ("DISABLE_AUTOUPDATER", "1".to_owned()),
        ("DISABLE_TELEMETRY", "1".to_owned()),
        ("DISABLE_ERROR_REPORTING", "1".to_owned()),
        ("CLAUDE_CODE_MAX_RETRIES", "1".to_owned()),
        ("HOME", home.display().to_string()),
        ("PATH", path),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// The `claude` binary to test with: `$HERD_CLAUDE_BIN` if set, else the workspace's
/// `.tools/node_modules/.bin/claude` if present, else `claude` on `PATH`.
pub fn claude_bin() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("HERD_CLAUDE_BIN").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(bin));
    }
    // crates/herd-testkit -> the workspace root.
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    if let Some(workspace) = manifest_dir.ancestors().nth(2) {
        let local = workspace.join(".tools/node_modules/.bin/claude");
        if is_executable(&local) {
            return Some(local);
        }
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join("claude")).find(|p| is_executable(p))
}

/// [`claude_bin`], or `None` after printing a loud skip notice.
///
/// # Panics
/// When no binary is found and `HERD_REQUIRE_REAL_CLIS=1`.
pub fn require_claude() -> Option<PathBuf> {
    let found = claude_bin();
    if found.is_none() {
        if std::env::var("HERD_REQUIRE_REAL_CLIS").is_ok_and(|v| v == "1") {
            panic!(
                "HERD_REQUIRE_REAL_CLIS=1 but no claude binary was found \
                 (set HERD_CLAUDE_BIN, install into <workspace>/.tools, or put claude on PATH)"
            );
        }
        eprintln!(
            "=== SKIPPED: claude not installed (set HERD_CLAUDE_BIN or put claude on PATH) ==="
        );
    }
    found
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
