//! The project's `.herd/config.yml`: the default agent CLI, the limits set once (pool, queue,
//! timeouts, turns), permission rules every run starts from, hooks, the `herd mcp` ceiling, the
//! sandbox and whether agent CLIs load the repository's own settings. Errors name file and field.

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
    /// Agents alive at once (1-20) [default: 5]; a plan's own limit or a flag may lower it.
    pub max_concurrent: Option<u32>,
    /// Tasks that may wait for a place in the pool before one is refused [default: 20].
    pub max_queue: Option<u32>,
    /// A run's time limit when nothing else sets one, e.g. `20m` (1s-120m) [default: 30m].
    pub timeout: Option<String>,
    /// Model turns a run may take when nothing else sets it.
    pub max_turns: Option<u32>,
    /// Children one parent may have running at once [default: 20].
    pub max_per_parent: Option<u32>,
    /// How long a tool call waits for a person before it is denied, e.g. `2m` [default: 2m].
    pub permission_timeout: Option<String>,
    /// How long an ACP agent may take to answer `initialize` and open its session before the
    /// run fails `protocol_error`, e.g. `45s` (1s-10m) [default: 30s].
    pub handshake_timeout: Option<String>,
    /// How much of a run's output is stored (events, transcript, stderr log), e.g. `64MiB`
    /// [default: 64MiB]; past it output is dropped with an `output_limit` event.
    pub max_stored_output: Option<String>,
    /// Where the database is: `sqlite` (the default, `.herd/herd.db`) or a `postgres://…` URL
    /// shared by several machines (`HERD_STORE_URL` and `--store` override it).
    pub store: Option<String>,
    #[serde(default)]
    pub permissions: PermissionsConfig,
    /// Hooks by event: `PreToolUse`, `PostToolUse`, `SubagentStart`, `SubagentStop`.
    #[serde(default)]
    pub hooks: HookSpecs,
    /// What `herd mcp` lets its clients' tasks do: the ceiling a client's own rules narrow.
    #[serde(default)]
    pub mcp: McpConfig,
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

/// The `mcp:` section: the server's policy (a client can only narrow it) and where its tasks
/// may work besides the project.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    /// The only tools a client's tasks may have (empty: any).
    #[serde(default)]
    pub tools: Vec<String>,
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
    pub deny: Vec<String>,
    #[serde(default)]
    pub ask: Vec<String>,
    /// Clients may ask for auto-approve (within its limits) [default: false].
    #[serde(default)]
    pub auto_approve: bool,
    /// Directories besides the project where a client's tasks may work.
    #[serde(default)]
    pub roots: Vec<String>,
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
    /// The older name of the top-level `permission_timeout`.
    pub ask_timeout: Option<String>,
}

/// How much of a run's output is stored when the config does not say.
pub const DEFAULT_MAX_STORED_OUTPUT: u64 = 64 << 20;

/// A size: bytes, or a number with `K`/`KiB`, `M`/`MiB`, `G`/`GiB` (powers of 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("{s:?} is not a size (e.g. 64MiB, 512K, 1G)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        other => return Err(format!("{s:?}: unknown unit {other:?} (use K, M or G)")),
    };
    n.checked_mul(mult).ok_or_else(|| format!("{s:?} is too large"))
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

/// The user's own config, layered under every project's:
/// `$XDG_CONFIG_HOME/herd/config.yml`, else `$HOME/.config/herd/config.yml`.
pub fn user_config_path() -> Option<PathBuf> {
    crate::agents::user_agents_dir().and_then(|a| a.parent().map(|d| d.join("config.yml")))
}

/// The config of the project at `root`: the user's config (see [`user_config_path`]) with the
/// project's `.herd/config.yml` over it. A missing or empty file is no layer.
pub fn load(root: &Path) -> Result<ProjectConfig, ConfigError> {
    load_layered(user_config_path().as_deref(), root)
}

/// [`load`] with the user's config file given (`None`: none).
///
/// Each file is checked on its own first, so an error names the file it is in. Then each key
/// the project's file sets overrides the user's (within `mcp:` and `permissions:`, key by
/// key), except the rule lists (`permissions.allow|deny|ask`) and hooks, which add up: the
/// user's first.
pub fn load_layered(user: Option<&Path>, root: &Path) -> Result<ProjectConfig, ConfigError> {
    let project_path = config_path(root);
    let empty = || ProjectConfig { root: Some(root.to_path_buf()), ..ProjectConfig::default() };
    let project = read_layer(&project_path, root)?;
    let user_path = user.filter(|u| !same_file(u, &project_path));
    let user_layer = match user_path {
        Some(u) => read_layer(u, root)?,
        None => None,
    };
    let ((_, under), (keys, over)) = match (user_layer, project) {
        (None, None) => return Ok(empty()),
        (None, Some((_, cfg))) | (Some((_, cfg)), None) => return Ok(cfg),
        (Some(u), Some(p)) => (u, p),
    };
    let shown = format!(
        "{} (over {})",
        project_path.display(),
        user_path.map(|u| u.display().to_string()).unwrap_or_default()
    );
    let cfg = layer(under, over, &keys);
    validate(&cfg).map_err(|message| ConfigError { file: shown, message })?;
    Ok(cfg)
}

