//! The project's `.herd/config.yml`: the default agent CLI, permission rules every run starts
//! from, how long a call waits for a person, lifecycle hooks, the sandbox and whether the agent
//! CLIs load the repository's own settings. Errors name file and field.

use std::path::{Path, PathBuf};

use herd_core::permission::{HookSpecs, Rule, check_hooks};
use herd_core::plan::parse_duration;
use serde::Deserialize;

use crate::gate::{DEFAULT_HOOK_TIMEOUT, HookDef, HookEvent, Permissions};
use crate::sandbox::{Confinement, SandboxMode};

/// `.herd/config.yml` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectConfig {
    /// The agent CLI used when neither `--cli` nor an agent says.
    pub default_cli: Option<String>,
    #[serde(default)]
    pub permissions: PermissionsConfig,
    /// Hooks by event: `PreToolUse`, `PostToolUse`, `SubagentStart`, `SubagentStop`.
    #[serde(default)]
    pub hooks: HookSpecs,
    /// The filesystem sandbox: `auto` (default: where the host has bubblewrap), `required`,
    /// `off`.
    #[serde(default)]
    pub sandbox: SandboxMode,
    /// Let the agent CLIs load the repository's own settings (claude: `.claude/settings*.json`,
    /// `.mcp.json`). Off: a repository's hooks and permission rules do not run on `herd task`.
    #[serde(default)]
    pub trust_project_settings: bool,
    /// Where this file's project is (its `.herd/` is never writable to an agent).
    #[serde(skip)]
    pub root: Option<PathBuf>,
}

/// The `permissions:` section.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PermissionsConfig {
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
    pub deny: Vec<String>,
    #[serde(default)]
    pub ask: Vec<String>,
    /// How long a call waits for a person, e.g. `2m` [default: 2m].
    pub ask_timeout: Option<String>,
}

/// A config file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {message}")]
pub struct ConfigError {
    pub file: String,
    pub message: String,
}

/// Where the config lives under a project root.
pub fn config_path(root: &Path) -> PathBuf {
    root.join(".herd").join("config.yml")
}

/// Read `<root>/.herd/config.yml`; a missing or empty file is the default config.
pub fn load(root: &Path) -> Result<ProjectConfig, ConfigError> {
    let path = config_path(root);
    let err = |message: String| ConfigError { file: path.display().to_string(), message };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(ProjectConfig {
                root: Some(root.to_path_buf()),
                ..ProjectConfig::default()
            });
        }
        Err(e) => return Err(err(e.to_string())),
    };
    if text.trim().is_empty() {
        return Ok(ProjectConfig { root: Some(root.to_path_buf()), ..ProjectConfig::default() });
    }
    let mut cfg: ProjectConfig = serde_saphyr::from_str(&text).map_err(|e| err(e.to_string()))?;
    cfg.root = Some(root.to_path_buf());
    // Check everything now, so a bad rule is reported before any run starts.
    cfg.settings().map_err(err)?;
    Ok(cfg)
}

impl ProjectConfig {
    /// The permissions every run starts from. Errors name the field; `sandbox: required`
    /// where no sandbox is available is one.
    pub fn permissions(&self) -> Result<Permissions, String> {
        let perms = self.settings()?;
        perms.confine.check()?;
        Ok(perms)
    }

    /// [`permissions`](Self::permissions) without asking whether the host has a sandbox.
    fn settings(&self) -> Result<Permissions, String> {
        let p = &self.permissions;
        let rules = |list: &[String], field: &str| -> Result<Vec<Rule>, String> {
            list.iter()
                .enumerate()
                .map(|(i, r)| Rule::parse(r).map_err(|e| format!("permissions.{field}[{i}]: {e}")))
                .collect()
        };
        let mut perms = Permissions::default();
        perms.policy.allow = rules(&p.allow, "allow")?;
        perms.policy.deny = rules(&p.deny, "deny")?;
        perms.policy.ask = rules(&p.ask, "ask")?;
        if let Some(t) = &p.ask_timeout {
            perms.ask_timeout =
                parse_duration(t).map_err(|e| format!("permissions.ask_timeout: {e}"))?;
        }
        perms.hooks = hook_defs(&self.hooks)?;
        perms.confine = Confinement {
            mode: self.sandbox,
            trust_project_settings: self.trust_project_settings,
            protect: self.root.iter().map(|r| r.join(".herd")).collect(),
        };
        Ok(perms)
    }
}

