//! Which agent CLI runs a subagent: the one backend identity used everywhere — plan steps,
//! agent definitions, `--cli`, MCP `agent_cli`, config — with its names and parse errors.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The agent CLIs herd knows. Whether this herd can run one is the backends crate's business;
/// an unknown name is an input error that names the known ones, never a fallback to claude.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    Claude,
    Codex,
    Gemini,
    /// Any Agent Client Protocol agent.
    Acp,
    /// Any program: the prompt on stdin, each stdout line a text event, the exit code decides.
    Command,
}

impl BackendKind {
    pub const ALL: [BackendKind; 5] =
        [Self::Claude, Self::Codex, Self::Gemini, Self::Acp, Self::Command];

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Claude => "claude",
            Self::Codex => "codex",
            Self::Gemini => "gemini",
            Self::Acp => "acp",
            Self::Command => "command",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for BackendKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL.into_iter().find(|c| c.as_str() == s.trim()).ok_or_else(|| {
            format!("unknown cli {s:?} (expected one of claude, codex, gemini, acp, command)")
        })
    }
}

/// How to start an Agent Client Protocol agent: `acp: {command: [program, args…]}` in an agent
/// file or a plan step (`herd task --cli acp -- PROGRAM ARGS…` on the command line).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcpSpec {
    /// The agent's program and its arguments (e.g. `[gemini, --acp]`, `[claude-code-acp]`).
    pub command: Vec<String>,
}

impl AcpSpec {
    /// Why this spec cannot start anything, if it cannot.
    pub fn check(&self) -> Result<(), String> {
        match self.command.first() {
            None => {
                Err("command is empty; give the agent's program: acp: {command: [program, args…]}"
                    .into())
            }
            Some(p) if p.trim().is_empty() => Err("command[0] (the program) is empty".into()),
            Some(_) if self.command.iter().any(|a| a.contains('\0')) => {
                Err("command contains a NUL byte".into())
            }
            Some(_) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_ones_name_the_known() {
        for k in BackendKind::ALL {
            assert_eq!(k.to_string().parse::<BackendKind>(), Ok(k));
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("\"{k}\""));
        }
        assert!(AcpSpec { command: vec!["gemini".into(), "--acp".into()] }.check().is_ok());
        assert!(AcpSpec::default().check().unwrap_err().contains("command is empty"));
        assert!(AcpSpec { command: vec![" ".into()] }.check().is_err());
        let e = "cursor".parse::<BackendKind>().unwrap_err();
        assert!(e.contains("expected one of claude, codex, gemini, acp, command"), "{e}");
    }
}
