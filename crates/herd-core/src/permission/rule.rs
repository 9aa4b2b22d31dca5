//! Permission rules as written (`Tool` or `Tool(pattern)`), tool names and families, a call as
//! the rules see it, and how one rule judges a call: surely, perhaps, or not at all.

use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::bash::{BashLine, Command, PathRef, Redirect, analyze_bash};
use super::pattern::{Word, command_glob, glob_match, matches_all, matches_anything, matches_some};

/// `"Bash(cargo *)"` → `"bash"`, `" WRITE "` → `"write"`. Idempotent.
pub fn normalize_tool(name: &str) -> String {
    let t = name.trim();
    let t = t.find('(').map_or(t, |i| &t[..i]);
    t.trim().to_ascii_lowercase()
}

/// Tools whose main input is a file path.
const FILE_TOOLS: &[&str] = &["write", "edit", "multiedit", "read", "notebookedit"];

/// The file-editing family: a deny or ask rule on one of them binds them all.
pub const EDIT_FAMILY: &[&str] = &["write", "edit", "multiedit", "notebookedit"];

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
    /// The agent's working directory: relative paths and patterns are relative to it.
    pub cwd: Option<PathBuf>,
    /// The file a file tool works on, or the `path` a Grep or Glob searches. The caller
    /// resolves `canonical` (herd-core does no I/O): allow rules match only that.
    pub path: Option<PathRef>,
    /// A Bash call's line as analysed: its commands and redirection writes.
    pub bash: Option<BashLine>,
}

impl Call {
    pub fn new(raw_tool_name: &str, input: &Value, cwd: Option<&Path>) -> Self {
        let tool = normalize_tool(raw_tool_name);
        let main_input = main_input(&tool, input);
        let path = match tool.as_str() {
            t if FILE_TOOLS.contains(&t) => main_input.clone(),
            "grep" | "glob" => input.get("path").and_then(Value::as_str).map(str::to_owned),
            _ => None,
        }
        .map(|given| PathRef { given: Some(given), canonical: None });
        let bash = (tool == "bash").then(|| analyze_bash(main_input.as_deref().unwrap_or("")));
        Self { tool, main_input, cwd: cwd.map(Path::to_path_buf), path, bash }
    }

    /// Every path the caller should resolve: the file path and each redirection target.
    pub fn paths_mut(&mut self) -> impl Iterator<Item = &mut PathRef> {
        let writes = self.bash.iter_mut().flat_map(|b| b.writes.iter_mut().map(|w| &mut w.path));
        self.path.iter_mut().chain(writes)
    }

    /// The redirection writes of a Bash call, each as the Write call the rules judge.
    pub fn redirect_writes(&self) -> Vec<Call> {
        let writes: &[Redirect] = self.bash.as_ref().map_or(&[], |b| &b.writes);
        writes
            .iter()
            .map(|w| Call {
                tool: "write".into(),
                main_input: w.path.given.clone(),
                cwd: self.cwd.clone(),
                path: Some(w.path.clone()),
                bash: None,
            })
            .collect()
    }
}