/// Hooks as written (config or agent definition) → hooks to run; errors name the field.
pub fn hook_defs(hooks: &HookSpecs) -> Result<Vec<HookDef>, String> {
    check_hooks(hooks).map_err(|(field, msg)| format!("{field}: {msg}"))?;
    let mut defs = Vec::new();
    for (event, list) in hooks {
        let event = match event.as_str() {
            "PreToolUse" => HookEvent::PreToolUse,
            "PostToolUse" => HookEvent::PostToolUse,
            "SubagentStart" => HookEvent::SubagentStart,
            _ => HookEvent::SubagentStop,
        };
        for h in list {
            // Checked above.
            let timeout = h.timeout.as_deref().and_then(|t| parse_duration(t).ok());
            defs.push(HookDef {
                event,
                matcher: h.matcher.clone(),
                command: h.command.clone(),
                timeout: timeout.unwrap_or(DEFAULT_HOOK_TIMEOUT),
            });
        }
    }
    Ok(defs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> (tempfile::TempDir, Result<ProjectConfig, ConfigError>) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".herd")).unwrap();
        std::fs::write(config_path(dir.path()), text).unwrap();
        let r = load(dir.path());
        (dir, r)
    }

    #[test]
    fn full_config_and_errors_that_name_the_field() {
        let (_d, cfg) = write(
            "default_cli: claude\npermissions:\n  allow: ['Bash(cargo *)']\n  deny: [Bash(rm *)]\n  \
             ask_timeout: 30s\nhooks:\n  PreToolUse:\n    - matcher: Bash\n      command: ./check.sh\n      \
             timeout: 5s\n",
        );
        let p = cfg.unwrap().permissions().unwrap();
        assert_eq!(p.policy.allow.len(), 1);
        assert_eq!(p.ask_timeout.as_secs(), 30);
        assert_eq!(p.hooks[0].event, HookEvent::PreToolUse);
        assert_eq!(p.hooks[0].timeout.as_secs(), 5);

        let (_d, e) = write("permissions:\n  deny: ['Bash(rm *']\n");
        let e = e.unwrap_err().to_string();
        assert!(e.contains("config.yml") && e.contains("permissions.deny[0]"), "{e}");
        let (_d, e) = write("hooks:\n  PreTool:\n    - command: x\n");
        assert!(e.unwrap_err().to_string().contains("hooks.PreTool"));
        let (_d, e) = write("permisions: {}\n");
        assert!(e.unwrap_err().to_string().contains("permisions"));
        let (d, ok) = write("");
        assert!(ok.is_ok());
        assert!(load(&d.path().join("nowhere")).is_ok());
    }

    #[test]
    fn sandbox_and_project_settings_keys() {
        let (d, cfg) = write("sandbox: off\ntrust_project_settings: true\n");
        let p = cfg.unwrap().permissions().unwrap();
        assert_eq!(p.confine.mode, SandboxMode::Off);
        assert!(p.confine.trust_project_settings);
        assert_eq!(p.confine.protect, [d.path().join(".herd")]);
        let (_d, cfg) = write("");
        let p = cfg.unwrap().permissions().unwrap();
        assert_eq!((p.confine.mode, p.confine.trust_project_settings), (SandboxMode::Auto, false));
        let (_d, e) = write("sandbox: sometimes\n");
        let e = e.unwrap_err().to_string();
        assert!(e.contains("config.yml") && e.contains("sometimes"), "{e}");
    }
}
