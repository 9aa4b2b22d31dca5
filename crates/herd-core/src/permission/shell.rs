//! How Bash rules see a compound command line: the simple commands it runs, split at shell
//! operators outside quotes, and whether it hides commands (substitutions, subshells).

/// A Bash command line as the rules see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandLine {
    /// The simple commands, split at `;`, `&`, `|`, `&&`, `||` and newlines outside quotes;
    /// trimmed, empty ones dropped.
    pub commands: Vec<String>,
    /// It runs something no split shows as a command of its own: `$(…)`, backticks, `<(…)`,
    /// `>(…)` or a subshell `( … )`. An allow rule never covers such a line.
    pub opaque: bool,
}

/// Split `line` into its simple commands (quote- and escape-aware).
pub fn command_line(line: &str) -> CommandLine {
    let chars: Vec<char> = line.chars().collect();
    let mut commands = Vec::new();
    let mut cur = String::new();
    let mut opaque = false;
    let (mut single, mut double) = (false, false);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if single {
            single = c != '\'';
            cur.push(c);
            i += 1;
            continue;
        }
        match c {
            '\\' => {
                cur.push(c);
                if let Some(n) = next {
                    cur.push(n);
                }
                i += 2;
                continue;
            }
            '\'' if !double => single = true,
            '"' => double = !double,
            '`' => opaque = true,
            '$' if next == Some('(') => opaque = true,
            '<' | '>' if next == Some('(') && !double => opaque = true,
            '(' | ')' if !double => opaque = true,
            ';' | '\n' | '|' if !double => {
                push_command(&mut commands, &mut cur);
                i += 1;
                continue;
            }
            // `2>&1`, `<&3` and `&>file` are redirections, not the background operator.
            '&' if !double
                && !matches!(cur.chars().last(), Some('>' | '<'))
                && next != Some('>') =>
            {
                push_command(&mut commands, &mut cur);
                i += 1;
                continue;
            }
            _ => {}
        }
        cur.push(c);
        i += 1;
    }
    push_command(&mut commands, &mut cur);
    CommandLine { commands, opaque }
}

fn push_command(commands: &mut Vec<String>, cur: &mut String) {
    let t = cur.trim();
    if !t.is_empty() {
        commands.push(t.to_owned());
    }
    cur.clear();
}

/// Every piece of `line` that might run as a command, for deny and ask rules: split at every
/// operator and substitution boundary, quotes ignored (so a quoted `;` splits too: a deny rule
/// may catch more, never less), each piece also without leading `VAR=value` assignments and
/// wrappers such as `sudo` or `env`.
pub fn command_pieces(line: &str) -> Vec<String> {
    let mut pieces = Vec::new();
    for raw in line.split(['\n', ';', '&', '|', '(', ')', '`', '{', '}']) {
        let raw = raw.trim().trim_start_matches('$').trim();
        if raw.is_empty() {
            continue;
        }
        pieces.push(raw.to_owned());
        let bare = strip_prefixes(raw).trim_matches(['\'', '"']).trim();
        if bare != raw && !bare.is_empty() {
            pieces.push(bare.to_owned());
        }
    }
    pieces
}

/// Commands that run their arguments as a command.
const WRAPPERS: &[&str] =
    &["sudo", "env", "command", "exec", "nohup", "time", "nice", "builtin", "eval", "xargs"];
/// Shells whose `-c` argument is a command line.
const SHELLS: &[&str] = &["sh", "bash", "zsh", "dash"];

fn strip_prefixes(mut s: &str) -> &str {
    loop {
        let (word, rest) = s.split_once(char::is_whitespace).unwrap_or((s, ""));
        let rest = rest.trim_start();
        let assignment = word.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
        if rest.is_empty() {
            return s;
        }
        if assignment || WRAPPERS.contains(&word) {
            s = rest;
        } else if SHELLS.contains(&word)
            && let Some(line) = rest.strip_prefix("-c ")
        {
            s = line.trim();
        } else {
            return s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cmds(line: &str) -> (Vec<String>, bool) {
        let c = command_line(line);
        (c.commands, c.opaque)
    }

    fn v(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn splits_at_operators_outside_quotes() {
        assert_eq!(cmds("cargo test"), (v(&["cargo test"]), false));
        assert_eq!(cmds("echo x && rm -rf ~"), (v(&["echo x", "rm -rf ~"]), false));
        assert_eq!(cmds("a; b || c | d & e\nf"), (v(&["a", "b", "c", "d", "e", "f"]), false));
        assert_eq!(cmds("echo 'a; b' \"c && d\""), (v(&["echo 'a; b' \"c && d\""]), false));
        assert_eq!(cmds(r"find . -exec rm {} \;"), (v(&[r"find . -exec rm {} \;"]), false));
        assert_eq!(cmds("cargo test 2>&1 | tee log"), (v(&["cargo test 2>&1", "tee log"]), false));
        assert_eq!(cmds("make &> out.txt"), (v(&["make &> out.txt"]), false));
        assert_eq!(cmds("ls;"), (v(&["ls"]), false));
    }

    #[test]
    fn substitutions_and_subshells_are_opaque() {
        for line in [
            "echo $(rm -rf ~)",
            "echo `id`",
            "echo \"$(id)\"",
            "(cd x && rm y)",
            "diff <(ls a) <(ls b)",
            "tee >(wc)",
        ] {
            assert!(command_line(line).opaque, "{line}");
        }
        for line in ["echo '$(id)'", "echo \"(x)\"", "echo $HOME", "git log --format='(%h)'"] {
            assert!(!command_line(line).opaque, "{line}");
        }
    }

    #[test]
    fn pieces_see_through_everything() {
        let p = command_pieces("echo \"$(sudo FOO=1 rm -rf /)\"; `curl x`");
        for want in ["rm -rf /", "curl x"] {
            assert!(p.iter().any(|s| s == want), "{want} not in {p:?}");
        }
        let p = command_pieces("bash -c 'rm -rf /' && eval \"curl x\"");
        for want in ["rm -rf /", "curl x"] {
            assert!(p.iter().any(|s| s == want), "{want} not in {p:?}");
        }
        let p = command_pieces("LD_PRELOAD=x.so env A=b cargo test");
        assert!(p.iter().any(|s| s == "cargo test"), "{p:?}");
        // A wrapper alone is kept as it is.
        assert_eq!(command_pieces("time"), vec!["time"]);
    }

    proptest! {
        #[test]
        fn never_panics(s in ".{0,80}") {
            let _ = command_line(&s);
            let _ = command_pieces(&s);
        }

        /// A simple command joined to anything by an operator is still seen, by both views.
        #[test]
        fn a_joined_command_is_seen(
            a in "[a-z][a-z ./-]{0,20}",
            b in "[a-z][a-z ./-]{0,20}",
            op in prop::sample::select(vec![";", "&&", "||", "|", "&", "\n"]),
        ) {
            let line = format!("{a} {op} {b}");
            let (a, b) = (a.trim().to_owned(), b.trim().to_owned());
            let c = command_line(&line);
            prop_assert!(!c.opaque);
            prop_assert_eq!(c.commands, vec![a.clone(), b.clone()]);
            let p = command_pieces(&line);
            prop_assert!(p.contains(&a) && p.contains(&b), "{:?}", p);
        }

        /// Without operators, quotes or substitutions the line is one command.
        #[test]
        fn a_plain_line_is_one_command(s in "[a-z][a-zA-Z0-9 ./=_-]{0,40}") {
            let c = command_line(&s);
            prop_assert!(!c.opaque);
            prop_assert_eq!(c.commands, vec![s.trim().to_owned()]);
        }
    }
}
