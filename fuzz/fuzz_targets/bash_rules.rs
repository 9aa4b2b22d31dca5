//! Fuzz target: Bash lines never make the rules panic, and under allow-all + deny `Bash(rm *)`
//! a line decided Allow runs no command named rm — by an oracle that walks tree-sitter-bash's
//! tree on its own (not herd's command list): any command node named rm, a wrapper with an
//! `rm` argument, or a shell/`eval`/`trap` whose code string holds one (an argument alone, or
//! all of them joined as `eval` joins them).
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run bash_rules` (from fuzz/).
#![no_main]

use herd_core::permission::{Call, Decision, Policy, Rule, analyze_bash};
use libfuzzer_sys::fuzz_target;
use tree_sitter::{Node, Parser};

/// Wrappers and their options that take a value (from their manuals), and how many words
/// after the options come before the command (`timeout DURATION`, `flock FILE`, `chrt PRIO`).
const WRAPPERS: &[(&str, &str, usize)] = &[
    ("env", "uCS", 0),
    ("timeout", "sk", 1),
    ("nice", "n", 0),
    ("nohup", "", 0),
    ("stdbuf", "ioe", 0),
    ("time", "fo", 0),
    ("command", "", 0),
    ("exec", "a", 0),
    ("sudo", "ugCDhprtTUR", 0),
    ("doas", "uC", 0),
    ("xargs", "adEILnPs", 0),
    ("builtin", "", 0),
    ("setsid", "", 0),
    ("ionice", "cnpPu", 0),
    ("chrt", "TPD", 1),
    ("flock", "wE", 1),
    ("coproc", "", 0),
    ("!", "", 0),
    ("busybox", "", 0),
    ("then", "", 0),
    ("do", "", 0),
    ("else", "", 0),
    ("if", "", 0),
    ("while", "", 0),
    ("until", "", 0),
];

/// Whether a chain of wrappers ends in rm.
fn wraps_rm(name: &str, args: &[&str]) -> bool {
    let (mut name, mut args) = (name.to_owned(), args);
    for _ in 0..8 {
        let Some(at) = wrapped(&name, args) else { return false };
        let Some(word) = args.get(at) else { return false };
        name = crude(word);
        if name == "rm" {
            return true;
        }
        args = &args[at + 1..];
    }
    false
}

/// Where the command a wrapper runs stands, by position after options and assignments.
fn wrapped(name: &str, args: &[&str]) -> Option<usize> {
    let (_, takes, skip) = WRAPPERS.iter().find(|(n, _, _)| *n == name)?;
    let mut i = 0;
    while let Some(a) = args.get(i) {
        let a = unquote_word(a);
        if a == "--" {
            i += 1;
            break;
        }
        if a.starts_with('-') && a.len() > 1 {
            let last = a.chars().last().unwrap_or('-');
            i += if !a.starts_with("--") && takes.contains(last) { 2 } else { 1 };
        } else if a.contains('=') && (name == "env" || name == "sudo") {
            i += 1;
        } else {
            break;
        }
    }
    Some(i + skip)
}

/// Bash's quote removal on one word: single quotes keep everything, double quotes let a
/// backslash escape only `$`, `` ` ``, `"`, `\` and a newline, a bare backslash escapes any
/// character, a backslash-newline vanishes; `$'…'`/`$"…"` lose their `$`.
fn unquote_word(word: &str) -> String {
    let mut out = String::new();
    let mut quote: Option<char> = None;
    let mut chars = word.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('\''), c) => out.push(c),
            (Some(_), '\\') => match chars.peek() {
                Some(&n) if matches!(n, '$' | '`' | '"' | '\\' | '\n') => {
                    chars.next();
                    if n != '\n' {
                        out.push(n);
                    }
                }
                _ => out.push('\\'),
            },
            (Some(_), c) => out.push(c),
            (None, '\'' | '"') => quote = Some(c),
            (None, '$') if matches!(chars.peek(), Some('\'' | '"')) => {}
            (None, '\\') => {
                if let Some(n) = chars.next().filter(|n| *n != '\n') {
                    out.push(n);
                }
            }
            (None, c) => out.push(c),
        }
    }
    out
}

const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh"];

/// The code string a command runs: a shell's `-c` argument, `trap`'s action, `eval`'s and
/// `watch`'s arguments joined.
fn code_of(name: &str, args: &[&str]) -> Option<String> {
    let unquote = |a: &str| a.trim_matches(|c| c == '\'' || c == '"').to_owned();
    match name {
        "eval" | "watch" => Some(args.iter().map(|a| unquote(a)).collect::<Vec<_>>().join(" ")),
        "trap" => args.iter().find(|a| **a != "--").map(|a| unquote(a)),
        _ if SHELLS.contains(&name) => {
            let at = args.iter().position(|a| a.starts_with('-') && a.contains('c'))?;
            args.get(at + 1).map(|a| unquote(a))
        }
        _ => None,
    }
}

/// Quotes removed as bash removes them, a leading `$` and the directory stripped: crude, on
/// purpose (an unquoted `rm\\\\` is a command named `rm\\`, not rm).
fn crude(word: &str) -> String {
    let w = unquote_word(word);
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
            || wraps_rm(&name, args)
            || (name == "find"
                && args.windows(2).any(|p| {
                    matches!(crude(p[0]).as_str(), "-exec" | "-execdir" | "-ok" | "-okdir")
                        && crude(p[1]) == "rm"
                }))
            || code_of(&name, args).is_some_and(|c| oracle_runs_rm(&c, depth + 1))
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
