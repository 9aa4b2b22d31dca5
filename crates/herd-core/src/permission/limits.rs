//! Auto-approve (seed 000): its configuration with validated bounds, and the rate limiter that
//! grants calls in sliding one-minute windows per category, a per-session cap and a time box.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Claude Code 2.1.197's tools, normalised (from its `system/init` line), plus older names.
pub const KNOWN_TOOLS: &[&str] = &[
    "agent",
    "bash",
    "croncreate",
    "crondelete",
    "cronlist",
    "edit",
    "enterworktree",
    "exitworktree",
    "glob",
    "grep",
    "ls",
    "multiedit",
    "notebookedit",
    "read",
    "reportfindings",
    "schedulewakeup",
    "sendmessage",
    "skill",
    "task",
    "taskcreate",
    "taskget",
    "tasklist",
    "taskoutput",
    "taskstop",
    "taskupdate",
    "todowrite",
    "webfetch",
    "websearch",
    "workflow",
    "write",
];

/// Bounds of herd's auto-approval of calls no rule decides.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AutoApproveConfig {
    /// The time box of the whole run (60 s to 4 h; default 1 h).
    #[serde(with = "secs")]
    pub max_duration: Duration,
    /// 10-300, default 60.
    pub tool_calls_per_minute: u32,
    /// 1-10000, default 1000.
    pub tool_calls_per_session: u32,
    /// 1-60, default 20.
    pub bash_per_minute: u32,
    /// 1-100, default 30.
    pub writes_per_minute: u32,
    /// Over a per-minute limit: wait for the window (true) or deny (false, the default).
    pub queue_on_rate_limit: bool,
}

impl Default for AutoApproveConfig {
    fn default() -> Self {
        Self {
            max_duration: Duration::from_secs(3600),
            tool_calls_per_minute: 60,
            tool_calls_per_session: 1000,
            bash_per_minute: 20,
            writes_per_minute: 30,
            queue_on_rate_limit: false,
        }
    }
}

mod secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_secs())
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_secs(u64::deserialize(d)?))
    }
}

/// Settings that cannot run (seed 000's `INVALID_PERMISSION_CONFIG`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PermissionConfigError {
    #[error(
        "INVALID_PERMISSION_CONFIG: auto-approve requires a non-empty list of allowed tools \
         (--tools): with none, every tool would be approved unattended"
    )]
    NoTools,
    #[error("INVALID_PERMISSION_CONFIG: unknown tool in tools: {0:?} (known: {known})", known = KNOWN_TOOLS.join(", "))]
    UnknownTool(String),
    #[error("INVALID_PERMISSION_CONFIG: {field} must be {min}-{max} (got {got})")]
    OutOfRange { field: &'static str, min: u64, max: u64, got: u64 },
}

/// Check that auto-approve has a known, non-empty tool list (names as written; they are
/// normalised here) and limits within bounds.
pub fn validate_auto_approve(
    tools: &[String],
    cfg: &AutoApproveConfig,
) -> Result<(), PermissionConfigError> {
    if tools.is_empty() {
        return Err(PermissionConfigError::NoTools);
    }
    let known = |t: &String| {
        let n = super::normalize_tool(t);
        KNOWN_TOOLS.contains(&n.as_str()) || n.starts_with("mcp__")
    };
    if let Some(t) = tools.iter().find(|t| !known(t)) {
        return Err(PermissionConfigError::UnknownTool(t.clone()));
    }
    let check = |field, got: u64, min, max| {
        if (min..=max).contains(&got) {
            Ok(())
        } else {
            Err(PermissionConfigError::OutOfRange { field, min, max, got })
        }
    };
    check("max_duration_seconds", cfg.max_duration.as_secs(), 60, 14_400)?;
    check("tool_calls_per_minute", cfg.tool_calls_per_minute.into(), 10, 300)?;
    check("tool_calls_per_session", cfg.tool_calls_per_session.into(), 1, 10_000)?;
    check("bash_per_minute", cfg.bash_per_minute.into(), 1, 60)?;
    check("writes_per_minute", cfg.writes_per_minute.into(), 1, 100)?;
    Ok(())
}

