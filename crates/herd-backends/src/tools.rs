//! Tool names across CLIs: each CLI's own tools mapped onto Claude Code's vocabulary (the one
//! herd's rules, hooks and limits speak), the CLI's name kept, and inputs given the keys rules read.

use serde_json::{Map, Value};

/// A tool as herd's rules name it (`claude`) and as the CLI named it (`native`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolName {
    pub claude: String,
    pub native: String,
}

impl ToolName {
    /// `native` under its Claude Code name, if the table knows one, else under its own name.
    pub fn new(claude: Option<&str>, native: &str) -> Self {
        Self { claude: claude.unwrap_or(native).to_owned(), native: native.to_owned() }
    }
}

/// Gemini CLI 0.61.0's built-in tools (declared in its API requests), by their name in
/// Claude's vocabulary.
pub const GEMINI_TOOLS: &[(&str, &[&str])] = &[
    ("Bash", &["run_shell_command"]),
    ("Write", &["write_file"]),
    ("Edit", &["replace"]),
    ("Read", &["read_file", "read_many_files"]),
    ("Glob", &["list_directory", "glob"]),
    ("Grep", &["grep_search", "search_file_content"]),
    ("WebSearch", &["google_web_search"]),
    ("WebFetch", &["web_fetch"]),
    ("TodoWrite", &["write_todos"]),
    ("Agent", &["invoke_agent"]),
];

/// A gemini tool in Claude's vocabulary.
pub fn gemini_tool(native: &str) -> ToolName {
    let claude = GEMINI_TOOLS.iter().find(|(_, n)| n.contains(&native)).map(|(c, _)| *c);
    ToolName::new(claude, native)
}

/// Codex 0.169.0's tools (model-side names and `exec --json` item types) in Claude's vocabulary.
pub fn codex_tool(native: &str) -> ToolName {
    let claude = match native {
        "exec_command" | "shell" | "local_shell" | "container.exec" | "command_execution"
        | "write_stdin" => Some("Bash"),
        "apply_patch" | "file_change" => Some("Edit"),
        "view_image" => Some("Read"),
        "web_search" => Some("WebSearch"),
        "update_plan" | "todo_list" => Some("TodoWrite"),
        _ => None,
    };
    ToolName::new(claude, native)
}

/// An ACP tool call's `kind` (the protocol names no tool) in Claude's vocabulary.
pub fn acp_kind_tool(kind: &str) -> Option<&'static str> {
    match kind {
        "execute" => Some("Bash"),
        "edit" | "delete" | "move" => Some("Edit"),
        "read" => Some("Read"),
        "search" => Some("Grep"),
        "fetch" => Some("WebFetch"),
        _ => None,
    }
}

/// The script of a `<shell> -lc '<script>'` (or `-c`) command line, single quotes undone
/// (`'\''` included); any other command unchanged. codex reports every command this way.
pub fn unwrap_shell(command: &str) -> String {
    const SHELLS: [&str; 6] = ["/bin/bash", "/usr/bin/bash", "bash", "/bin/sh", "sh", "/bin/zsh"];
    for shell in SHELLS {
        for flag in [" -lc ", " -c "] {
            if let Some(script) = command.strip_prefix(shell).and_then(|r| r.strip_prefix(flag))
                && let Some(unquoted) = single_unquote(script)
            {
                return unquoted;
            }
        }
    }
    command.to_owned()
}

/// `'a'\''b'` -> `a'b`; `None` unless the whole string is single-quoted pieces.
fn single_unquote(s: &str) -> Option<String> {
    let mut out = String::new();
    let mut rest = s;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("\\'") {
            out.push('\'');
            rest = r;
            continue;
        }
        let body = rest.strip_prefix('\'')?;
        let end = body.find('\'')?;
        out.push_str(&body[..end]);
        rest = &body[end + 1..];
    }
    (!s.is_empty()).then_some(out)
}

/// A shell command from an argv array: the script of `[shell, -lc, script]`, else the words
/// joined by spaces.
pub fn command_from_argv(argv: &[Value]) -> Option<String> {
    let words: Vec<&str> = argv.iter().map(Value::as_str).collect::<Option<_>>()?;
    match words.as_slice() {
        [shell, flag, script] if matches!(*flag, "-lc" | "-c") && shell.ends_with("sh") => {
            Some((*script).to_owned())
        }
        _ => Some(words.join(" ")),
    }
}

