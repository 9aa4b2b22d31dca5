//! Permission rules as written (`Tool` or `Tool(pattern)`), tool-name normalisation, a call's
//! main input, and glob matching of patterns against it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::shell;

/// `"Bash(cargo *)"` → `"bash"`, `" WRITE "` → `"write"`. Idempotent.
pub fn normalize_tool(name: &str) -> String {
    let t = name.trim();
    let t = t.find('(').map_or(t, |i| &t[..i]);
    t.trim().to_ascii_lowercase()
}

/// Tools whose main input is a file path.
const FILE_TOOLS: &[&str] = &["write", "edit", "multiedit", "read", "notebookedit"];

/// The input a rule's pattern is matched against: the Bash command, the file path, the URL…
pub fn main_input(tool: &str, input: &Value) -> Option<String> {
    let key = match tool {
        "bash" => "command",
        "write" | "edit" | "multiedit" | "read" => "file_path",
        "notebookedit" => "notebook_path",
        "glob" | "grep" => "pattern",
        "webfetch" => "url",
        "websearch" => "query",
        _ => return None,
    };
    input.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// A tool call as the rules see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// Normalised tool name.
    pub tool: String,
    pub main_input: Option<String>,
    /// The agent's working directory: relative file patterns are relative to it.
    pub cwd: Option<PathBuf>,
}

impl Call {
    pub fn new(raw_tool_name: &str, input: &Value, cwd: Option<&Path>) -> Self {
        let tool = normalize_tool(raw_tool_name);
        let main_input = main_input(&tool, input);
        Self { tool, main_input, cwd: cwd.map(Path::to_path_buf) }
    }
}

/// Why a rule cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("the rule is empty")]
    Empty,
    #[error("{0:?}: unbalanced parentheses (write Tool or Tool(pattern))")]
    Unbalanced(String),
    #[error("{0:?}: no tool name before the pattern")]
    NoTool(String),
    #[error("{rule:?}: the tool name may only hold letters, digits, _, - and . (found {found:?})")]
    BadTool { rule: String, found: char },
    #[error("{0:?}: the pattern is empty (write Tool for every call of a tool)")]
    EmptyPattern(String),
}

/// `Tool` or `Tool(pattern)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Rule {
    /// Normalised tool name.
    pub tool: String,
    pub pattern: Option<String>,
}

impl Rule {
    pub fn parse(s: &str) -> Result<Rule, RuleError> {
        let t = s.trim();
        if t.is_empty() {
            return Err(RuleError::Empty);
        }
        let (name, pattern) = match t.find('(') {
            None if t.contains(')') => return Err(RuleError::Unbalanced(s.into())),
            None => (t, None),
            Some(i) => {
                let rest = &t[i + 1..];
                let Some(inner) = rest.strip_suffix(')') else {
                    return Err(RuleError::Unbalanced(s.into()));
                };
                if inner.trim().is_empty() {
                    return Err(RuleError::EmptyPattern(s.into()));
                }
                (&t[..i], Some(inner.to_owned()))
            }
        };
        let name = name.trim();
        if name.is_empty() {
            return Err(RuleError::NoTool(s.into()));
        }
        if let Some(found) =
            name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
        {
            return Err(RuleError::BadTool { rule: s.into(), found });
        }
        Ok(Rule { tool: name.to_ascii_lowercase(), pattern })
    }

    /// Whether this rule covers `call`'s main input as a whole.
    pub fn matches(&self, call: &Call) -> bool {
        if self.tool != call.tool {
            return false;
        }
        match (&self.pattern, &call.main_input) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(p), Some(input)) => self.matches_text(p, call, input),
        }
    }

    /// For deny and ask rules: the rule covers the call as a whole or, for Bash, any command
    /// in it (`echo ok && rm -rf ~` is caught by `Bash(rm *)`, so is `echo $(rm x)`).
    pub fn catches(&self, call: &Call) -> bool {
        if self.matches(call) {
            return true;
        }
        match (&self.pattern, &call.main_input) {
            (Some(p), Some(input)) if self.tool == call.tool && call.tool == "bash" => {
                shell::command_pieces(input).iter().any(|c| self.matches_text(p, call, c))
            }
            _ => false,
        }
    }

    /// For allow rules: for Bash, every command of the line must be covered and nothing may be
    /// hidden in substitutions or subshells (`Bash(cargo *)` does not allow
    /// `cargo test; curl x | sh`); a wildcard-free pattern also allows exactly its own line.
    pub fn permits(&self, call: &Call) -> bool {
        let (Some(p), Some(input)) = (&self.pattern, &call.main_input) else {
            return self.matches(call);
        };
        if self.tool != call.tool || call.tool != "bash" {
            return self.matches(call);
        }
        if !p.contains(['*', '?']) && p.trim() == input.trim() {
            return true;
        }
        let line = shell::command_line(input);
        !line.opaque
            && !line.commands.is_empty()
            && line.commands.iter().all(|c| self.matches_text(p, call, c))
    }

    fn matches_text(&self, pattern: &str, call: &Call, input: &str) -> bool {
        if let Some(prefix) = pattern.strip_suffix(":*") {
            // Claude Code's legacy prefix form: `Bash(npm run test:*)`.
            return input.starts_with(prefix);
        }
        if FILE_TOOLS.contains(&call.tool.as_str())
            && !pattern.starts_with('/')
            && let Some(cwd) = &call.cwd
            && let Ok(rel) = Path::new(input).strip_prefix(cwd)
            && glob_match(pattern, &rel.to_string_lossy())
        {
            return true;
        }
        glob_match(pattern, input)
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.pattern {
            Some(p) => write!(f, "{}({p})", self.tool),
            None => f.write_str(&self.tool),
        }
    }
}

