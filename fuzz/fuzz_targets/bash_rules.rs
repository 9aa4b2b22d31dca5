//! Fuzz target: Bash lines never make the rules panic, and under allow-all + deny `Bash(rm *)`
//! a line decided Allow runs no command named rm — by an oracle that walks tree-sitter-bash's
//! tree on its own (not herd's command list): any command node named rm, a wrapper with an
//! `rm` argument, or a shell/`eval`/`trap` whose code string holds one.
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run bash_rules` (from fuzz/).
#![no_main]

use herd_core::permission::{Call, Decision, Policy, Rule, analyze_bash};
use libfuzzer_sys::fuzz_target;
use tree_sitter::{Node, Parser};

const WRAPPERS: &[&str] = &[
    "env", "timeout", "nice", "nohup", "stdbuf", "time", "command", "exec", "sudo", "doas",
    "xargs", "find", "builtin", "setsid", "ionice", "chrt", "watch", "flock", "coproc", "!",
    "busybox", "then", "do", "else", "if", "while", "until",
];
const CODE: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "eval", "trap", "su", "watch", "flock"];

/// Quotes and backslashes dropped, the directory stripped: crude, on purpose.
fn crude(word: &str) -> String {
    let w: String = word.chars().filter(|c| !matches!(c, '\'' | '"' | '\\')).collect();
    let w = w.strip_prefix('$').unwrap_or(&w).to_owned();
    w.rsplit('/').next().unwrap_or("").to_owned()
}

fn oracle_runs_rm(code: &str, depth: usize) -> bool {
    if depth > 4 {
        return false;
    }
    // The same non-ASCII precaution herd takes (tree-sitter-bash 0.25 reads out of bounds).
    let ascii: String = code.bytes().map(|b| if b.is_ascii() { b as char } else { '.' }).collect();
    let mut parser = Parser::new();
    if parser.set_language(&tree_sitter_bash::LANGUAGE.into()).is_err() {
        return false;
    }
    let Some(tree) = parser.parse(&ascii, None) else { return false };
    let mut stack: Vec<Node> = vec![tree.root_node()];
    while let Some(n) = stack.pop() {
        stack.extend((0..n.child_count() as u32).filter_map(|i| n.child(i)));
        if n.kind() != "command" {
            continue;
        }
        let words: Vec<&str> = (0..n.child_count() as u32)
            .filter(|&i| {
                n.field_name_for_child(i) == Some("argument")
                    || n.child(i).is_some_and(|c| c.kind() == "command_name")
            })
            .filter_map(|i| n.child(i))
            .filter_map(|c| code.get(c.byte_range()))
            .collect();
        let Some(name) = words.first().map(|w| crude(w)) else { continue };
        let args = &words[1..];
        if name == "rm"
            || (WRAPPERS.contains(&name.as_str()) && args.iter().any(|a| crude(a) == "rm"))
            || (CODE.contains(&name.as_str())
                && args.iter().any(|a| {
                    let t = a.trim_matches(|c| c == '\'' || c == '"');
                    oracle_runs_rm(t, depth + 1)
                }))
        {
            return true;
        }
    }
    false
}

fuzz_target!(|data: &[u8]| {
    let line = String::from_utf8_lossy(data);
    let _ = analyze_bash(&line);
    let policy = Policy {
        allow: vec![Rule::parse("Bash").unwrap()],
        deny: vec![Rule::parse("Bash(rm *)").unwrap()],
        ..Policy::default()
    };
    let call = Call::new("Bash", &serde_json::json!({ "command": line }), None);
    let decision = policy.evaluate(&call, &[]);
    if matches!(decision, Decision::Allow { .. }) {
        assert!(!oracle_runs_rm(&line, 0), "allowed, yet the oracle sees rm run: {line:?}");
    }
});