/// How surely a rule matches a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verdict {
    No,
    /// It could: an expansion, an unprovable part of a Bash line or a path under a searched
    /// directory may make it match. A deny or ask rule that perhaps matches asks a person.
    Maybe,
    Yes,
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

    /// Whether this rule's pattern matches `call`'s main input as written, as a whole.
    pub fn matches(&self, call: &Call) -> bool {
        if self.tool != call.tool {
            return false;
        }
        match (&self.pattern, &call.main_input) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(p), Some(input)) => {
                glob_or_prefix(p, input)
                    || (FILE_TOOLS.contains(&call.tool.as_str())
                        && relative(p, call.cwd.as_deref(), input))
            }
        }
    }

    /// Whether the rule speaks about this tool as a deny or ask rule: its own tool, the whole
    /// file-editing family for any of its members, and Grep/Glob searching a path for Read.
    fn binds(&self, call: &Call) -> bool {
        self.tool == call.tool
            || (EDIT_FAMILY.contains(&self.tool.as_str())
                && EDIT_FAMILY.contains(&call.tool.as_str()))
            || (self.tool == "read"
                && matches!(call.tool.as_str(), "grep" | "glob")
                && call.path.is_some())
    }

    /// For deny and ask rules: whether the rule matches the call. Bash: any command the line
    /// runs (definitely: `Yes`; for some value of an expansion, or an unprovable line:
    /// `Maybe`), or the line as a whole. Files: the path as given or as resolved, for the whole
    /// edit family. Grep/Glob under a Read rule: the searched path (`Yes`) or a file under it
    /// (`Maybe`).
    pub fn judge(&self, call: &Call) -> Verdict {
        if !self.binds(call) {
            return Verdict::No;
        }
        let Some(p) = &self.pattern else { return Verdict::Yes };
        if self.matches(call) {
            return Verdict::Yes;
        }
        if let Some(line) = &call.bash {
            return judge_line(p, line);
        }
        match &call.path {
            _ if call.tool == "grep" || call.tool == "glob" => {
                let Some(path) = call.path.as_ref().filter(|_| self.tool == "read") else {
                    return Verdict::No;
                };
                if path_matches(p, path, call.cwd.as_deref(), false) {
                    return Verdict::Yes;
                }
                let mut forms = path_forms(path, call.cwd.as_deref());
                forms.extend(path.canonical.as_ref().map(|c| c.to_string_lossy().into_owned()));
                let under = forms.into_iter().any(|f| {
                    let mut w = Word::text(format!("{}/", f.trim_end_matches('/')));
                    w.push_unknown();
                    matches_some(p, std::slice::from_ref(&w))
                });
                if under { Verdict::Maybe } else { Verdict::No }
            }
            Some(path) if path.given.is_none() && path.canonical.is_none() => Verdict::Maybe,
            Some(path) if path_matches(p, path, call.cwd.as_deref(), false) => Verdict::Yes,
            _ => Verdict::No,
        }
    }

    /// For deny and ask rules: the rule surely matches the call.
    pub fn catches(&self, call: &Call) -> bool {
        self.judge(call) == Verdict::Yes
    }

    /// For allow rules: this rule covers one command of a Bash line, whatever its unknown
    /// words hold (an unknown may only be swallowed by a `*`).
    pub fn covers(&self, cmd: &Command) -> bool {
        match &self.pattern {
            None => true,
            Some(p) => cmd.forms(true).iter().any(|f| matches_all(p, f)),
        }
    }

    /// For allow rules on a non-Bash call: same tool, and for a file tool the resolved path
    /// matches (a path herd could not resolve is never allowed by a pattern).
    pub fn allows(&self, call: &Call) -> bool {
        if self.tool != call.tool {
            return false;
        }
        let Some(p) = &self.pattern else { return true };
        match &call.path {
            Some(path) if FILE_TOOLS.contains(&call.tool.as_str()) => {
                if path.given.is_none() && path.canonical.is_none() {
                    return matches_anything(p);
                }
                path_matches(p, path, call.cwd.as_deref(), true)
            }
            _ => call.main_input.as_deref().is_some_and(|i| glob_or_prefix(p, i)),
        }
    }

    /// For allow rules: this rule alone allows the call (see [`super::Policy::evaluate`]).
    pub fn permits(&self, call: &Call) -> bool {
        let p = super::Policy { allow: vec![self.clone()], ..super::Policy::default() };
        p.allowed_by(call).is_some()
    }
}

/// A pattern without `*` or `?`: a Bash allow rule of it allows exactly that line.
pub(crate) fn is_literal_line(pattern: &str) -> bool {
    !pattern.contains(['*', '?'])
}

fn glob_or_prefix(pattern: &str, input: &str) -> bool {
    match pattern.strip_suffix(":*") {
        Some(prefix) => input.starts_with(prefix),
        None => command_glob(pattern, input),
    }
}

/// A relative pattern matched against a path under the working directory.
fn relative(pattern: &str, cwd: Option<&Path>, input: &str) -> bool {
    !pattern.starts_with('/')
        && cwd.is_some_and(|cwd| {
            Path::new(input)
                .strip_prefix(cwd)
                .is_ok_and(|r| glob_match(pattern, &r.to_string_lossy()))
        })
}