/// `input` with the keys Claude's tool `claude` has, added from the CLI's spellings when
/// missing (Bash `command` from `cmd` or an argv array, file tools `file_path` from `path` /
/// `absolute_path`); every original key kept. Non-objects are wrapped as `{"input": …}`.
pub fn claude_input(claude: &str, input: &Value) -> Value {
    let mut map = match input {
        Value::Object(m) => m.clone(),
        Value::Null => Map::new(),
        other => Map::from_iter([("input".to_owned(), other.clone())]),
    };
    let has = |m: &Map<String, Value>, k: &str| m.get(k).is_some_and(Value::is_string);
    match claude {
        "Bash" if !has(&map, "command") => {
            let command = match map.get("cmd").or_else(|| map.get("command")) {
                Some(Value::String(s)) => Some(unwrap_shell(s)),
                Some(Value::Array(argv)) => command_from_argv(argv),
                _ => None,
            };
            if let Some(c) = command {
                map.insert("command".into(), Value::String(c));
            }
        }
        "Read" | "Write" | "Edit" if !has(&map, "file_path") => {
            let path = ["path", "absolute_path", "filePath"]
                .iter()
                .find_map(|k| map.get(*k).and_then(Value::as_str))
                .map(str::to_owned);
            if let Some(p) = path {
                map.insert("file_path".into(), Value::String(p));
            }
        }
        _ => {}
    }
    Value::Object(map)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn names_map_and_keep_the_native_one() {
        assert_eq!(
            gemini_tool("run_shell_command"),
            ToolName { claude: "Bash".into(), native: "run_shell_command".into() }
        );
        assert_eq!(gemini_tool("replace").claude, "Edit");
        assert_eq!(gemini_tool("save_memory").claude, "save_memory");
        assert_eq!(codex_tool("apply_patch").claude, "Edit");
        assert_eq!(codex_tool("exec_command").claude, "Bash");
        assert_eq!(acp_kind_tool("execute"), Some("Bash"));
        assert_eq!(acp_kind_tool("think"), None);
    }

    #[test]
    fn shell_wrappers_unwrap() {
        assert_eq!(unwrap_shell("/bin/bash -lc 'echo hello-from-bash'"), "echo hello-from-bash");
        assert_eq!(unwrap_shell(r"/bin/bash -lc 'echo '\''hi'\'''"), "echo 'hi'");
        assert_eq!(unwrap_shell("bash -c 'a'"), "a");
        assert_eq!(unwrap_shell("/bin/bash -lc echo"), "/bin/bash -lc echo");
        assert_eq!(unwrap_shell("/bin/bash -lc 'open"), "/bin/bash -lc 'open");
        assert_eq!(unwrap_shell("ls -la"), "ls -la");
        assert_eq!(
            command_from_argv(&[json!("/bin/bash"), json!("-lc"), json!("touch x")]).as_deref(),
            Some("touch x")
        );
        assert_eq!(command_from_argv(&[json!("ls"), json!("-l")]).as_deref(), Some("ls -l"));
        assert_eq!(command_from_argv(&[json!(1)]), None);
    }

    #[test]
    fn inputs_get_claude_keys() {
        assert_eq!(
            claude_input("Bash", &json!({"cmd": "/bin/bash -lc 'ls'", "workdir": "/r"})),
            json!({"cmd": "/bin/bash -lc 'ls'", "workdir": "/r", "command": "ls"})
        );
        assert_eq!(
            claude_input("Bash", &json!({"command": ["/bin/bash", "-lc", "touch a"]})),
            json!({"command": "touch a"})
        );
        assert_eq!(
            claude_input("Read", &json!({"absolute_path": "/a"})),
            json!({"absolute_path": "/a", "file_path": "/a"})
        );
        assert_eq!(
            claude_input("Edit", &json!("*** Begin Patch")),
            json!({"input": "*** Begin Patch"})
        );
        assert_eq!(claude_input("Bash", &Value::Null), json!({}));
    }
}