/// `over` (the project's, whose file set the keys in `keys`) laid over `under` (the user's):
/// each key the project sets wins; the rule lists and hooks add up, the user's first.
fn layer(under: ProjectConfig, over: ProjectConfig, keys: &serde_json::Value) -> ProjectConfig {
    let set = |k: &str| keys.get(k).is_some_and(|v| !v.is_null());
    let sub = |section: &str, k: &str| keys[section].get(k).is_some_and(|v| !v.is_null());
    let mut hooks = under.hooks;
    for (event, list) in over.hooks {
        hooks.entry(event).or_default().extend(list);
    }
    let (up, op) = (under.permissions, over.permissions);
    let (um, om) = (under.mcp, over.mcp);
    ProjectConfig {
        default_cli: pick(set("default_cli"), under.default_cli, over.default_cli),
        max_concurrent: pick(set("max_concurrent"), under.max_concurrent, over.max_concurrent),
        max_queue: pick(set("max_queue"), under.max_queue, over.max_queue),
        store: pick(set("store"), under.store, over.store),
        timeout: pick(set("timeout"), under.timeout, over.timeout),
        max_turns: pick(set("max_turns"), under.max_turns, over.max_turns),
        max_per_parent: pick(set("max_per_parent"), under.max_per_parent, over.max_per_parent),
        max_stored_output: pick(
            set("max_stored_output"),
            under.max_stored_output,
            over.max_stored_output,
        ),
        permission_timeout: pick(
            set("permission_timeout"),
            under.permission_timeout,
            over.permission_timeout,
        ),
        handshake_timeout: pick(
            set("handshake_timeout"),
            under.handshake_timeout,
            over.handshake_timeout,
        ),
        permissions: PermissionsConfig {
            allow: [up.allow, op.allow].concat(),
            deny: [up.deny, op.deny].concat(),
            ask: [up.ask, op.ask].concat(),
            ask_timeout: if sub("permissions", "ask_timeout") {
                op.ask_timeout
            } else {
                up.ask_timeout
            },
        },
        hooks,
        mcp: McpConfig {
            tools: pick(sub("mcp", "tools"), um.tools, om.tools),
            allow: pick(sub("mcp", "allow"), um.allow, om.allow),
            deny: pick(sub("mcp", "deny"), um.deny, om.deny),
            ask: pick(sub("mcp", "ask"), um.ask, om.ask),
            auto_approve: if sub("mcp", "auto_approve") {
                om.auto_approve
            } else {
                um.auto_approve
            },
            roots: pick(sub("mcp", "roots"), um.roots, om.roots),
        },
        sandbox: pick(set("sandbox"), under.sandbox, over.sandbox),
        trust_project_settings: pick(
            set("trust_project_settings"),
            under.trust_project_settings,
            over.trust_project_settings,
        ),
        root: over.root,
    }
}

/// One config file, checked on its own: its keys as a JSON value (`None` when it is missing or
/// empty). Errors name the file.
fn read_layer(
    path: &Path,
    root: &Path,
) -> Result<Option<(serde_json::Value, ProjectConfig)>, ConfigError> {
    let err = |message: String| ConfigError { file: path.display().to_string(), message };
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(err(e.to_string())),
    };
    if text.trim().is_empty() {
        return Ok(None);
    }
    let mut cfg: ProjectConfig = serde_saphyr::from_str(&text).map_err(|e| err(e.to_string()))?;
    cfg.root = Some(root.to_path_buf());
    validate(&cfg).map_err(err)?;
    let value: serde_json::Value = serde_saphyr::from_str(&text).map_err(|e| err(e.to_string()))?;
    Ok(Some((value, cfg)))
}

/// Check everything now, so a bad rule or limit is reported before any run starts.
fn validate(cfg: &ProjectConfig) -> Result<(), String> {
    cfg.settings()?;
    cfg.check_limits()?;
    cfg.mcp_policy(&McpConfig::default())?;
    Ok(())
}