fn judge_line(pattern: &str, line: &BashLine) -> Verdict {
    let mut verdict = if line.is_provable() { Verdict::No } else { Verdict::Maybe };
    for cmd in &line.commands {
        for form in cmd.forms(false) {
            if cmd.role != super::bash::Role::Guess && matches_all(pattern, &form) {
                return Verdict::Yes;
            }
            if matches_some(pattern, &form) {
                verdict = Verdict::Maybe;
            }
        }
    }
    verdict
}

/// `a/./b/../c` → `a/c`, lexically.
fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

/// The given path, and absolute under the working directory when relative.
fn path_forms(path: &PathRef, cwd: Option<&Path>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(g) = &path.given {
        out.push(g.clone());
        if let Some(cwd) = cwd {
            out.push(lexical(&cwd.join(g)).to_string_lossy().into_owned());
        }
    }
    out
}

/// The pattern matches the path: as given or resolved (deny, ask), or resolved only (allow).
fn path_matches(pattern: &str, path: &PathRef, cwd: Option<&Path>, resolved_only: bool) -> bool {
    let mut forms = if resolved_only { Vec::new() } else { path_forms(path, cwd) };
    forms.extend(path.canonical.as_ref().map(|c| c.to_string_lossy().into_owned()));
    forms.iter().any(|f| glob_match(pattern, f) || relative(pattern, cwd, f))
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
    fn deny_rules_bind_the_edit_family_and_searches_under_read() {
        let cwd = Path::new("/repo");
        let call = |tool: &str, input: Value| Call::new(tool, &input, Some(cwd));
        let edit = Rule::parse("Edit(secret/*)").unwrap();
        for tool in ["Write", "Edit", "MultiEdit"] {
            let c = call(tool, json!({"file_path": "/repo/secret/k"}));
            assert_eq!(edit.judge(&c), Verdict::Yes, "{tool}");
        }
        let nb = call("NotebookEdit", json!({"notebook_path": "secret/n.ipynb"}));
        assert_eq!(Rule::parse("Write(/repo/secret/*)").unwrap().judge(&nb), Verdict::Yes);
        assert_eq!(edit.judge(&call("Read", json!({"file_path": "/repo/secret/k"}))), Verdict::No);
        // A resolved path counts for deny rules: a symlink's target.
        let mut w = call("Write", json!({"file_path": "/repo/link/k"}));
        assert_eq!(edit.judge(&w), Verdict::No);
        w.paths_mut().for_each(|p| p.canonical = Some("/repo/secret/k".into()));
        assert_eq!(edit.judge(&w), Verdict::Yes);
        // Read rules and searches: the path itself, or a directory that may hold a match.
        let read = Rule::parse("Read(*.env)").unwrap();
        let grep = |path: &str| call("Grep", json!({"pattern": "x", "path": path}));
        assert_eq!(read.judge(&grep("/repo/.env")), Verdict::Yes);
        assert_eq!(read.judge(&grep("/repo")), Verdict::Maybe);
        assert_eq!(read.judge(&call("Grep", json!({"pattern": "x"}))), Verdict::No);
        assert_eq!(Rule::parse("Grep(*.env)").unwrap().judge(&grep("/repo/.env")), Verdict::No);
        // Allow rules need the resolved path.
        let allow = Rule::parse("Write(/repo/*)").unwrap();
        let mut w = call("Write", json!({"file_path": "/repo/a"}));
        assert!(!allow.allows(&w), "unresolved");
        w.paths_mut().for_each(|p| p.canonical = Some("/etc/a".into()));
        assert!(!allow.allows(&w), "a symlink out of /repo");
        w.paths_mut().for_each(|p| p.canonical = Some("/repo/a".into()));
        assert!(allow.allows(&w));
    }

    proptest! {
        #[test]
        fn normalisation_is_idempotent(s in ".{0,40}") {
            let once = normalize_tool(&s);
            prop_assert_eq!(normalize_tool(&once), once.clone());
        }

        #[test]
        fn parsing_never_panics(s in ".{0,60}") {
            let _ = Rule::parse(&s);
        }
    }
}
