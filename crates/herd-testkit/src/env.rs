//! The environment that keeps each real agent CLI offline, fast and isolated against the mock:
//! variables for a child started with `env_clear()`, plus the config files codex and gemini need.

use std::path::Path;

use serde_json::json;

use crate::MockServer;

fn path_var() -> String {
    std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".to_owned())
}

fn pairs<const N: usize>(vars: [(&str, String); N]) -> Vec<(String, String)> {
    vars.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

fn write(path: &Path, contents: &str) {
    if let Some(dir) = path.parent()
        && let Err(e) = std::fs::create_dir_all(dir)
    {
        panic!("herd-testkit: cannot create {}: {e}", dir.display());
    }
    if let Err(e) = std::fs::write(path, contents) {
        panic!("herd-testkit: cannot write {}: {e}", path.display());
    }
}

/// The environment for a `claude` child started with `env_clear()`: the mock as API endpoint,
/// a fake key, no non-essential traffic, one retry, `home` as `HOME`, and the parent's `PATH`.
///
/// `SHELL` is left out on purpose: claude finds bash on `PATH` without it, and the host's shell
/// would make runs depend on the machine. Also not included: `IS_SANDBOX=1`, which
/// `--dangerously-skip-permissions` / `--permission-mode bypassPermissions` need as root.
pub fn claude_env(mock: &MockServer, home: &Path) -> Vec<(String, String)> {
    pairs([
        ("ANTHROPIC_BASE_URL", mock.base_url()),
        ("ANTHROPIC_API_KEY", "sk-mock".to_owned()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
        ("DISABLE_AUTOUPDATER", "1".to_owned()),
        ("DISABLE_TELEMETRY", "1".to_owned()),
        ("DISABLE_ERROR_REPORTING", "1".to_owned()),
        ("CLAUDE_CODE_MAX_RETRIES", "1".to_owned()),
        ("HOME", home.display().to_string()),
        ("PATH", path_var()),
    ])
}

/// [`claude_env`] for `claude-code-acp`, after writing `home/.claude.json` as a Claude Code that
/// has started once leaves it (`firstStartTime`, `userID`, `opusProMigrationComplete`).
///
/// The claude that `@zed-industries/claude-code-acp` 0.16.2 bundles (claude-agent-sdk 0.2.44)
/// saves those keys on its first start and dies when it cannot (its `session/new` then fails
/// `Query closed before response received`): inside herd's sandbox HOME is read-only and
/// `~/.claude.json` is rewritten by a file renamed over it, so a person who never ran claude
/// could not run it there (measured: any of the three keys missing fails it).
///
/// # Panics
/// When the file cannot be written.
pub fn claude_code_acp_env(mock: &MockServer, home: &Path) -> Vec<(String, String)> {
    let state = json!({
        "firstStartTime": "2026-01-01T00:00:00.000Z",
        "userID": "0000000000000000000000000000000000000000000000000000000000000000",
        "opusProMigrationComplete": true,
    });
    write(&home.join(".claude.json"), &format!("{state:#}\n"));
    claude_env(mock, home)
}

/// The model provider id the codex config defines for the mock.
pub const CODEX_MOCK_PROVIDER: &str = "herd_mock";

/// The model codex runs with against the mock: one codex knows (no fallback-metadata warning,
/// `apply_patch` offered), protocols.md §2.0.
pub const CODEX_MOCK_MODEL: &str = "gpt-5.5";

/// The environment for `codex` / `codex-acp` started with `env_clear()`, after writing
/// `home/.codex/config.toml`: a custom `model_providers.herd_mock` (Responses API at the mock,
/// key from `OPENAI_API_KEY`, no request or stream retries), no update check, no analytics.
/// codex ignores `OPENAI_BASE_URL` (protocols.md §2.0); it is set anyway, for herd, whose
/// argv builder turns it into `-c model_providers…` overrides.
///
/// `TMPDIR` is `home/tmp`: codex 0.169.0 refuses to create its helper binaries (the
/// `codex-linux-sandbox` alias its bubblewrap sandbox execs) when `CODEX_HOME` lies under the
/// temporary directory, and then every sandboxed command fails with `bwrap: execvp
/// codex-linux-sandbox: No such file or directory` (measured; test homes live under /tmp).
///
/// # Panics
/// When the config file cannot be written.
pub fn codex_env(mock: &MockServer, home: &Path) -> Vec<(String, String)> {
    let codex_home = home.join(".codex");
    let tmp = home.join("tmp");
    if let Err(e) = std::fs::create_dir_all(&tmp) {
        panic!("herd-testkit: cannot create {}: {e}", tmp.display());
    }
    let base_url = format!("{}/v1", mock.base_url());
    write(
        &codex_home.join("config.toml"),
        &format!(
            "# Written by herd-testkit: codex against the local mock, offline.\n\
             model = \"{CODEX_MOCK_MODEL}\"\n\
             model_provider = \"{CODEX_MOCK_PROVIDER}\"\n\
             check_for_update_on_startup = false\n\
             \n\
             [model_providers.{CODEX_MOCK_PROVIDER}]\n\
             name = \"herd mock\"\n\
             base_url = \"{base_url}\"\n\
             wire_api = \"responses\"\n\
             env_key = \"OPENAI_API_KEY\"\n\
             request_max_retries = 0\n\
             stream_max_retries = 0\n\
             \n\
             [analytics]\n\
             enabled = false\n"
        ),
    );
    pairs([
        ("CODEX_HOME", codex_home.display().to_string()),
        ("OPENAI_API_KEY", "sk-mock".to_owned()),
        ("OPENAI_BASE_URL", base_url),
        ("TMPDIR", tmp.display().to_string()),
        ("HOME", home.display().to_string()),
        ("PATH", path_var()),
    ])
}

/// The environment for `gemini` (also `--acp`) started with `env_clear()`, after writing
/// `home/.gemini/settings.json`: API-key auth (a base URL alone selects the `gateway` auth that
/// headless runs reject, rc 41), no statistics, telemetry or update checks, one attempt per
/// request. The workspace is trusted and gemini does not re-spawn itself (so signals reach it),
/// protocols.md §3.0 / §3.5. `TMPDIR` is `home/tmp`, where gemini writes its error reports.
///
/// # Panics
/// When the settings file cannot be written.
pub fn gemini_env(mock: &MockServer, home: &Path) -> Vec<(String, String)> {
    let settings = json!({
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": false},
        "telemetry": {"enabled": false},
        "general": {"disableAutoUpdate": true, "disableUpdateNag": true, "maxAttempts": 1},
    });
    write(&home.join(".gemini/settings.json"), &format!("{settings:#}\n"));
    let tmp = home.join("tmp");
    if let Err(e) = std::fs::create_dir_all(&tmp) {
        panic!("herd-testkit: cannot create {}: {e}", tmp.display());
    }
    pairs([
        ("GOOGLE_GEMINI_BASE_URL", mock.base_url()),
        ("GEMINI_API_KEY", "mock-key".to_owned()),
        ("GEMINI_CLI_TRUST_WORKSPACE", "true".to_owned()),
        ("GEMINI_CLI_NO_RELAUNCH", "true".to_owned()),
        ("TMPDIR", tmp.display().to_string()),
        ("HOME", home.display().to_string()),
        ("PATH", path_var()),
    ])
}