/// Which per-minute limits a call counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    Bash,
    Write,
    Other,
}

impl CallKind {
    /// From a normalised tool name.
    pub fn of(tool: &str) -> Self {
        match tool {
            "bash" => Self::Bash,
            "write" | "edit" | "multiedit" | "notebookedit" => Self::Write,
            _ => Self::Other,
        }
    }
}

/// What is left of each limit (audited with every auto-approved or refused call).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RateState {
    pub tool_calls_remaining: u32,
    pub bash_calls_remaining: u32,
    pub writes_remaining: u32,
    pub session_calls_remaining: u32,
}

/// A call over a limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Limited {
    /// `tool_calls_per_minute`, `bash_per_minute`, `writes_per_minute` or `tool_calls_per_session`.
    pub limit: &'static str,
    pub state: RateState,
    /// When a slot frees up; None for the session cap (it never does).
    pub retry_after: Option<Duration>,
}

const WINDOW: Duration = Duration::from_secs(60);

/// The auto-approve limiter of one run.
#[derive(Debug, Clone)]
pub struct AutoApprover {
    cfg: AutoApproveConfig,
    started: Instant,
    all: VecDeque<Instant>,
    bash: VecDeque<Instant>,
    writes: VecDeque<Instant>,
    session: u32,
}

impl AutoApprover {
    pub fn new(cfg: AutoApproveConfig, started: Instant) -> Self {
        Self {
            cfg,
            started,
            all: VecDeque::new(),
            bash: VecDeque::new(),
            writes: VecDeque::new(),
            session: 0,
        }
    }

    pub fn config(&self) -> &AutoApproveConfig {
        &self.cfg
    }

    /// What is left of the time box; None once it is over.
    pub fn time_remaining(&self, now: Instant) -> Option<Duration> {
        let used = now.saturating_duration_since(self.started);
        self.cfg.max_duration.checked_sub(used).filter(|d| !d.is_zero())
    }

    fn expire(&mut self, now: Instant) {
        for q in [&mut self.all, &mut self.bash, &mut self.writes] {
            while q.front().is_some_and(|&t| now.saturating_duration_since(t) >= WINDOW) {
                q.pop_front();
            }
        }
    }

    fn remaining(&self) -> RateState {
        let left = |limit: u32, used: usize| limit.saturating_sub(used as u32);
        RateState {
            tool_calls_remaining: left(self.cfg.tool_calls_per_minute, self.all.len()),
            bash_calls_remaining: left(self.cfg.bash_per_minute, self.bash.len()),
            writes_remaining: left(self.cfg.writes_per_minute, self.writes.len()),
            session_calls_remaining: self.cfg.tool_calls_per_session.saturating_sub(self.session),
        }
    }

    pub fn state(&mut self, now: Instant) -> RateState {
        self.expire(now);
        self.remaining()
    }