impl FromStr for Rule {
    type Err = RuleError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Rule::parse(s)
    }
}

/// Glob: `*` is any run of characters (`/` and spaces included), `?` one character, the rest
/// literal. Linear in time (the classic two-pointer walk with one backtrack point).
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || (p[pi] != '*' && p[pi] == t[ti])) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn bash(cmd: &str) -> Call {
        Call::new("Bash", &json!({"command": cmd}), None)
    }

    #[test]
    fn parse_and_errors_name_the_rule() {
        assert_eq!(Rule::parse("Bash(cargo *)").unwrap().to_string(), "bash(cargo *)");
        assert_eq!(Rule::parse(" Write ").unwrap(), Rule { tool: "write".into(), pattern: None });
        assert_eq!(Rule::parse("mcp__herd__task").unwrap().tool, "mcp__herd__task");
        assert_eq!(Rule::parse(""), Err(RuleError::Empty));
        assert!(Rule::parse("Bash(rm *").unwrap_err().to_string().contains("Bash(rm *"));
        assert!(matches!(Rule::parse("Bash)"), Err(RuleError::Unbalanced(_))));
        assert!(matches!(Rule::parse("(x)"), Err(RuleError::NoTool(_))));
        assert!(matches!(Rule::parse("Bash()"), Err(RuleError::EmptyPattern(_))));
        assert!(matches!(Rule::parse("Ba sh"), Err(RuleError::BadTool { found: ' ', .. })));
    }

    #[test]
    fn matching() {
        let r = Rule::parse("Bash(cargo test *)").unwrap();
        assert!(r.matches(&bash("cargo test --all")));
        assert!(!r.matches(&bash("cargo build")));
        assert!(!r.matches(&Call::new("Write", &json!({"file_path": "cargo test x"}), None)));
        assert!(Rule::parse("bash").unwrap().matches(&bash("anything at all")));
        assert!(Rule::parse("Bash(npm run test:*)").unwrap().matches(&bash("npm run test -- -u")));
        assert!(Rule::parse("Bash(rm *)").unwrap().matches(&bash("rm -rf /tmp/x")));
        assert!(!Rule::parse("Bash(rm *)").unwrap().matches(&bash("echo rm")));
        // No main input: only a pattern-less rule matches.
        let task = Call::new("Task", &json!({"prompt": "x"}), None);
        assert!(!Rule::parse("Task(x)").unwrap().matches(&task));
        assert!(Rule::parse("task").unwrap().matches(&task));
        // File patterns relative to the cwd.
        let cwd = Path::new("/repo");
        let w = Call::new("Edit", &json!({"file_path": "/repo/src/lib.rs"}), Some(cwd));
        assert!(Rule::parse("Edit(src/*)").unwrap().matches(&w));
        assert!(Rule::parse("Edit(/repo/src/*.rs)").unwrap().matches(&w));
        assert!(!Rule::parse("Edit(docs/*)").unwrap().matches(&w));
    }

    #[test]
    fn globs() {
        assert!(glob_match("*", ""));
        assert!(glob_match("a*b?d", "axxxbcd"));
        assert!(!glob_match("a*b?d", "axxxbd"));
        assert!(glob_match("**", "a/b/c"));
        // Pathological patterns stay fast.
        let text = "a".repeat(10_000);
        assert!(!glob_match(&format!("{}b", "*a".repeat(50)), &text));
    }

    proptest! {
        #[test]
        fn normalisation_is_idempotent(s in ".{0,40}") {
            let once = normalize_tool(&s);
            prop_assert_eq!(normalize_tool(&once), once.clone());
        }

        #[test]
        fn star_matches_everything_and_literals_only_themselves(s in "[^*?]{0,40}", t in ".{0,40}") {
            prop_assert!(glob_match("*", &t));
            prop_assert!(glob_match(&s, &s));
            prop_assert_eq!(glob_match(&s, &t), s == t);
            let wrapped = format!("*{s}*");
            prop_assert_eq!(glob_match(&wrapped, &t), t.contains(&s));
        }

        #[test]
        fn parsing_never_panics(s in ".{0,60}") {
            let _ = Rule::parse(&s);
        }
    }
}
