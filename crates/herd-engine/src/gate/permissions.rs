//! A run's permission settings (rules, auto-approve, ask timeout, hooks, grants): the policy
//! they make for a run, their validation, and what of them the audit log and the child keep.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use herd_backends::RunSpec;
use herd_core::permission::{
    AutoApproveConfig, Grants, PermissionConfigError, Policy, Rule, normalize_tool,
    validate_auto_approve,
};
use serde_json::{Value, json};

use super::{DEFAULT_ASK_TIMEOUT, HookDef, lock, now};

/// A run's permission settings.
#[derive(Debug, Clone)]
pub struct Permissions {
    /// allow / deny / ask rules from config, agent, step and flags (`tools` comes from the spec).
    pub policy: Policy,
    /// Approve calls no rule decides, within these limits.
    pub auto_approve: Option<AutoApproveConfig>,
    /// How long a call waits for `herd approve` / `herd deny` (or the terminal) before denial.
    pub ask_timeout: Duration,
    /// Nobody can answer (`--non-interactive`, or a script without a terminal): a call that
    /// needs a person is denied at once, and counted as denied for want of an answer.
    pub non_interactive: bool,
    pub hooks: Vec<HookDef>,
    /// TTL-bounded secrets and extra tools.
    pub grants: Arc<Mutex<Grants>>,
    /// The filesystem sandbox, and whether the CLI loads the repository's own settings.
    pub confine: crate::sandbox::Confinement,
}

impl Default for Permissions {
    fn default() -> Self {
        Self {
            policy: Policy::default(),
            auto_approve: None,
            ask_timeout: DEFAULT_ASK_TIMEOUT,
            non_interactive: false,
            hooks: Vec::new(),
            grants: Arc::new(Mutex::new(Grants::default())),
            confine: Default::default(),
        }
    }
}

impl Permissions {
    /// This run's own policy: these settings' rules, the spec's `allow` / `deny` rules and its
    /// `tools`. Errors name the rule that does not parse.
    pub fn run_policy(&self, spec: &RunSpec) -> Result<Policy, String> {
        let parse = |list: &[String], what: &str| -> Result<Vec<Rule>, String> {
            list.iter()
                .map(|r| Rule::parse(r).map_err(|e| format!("{what} rule {r:?}: {e}")))
                .collect()
        };
        let mut own = self.policy.clone();
        own.merge(&Policy {
            allow: parse(&spec.allow, "allow")?,
            deny: parse(&spec.deny, "deny")?,
            ..Policy::default()
        });
        if let Some(t) = &spec.tools {
            own.tools = t.iter().map(|t| normalize_tool(t)).collect();
        }
        Ok(own)
    }

    /// Check the rules parse, and auto-approve against the tools the agent has (seed 000: a
    /// non-empty, known list).
    pub fn validate(&self, spec: &RunSpec) -> Result<(), String> {
        self.run_policy(spec)?;
        // `sandbox: required` and no sandbox here: refused before anything is created.
        self.confine.check()?;
        match &self.auto_approve {
            Some(cfg) => {
                let tools = spec.tools.as_deref().unwrap_or_default();
                validate_auto_approve(tools, cfg).map_err(|e: PermissionConfigError| e.to_string())
            }
            None => Ok(()),
        }
    }

    /// The tools granted and valid now.
    pub fn granted_tools(&self) -> Vec<String> {
        lock(&self.grants).valid_tools(now())
    }

    /// What the audit log keeps of these settings: rules, limits, grant names — never values.
    pub fn summary(&self, spec: &RunSpec) -> Value {
        let tools = &spec.tools;
        let rules = |r: &[Rule]| r.iter().map(ToString::to_string).collect::<Vec<_>>();
        let now = tokio::time::Instant::now().into_std();
        let grants = lock(&self.grants);
        let allow = [rules(&self.policy.allow), spec.allow.clone()].concat();
        let deny = [rules(&self.policy.deny), spec.deny.clone()].concat();
        json!({
            "tools": tools,
            "allow": allow,
            "deny": deny,
            "ask": rules(&self.policy.ask),
            "readonly": self.policy.readonly,
            "auto_approve": self.auto_approve,
            "ask_timeout_ms": self.ask_timeout.as_millis() as u64,
            "non_interactive": self.non_interactive,
            "hooks": self.hooks.iter().map(|h| format!("{}: {}", h.event.as_str(), h.command)).collect::<Vec<_>>(),
            "granted_tools": grants.valid_tools(now),
            "granted_secrets": grants.valid_secrets(now).into_iter().map(|(n, _)| n).collect::<Vec<_>>(),
        })
    }
}

/// Secrets granted to the run and still valid, as environment variables.
pub(crate) fn granted_env(perms: &Permissions) -> BTreeMap<String, String> {
    lock(&perms.grants)
        .valid_secrets(now())
        .into_iter()
        .map(|(name, secret)| (name, secret.expose().to_owned()))
        .collect()
}