    /// Take a slot for a call of `kind`, or say which limit it is over. Records only on success.
    pub fn try_acquire(&mut self, kind: CallKind, now: Instant) -> Result<RateState, Limited> {
        self.expire(now);
        let s = self.remaining();
        let retry = |q: &VecDeque<Instant>| {
            q.front().map(|&t| WINDOW.saturating_sub(now.saturating_duration_since(t)))
        };
        let over = if s.session_calls_remaining == 0 {
            Some(("tool_calls_per_session", None))
        } else if s.tool_calls_remaining == 0 {
            Some(("tool_calls_per_minute", retry(&self.all)))
        } else if kind == CallKind::Bash && s.bash_calls_remaining == 0 {
            Some(("bash_per_minute", retry(&self.bash)))
        } else if kind == CallKind::Write && s.writes_remaining == 0 {
            Some(("writes_per_minute", retry(&self.writes)))
        } else {
            None
        };
        if let Some((limit, retry_after)) = over {
            return Err(Limited { limit, state: s, retry_after });
        }
        self.all.push_back(now);
        self.session += 1;
        match kind {
            CallKind::Bash => self.bash.push_back(now),
            CallKind::Write => self.writes.push_back(now),
            CallKind::Other => {}
        }
        Ok(self.remaining())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn validation_names_the_problem() {
        let cfg = AutoApproveConfig::default();
        assert_eq!(validate_auto_approve(&[], &cfg), Err(PermissionConfigError::NoTools));
        let e = validate_auto_approve(&["bsh".into()], &cfg).unwrap_err().to_string();
        assert!(e.starts_with("INVALID_PERMISSION_CONFIG") && e.contains("\"bsh\""), "{e}");
        assert!(validate_auto_approve(&["bash".into(), "mcp__herd__task".into()], &cfg).is_ok());
        let bad = AutoApproveConfig { bash_per_minute: 100, ..cfg.clone() };
        let e = validate_auto_approve(&["bash".into()], &bad).unwrap_err().to_string();
        assert!(e.contains("bash_per_minute must be 1-60 (got 100)"), "{e}");
        let bad = AutoApproveConfig { max_duration: Duration::from_secs(5), ..cfg };
        assert!(validate_auto_approve(&["bash".into()], &bad).is_err());
    }

    #[test]
    fn windows_session_cap_and_time_box() {
        let t0 = Instant::now();
        let cfg = AutoApproveConfig {
            bash_per_minute: 2,
            tool_calls_per_session: 4,
            max_duration: Duration::from_secs(120),
            ..AutoApproveConfig::default()
        };
        let mut a = AutoApprover::new(cfg, t0);
        assert_eq!(a.try_acquire(CallKind::Bash, t0).unwrap().bash_calls_remaining, 1);
        assert_eq!(a.try_acquire(CallKind::Bash, t0).unwrap().bash_calls_remaining, 0);
        let l = a.try_acquire(CallKind::Bash, t0 + Duration::from_secs(10)).unwrap_err();
        assert_eq!(l.limit, "bash_per_minute");
        assert_eq!(l.retry_after, Some(Duration::from_secs(50)));
        assert!(a.try_acquire(CallKind::Other, t0).is_ok(), "other tools are not Bash-limited");
        assert!(a.try_acquire(CallKind::Bash, t0 + Duration::from_secs(60)).is_ok(), "new window");
        let l = a.try_acquire(CallKind::Other, t0 + Duration::from_secs(61)).unwrap_err();
        assert_eq!((l.limit, l.retry_after), ("tool_calls_per_session", None));
        assert_eq!(a.time_remaining(t0 + Duration::from_secs(100)), Some(Duration::from_secs(20)));
        assert_eq!(a.time_remaining(t0 + Duration::from_secs(120)), None);
    }

    proptest! {
        #[test]
        fn no_window_ever_holds_more_than_the_limits(
            gaps in prop::collection::vec((0u64..20_000, 0u8..3), 1..200),
            per_min in 10u32..20, bash in 1u32..5, writes in 1u32..5, session in 1u32..100,
        ) {
            let t0 = Instant::now();
            let cfg = AutoApproveConfig {
                tool_calls_per_minute: per_min, bash_per_minute: bash, writes_per_minute: writes,
                tool_calls_per_session: session, ..AutoApproveConfig::default()
            };
            let mut a = AutoApprover::new(cfg, t0);
            let mut now = t0;
            let mut granted: Vec<(Instant, CallKind)> = Vec::new();
            for (gap, k) in gaps {
                now += Duration::from_millis(gap);
                let kind = [CallKind::Bash, CallKind::Write, CallKind::Other][k as usize];
                if a.try_acquire(kind, now).is_ok() {
                    granted.push((now, kind));
                }
            }
            prop_assert!(granted.len() as u32 <= session);
            for &(start, _) in &granted {
                let win: Vec<_> = granted.iter().filter(|(t, _)| *t >= start && *t < start + WINDOW).collect();
                prop_assert!(win.len() as u32 <= per_min);
                prop_assert!(win.iter().filter(|(_, k)| *k == CallKind::Bash).count() as u32 <= bash);
                prop_assert!(win.iter().filter(|(_, k)| *k == CallKind::Write).count() as u32 <= writes);
            }
        }
    }
}
