//! TTL-bounded grants (seed 002): a secret given to a child at spawn only while valid, or an
//! extra tool; checked at use against the caller's clock. Secret values are zeroised on drop.

use std::fmt;
use std::time::{Duration, Instant};

use zeroize::Zeroize;

/// A secret value: never printed, wiped from memory when dropped.
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Self {
        Self(s)
    }
}

impl Zeroize for Secret {
    fn zeroize(&mut self) {
        self.0.zeroize();
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        self.zeroize();
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// What a grant gives.
#[derive(Debug)]
pub enum GrantKind {
    /// An environment variable for the child.
    Secret { name: String, value: Secret },
    /// A tool beyond the run's `tools` (normalised name).
    Tool { name: String },
}

impl GrantKind {
    pub fn name(&self) -> &str {
        match self {
            Self::Secret { name, .. } | Self::Tool { name } => name,
        }
    }
}

/// One grant and when it ends.
#[derive(Debug)]
pub struct Grant {
    pub kind: GrantKind,
    pub expires_at: Instant,
}

/// Why a grant check failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    #[error("the grant of {name} expired {}s ago", expired_ago.as_secs())]
    Expired { name: String, expired_ago: Duration },
    #[error("no grant of {name}")]
    Missing { name: String },
    #[error("{0}")]
    BadSpec(String),
}

/// A run's grants.
#[derive(Debug, Default)]
pub struct Grants {
    grants: Vec<Grant>,
}

impl Grants {
    pub fn add(&mut self, kind: GrantKind, ttl: Duration, now: Instant) {
        let kind = match kind {
            GrantKind::Tool { name } => GrantKind::Tool { name: super::normalize_tool(&name) },
            k => k,
        };
        self.grants.push(Grant { kind, expires_at: now + ttl });
    }

    /// Whether a tool grant for `tool` (normalised) is valid at `now`.
    pub fn check_tool(&self, tool: &str, now: Instant) -> Result<(), GrantError> {
        let mut expired: Option<Duration> = None;
        for g in &self.grants {
            if let GrantKind::Tool { name } = &g.kind
                && name == tool
            {
                if now < g.expires_at {
                    return Ok(());
                }
                let ago = now - g.expires_at;
                expired = Some(expired.map_or(ago, |e| e.min(ago)));
            }
        }
        match expired {
            Some(expired_ago) => Err(GrantError::Expired { name: tool.into(), expired_ago }),
            None => Err(GrantError::Missing { name: tool.into() }),
        }
    }

    /// Tools granted and valid at `now`.
    /// Every tool granted, valid or not.
    pub fn tool_names(&self) -> Vec<String> {
        self.grants
            .iter()
            .filter_map(|g| match &g.kind {
                GrantKind::Tool { name } => Some(name.clone()),
                GrantKind::Secret { .. } => None,
            })
            .collect()
    }

    pub fn valid_tools(&self, now: Instant) -> Vec<String> {
        self.grants
            .iter()
            .filter(|g| now < g.expires_at)
            .filter_map(|g| match &g.kind {
                GrantKind::Tool { name } => Some(name.clone()),
                GrantKind::Secret { .. } => None,
            })
            .collect()
    }

    /// Secrets granted and valid at `now`.
    pub fn valid_secrets(&self, now: Instant) -> Vec<(String, &Secret)> {
        self.grants
            .iter()
            .filter(|g| now < g.expires_at)
            .filter_map(|g| match &g.kind {
                GrantKind::Secret { name, value } => Some((name.clone(), value)),
                GrantKind::Tool { .. } => None,
            })
            .collect()
    }

    /// Drop expired grants (their secrets are zeroised); returns how many.
    pub fn sweep(&mut self, now: Instant) -> usize {
        let before = self.grants.len();
        self.grants.retain(|g| now < g.expires_at);
        before - self.grants.len()
    }
}

/// A `--grant` value: `tool:NAME:TTL` or `secret:NAME:TTL` (the secret's value comes from the
/// granting herd's own environment variable NAME).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrantSpec {
    Tool { name: String, ttl: Duration },
    Secret { name: String, ttl: Duration },
}

pub fn parse_grant_spec(s: &str) -> Result<GrantSpec, GrantError> {
    let bad = |m: &str| {
        GrantError::BadSpec(format!(
            "{s:?}: {m} (write tool:NAME:TTL or secret:NAME:TTL, e.g. secret:GITHUB_TOKEN:10m)"
        ))
    };
    let mut parts = s.splitn(3, ':');
    let (Some(kind), Some(name), Some(ttl)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad("expected three parts"));
    };
    let name = name.trim();
    if name.is_empty() {
        return Err(bad("the name is empty"));
    }
    let ttl = crate::plan::parse_duration(ttl).map_err(|e| bad(&e))?;
    match kind.trim() {
        "tool" => Ok(GrantSpec::Tool { name: super::normalize_tool(name), ttl }),
        "secret" => {
            let valid = !name.starts_with(|c: char| c.is_ascii_digit())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(bad("a secret's name is an environment variable name"));
            }
            Ok(GrantSpec::Secret { name: name.to_owned(), ttl })
        }
        _ => Err(bad("the kind is tool or secret")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_expiry_with_a_paused_clock() {
        let t0 = Instant::now();
        let mut g = Grants::default();
        g.add(GrantKind::Tool { name: "WebFetch".into() }, Duration::from_secs(300), t0);
        let secret = Secret::from("hunter2".to_owned());
        g.add(
            GrantKind::Secret { name: "TOKEN".into(), value: secret },
            Duration::from_secs(60),
            t0,
        );
        assert_eq!(g.check_tool("webfetch", t0 + Duration::from_secs(299)), Ok(()));
        assert_eq!(g.valid_secrets(t0).len(), 1);
        assert!(g.valid_secrets(t0 + Duration::from_secs(60)).is_empty());
        let later = t0 + Duration::from_secs(310);
        assert_eq!(
            g.check_tool("webfetch", later),
            Err(GrantError::Expired {
                name: "webfetch".into(),
                expired_ago: Duration::from_secs(10)
            })
        );
        assert_eq!(g.check_tool("bash", t0), Err(GrantError::Missing { name: "bash".into() }));
        assert!(g.valid_tools(later).is_empty());
        assert_eq!(g.sweep(later), 2);
    }

    #[test]
    fn secrets_never_print_and_are_zeroised() {
        let s = Secret::from("hunter2".to_owned());
        assert_eq!(format!("{s:?} {s}"), "*** ***");
        let k = GrantKind::Secret { name: "T".into(), value: s };
        assert!(!format!("{k:?}").contains("hunter2"));
        // What Drop runs: the value is overwritten, not just forgotten.
        let mut s = Secret::from("hunter2".to_owned());
        s.zeroize();
        assert_eq!(s.expose(), "");
    }

    #[test]
    fn grant_specs() {
        assert_eq!(
            parse_grant_spec("secret:GH_TOKEN:10m").unwrap(),
            GrantSpec::Secret { name: "GH_TOKEN".into(), ttl: Duration::from_secs(600) }
        );
        assert_eq!(
            parse_grant_spec("tool:WebFetch:30s").unwrap(),
            GrantSpec::Tool { name: "webfetch".into(), ttl: Duration::from_secs(30) }
        );
        for bad in ["secret:GH", "key:X:1m", "secret:A-B:1m", "tool::1m", "tool:X:soon"] {
            let e = parse_grant_spec(bad).unwrap_err().to_string();
            assert!(e.contains(bad), "{e}");
        }
    }
}