/// `o` where the project set it, else `u`.
fn pick<T>(project_set: bool, u: T, o: T) -> T {
    if project_set { o } else { u }
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

impl ProjectConfig {
    /// The limits are in range; errors name the field.
    fn check_limits(&self) -> Result<(), String> {
        if let Some(n) = self.max_concurrent
            && !(1..=20).contains(&n)
        {
            return Err(format!("max_concurrent: {n} is out of range (1-20)"));
        }
        if self.max_turns == Some(0) {
            return Err("max_turns: must be at least 1".into());
        }
        if self.max_per_parent == Some(0) {
            return Err("max_per_parent: must be at least 1".into());
        }
        self.timeout()?;
        self.permission_timeout()?;
        self.handshake_timeout()?;
        self.max_stored_output()?;
        if self.permission_timeout.is_some() && self.permissions.ask_timeout.is_some() {
            return Err("permission_timeout and permissions.ask_timeout say the same thing: \
                        keep permission_timeout"
                .into());
        }
        Ok(())
    }

    /// `max_stored_output` in bytes (at least 1 MiB), or the default.
    pub fn max_stored_output(&self) -> Result<u64, String> {
        let Some(v) = &self.max_stored_output else { return Ok(DEFAULT_MAX_STORED_OUTPUT) };
        let n = parse_size(v).map_err(|e| format!("max_stored_output: {e}"))?;
        if n < 1 << 20 {
            return Err(format!("max_stored_output: {v} is below the 1MiB minimum"));
        }
        Ok(n)
    }

    /// `timeout`, parsed and checked (1s to 120m).
    pub fn timeout(&self) -> Result<Option<std::time::Duration>, String> {
        let Some(t) = &self.timeout else { return Ok(None) };
        let d = parse_duration(t).map_err(|e| format!("timeout: {e}"))?;
        if d < std::time::Duration::from_secs(1) || d > std::time::Duration::from_secs(120 * 60) {
            return Err(format!("timeout: {t} is out of range (1s to 120m)"));
        }
        Ok(Some(d))
    }

    /// `handshake_timeout`, parsed and checked (1s to 10m).
    pub fn handshake_timeout(&self) -> Result<Option<std::time::Duration>, String> {
        let Some(t) = &self.handshake_timeout else { return Ok(None) };
        let d = parse_duration(t).map_err(|e| format!("handshake_timeout: {e}"))?;
        if d < std::time::Duration::from_secs(1) || d > std::time::Duration::from_secs(600) {
            return Err(format!("handshake_timeout: {t} is out of range (1s to 10m)"));
        }
        Ok(Some(d))
    }

    /// `permission_timeout` (or the older `permissions.ask_timeout`), parsed.
    pub fn permission_timeout(&self) -> Result<Option<std::time::Duration>, String> {
        let (field, value) = match (&self.permission_timeout, &self.permissions.ask_timeout) {
            (Some(t), _) => ("permission_timeout", t),
            (None, Some(t)) => ("permissions.ask_timeout", t),
            (None, None) => return Ok(None),
        };
        parse_duration(value).map(Some).map_err(|e| format!("{field}: {e}"))
    }

    /// The policy `herd mcp` puts above its clients' tasks: the project's own rules (a person
    /// wrote them), the `mcp:` section, then `extra` (the server's flags). Errors name the field.
    pub fn mcp_policy(&self, extra: &McpConfig) -> Result<herd_core::permission::Policy, String> {
        let rules = |field: &str, lists: [&[String]; 3]| -> Result<Vec<Rule>, String> {
            let mut out = Vec::new();
            for (list, at) in lists.iter().zip(["permissions", "mcp", "--"]) {
                for (i, r) in list.iter().enumerate() {
                    let rule = Rule::parse(r).map_err(|e| match at {
                        "--" => format!("--{field} {r:?}: {e}"),
                        _ => format!("{at}.{field}[{i}]: {e}"),
                    })?;
                    out.push(rule);
                }
            }
            Ok(out)
        };
        let (p, m) = (&self.permissions, &self.mcp);
        let tools: Vec<String> = m
            .tools
            .iter()
            .chain(&extra.tools)
            .map(|t| herd_core::permission::normalize_tool(t))
            .collect();
        Ok(herd_core::permission::Policy {
            tools,
            allow: rules("allow", [&p.allow, &m.allow, &extra.allow])?,
            deny: rules("deny", [&p.deny, &m.deny, &extra.deny])?,
            ask: rules("ask", [&p.ask, &m.ask, &extra.ask])?,
            readonly: false,
            auto_approve: m.auto_approve || extra.auto_approve,
        })
    }

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
        if let Some(t) = self.permission_timeout()? {
            perms.ask_timeout = t;
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
        let r = load_layered(None, dir.path());
        (dir, r)
    }

    #[test]
    fn the_users_config_lies_under_the_projects() {
        let dir = tempfile::tempdir().unwrap();
        let user = dir.path().join("user.yml");
        std::fs::write(
            &user,
            "max_concurrent: 3\nmax_turns: 7\nmax_stored_output: 2MiB\n\
             permissions: {deny: ['Bash(rm *)'], allow: [Read]}\n\
             hooks: {PreToolUse: [{command: ./user-check}]}\n",
        )
        .unwrap();
        let root = dir.path().join("project");
        std::fs::create_dir_all(root.join(".herd")).unwrap();
        // Only the user's: it applies.
        let cfg = load_layered(Some(&user), &root).unwrap();
        assert_eq!((cfg.max_concurrent, cfg.max_turns), (Some(3), Some(7)));
        std::fs::write(
            config_path(&root),
            "max_concurrent: 4\nsandbox: off\npermissions: {deny: ['Bash(curl *)']}\n\
             hooks: {PreToolUse: [{command: ./project-check}]}\n",
        )
        .unwrap();
        let cfg = load_layered(Some(&user), &root).unwrap();
        assert_eq!((cfg.max_concurrent, cfg.max_turns), (Some(4), Some(7)));
        assert_eq!(cfg.max_stored_output(), Ok(2 << 20));
        let p = cfg.permissions().unwrap();
        let rules = |r: &[Rule]| r.iter().map(ToString::to_string).collect::<Vec<_>>();
        assert_eq!(rules(&p.policy.deny), ["bash(rm *)", "bash(curl *)"]);
        assert_eq!(rules(&p.policy.allow), ["read"]);
        let hooks: Vec<&str> = p.hooks.iter().map(|h| h.command.as_str()).collect();
        assert_eq!(hooks, ["./user-check", "./project-check"]);
        assert_eq!(p.confine.protect, [root.join(".herd")]);
        assert_eq!(p.confine.mode, SandboxMode::Off);
        // An error names the file it is in.
        std::fs::write(&user, "max_concurent: 3\n").unwrap();
        let e = load_layered(Some(&user), &root).unwrap_err();
        assert!(e.file.ends_with("user.yml") && e.to_string().contains("max_concurent"), "{e}");
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
        assert!(load_layered(None, &d.path().join("nowhere")).is_ok());
    }

    #[test]
    fn limits_set_once_are_checked_and_named() {
        let (_d, cfg) = write(
            "max_concurrent: 3\nmax_queue: 7\ntimeout: 20m\nmax_turns: 9\nmax_per_parent: 4\n\
             permission_timeout: 45s\n",
        );
        let cfg = cfg.unwrap();
        assert_eq!((cfg.max_concurrent, cfg.max_queue, cfg.max_turns), (Some(3), Some(7), Some(9)));
        assert_eq!(cfg.timeout().unwrap().unwrap().as_secs(), 1200);
        assert_eq!(cfg.permissions().unwrap().ask_timeout.as_secs(), 45);
        for (text, field) in [
            ("max_concurrent: 30\n", "max_concurrent: 30 is out of range"),
            ("timeout: 3h\n", "out of range"),
            ("timeout: soon\n", "timeout:"),
            ("max_turns: 0\n", "max_turns"),
            ("permission_timeout: 1m\npermissions: {ask_timeout: 2m}\n", "say the same thing"),
            ("mcp: {allow: ['Bash(']}\n", "mcp.allow[0]"),
            ("mcp: {alow: []}\n", "alow"),
        ] {
            let (_d, e) = write(text);
            let e = e.unwrap_err().to_string();
            assert!(e.contains("config.yml") && e.contains(field), "{text}: {e}");
        }
    }

    #[test]
    fn the_mcp_ceiling_holds_the_projects_rules_the_section_and_the_flags() {
        let (_d, cfg) = write(
            "permissions: {deny: ['Bash(rm *)']}\nmcp: {allow: [Read], tools: [Read, Bash]}\n",
        );
        let flags = McpConfig { allow: vec!["Bash(cargo *)".into()], ..McpConfig::default() };
        let p = cfg.unwrap().mcp_policy(&flags).unwrap();
        let rules = |r: &[Rule]| r.iter().map(ToString::to_string).collect::<Vec<_>>();
        assert_eq!(rules(&p.allow), ["read", "bash(cargo *)"]);
        assert_eq!(rules(&p.deny), ["bash(rm *)"]);
        assert_eq!(p.tools, ["read", "bash"]);
        assert!(!p.auto_approve);
        let bad = McpConfig { deny: vec!["Bash(".into()], ..McpConfig::default() };
        let (_d, cfg) = write("");
        assert!(cfg.unwrap().mcp_policy(&bad).unwrap_err().contains("--deny \"Bash(\""));
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
