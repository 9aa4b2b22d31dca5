//! Seeing through what runs other commands — wrappers and their options, `xargs`, `find -exec`,
//! the code strings of shells, `eval`, `trap`, `su -c`, `git`'s global options — and builtins
//! that run code no command shows.

use super::syntax::{Ctx, Walk};
use super::{Command, Role};
use crate::permission::pattern::{Piece, Word};

/// Tools that run a command given in their arguments, whose options herd does not model: each
/// later argument is taken as a possible command (a guess: deny and ask rules ask about it).
const GUESSED: &[&str] = &[
    "strace",
    "ltrace",
    "taskset",
    "chroot",
    "unshare",
    "nsenter",
    "prlimit",
    "runuser",
    "systemd-run",
    "firejail",
    "bwrap",
    "proot",
    "valgrind",
    "numactl",
    "catchsegv",
    "cgexec",
    "sg",
    "parallel",
    "script",
    "faketime",
    "fakeroot",
    "torsocks",
    "proxychains",
    "ssh-agent",
];

const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "posh"];

/// What a command does with its arguments.
enum Step {
    /// Runs the command at this index of argv (its own assignments added for it).
    Inner {
        at: usize,
        role: Role,
        env: Vec<Word>,
    },
    /// Runs this code string (`None`: not literal).
    Code {
        code: Option<String>,
        role: Role,
    },
    /// Runs this command instead (`xargs CMD` → `CMD …`).
    Then {
        argv: Vec<Word>,
        role: Role,
    },
    Done(Role),
    Unprovable(Role, &'static str),
}

/// Strip the directory from a command name: `/bin/rm` → `rm`, `$d/rm` → `rm`.
pub(super) fn command_name(w: &Word) -> Word {
    let last = w.0.iter().enumerate().rev().find_map(|(i, p)| match p {
        Piece::Text(t) => t.rfind('/').map(|at| (i, at)),
        Piece::Unknown => None,
    });
    let Some((i, at)) = last else { return w.clone() };
    let mut out = Word::default();
    if let Piece::Text(t) = &w.0[i] {
        out.push_text(&t[at + 1..]);
    }
    out.append(&Word(w.0[i + 1..].to_vec()));
    out
}

/// Skip options: the index of the first argument after them (`--` ends them), and the option
/// words seen. `short_val`: short options taking a value; `long_val`: long ones.
fn options(args: &[Word], short_val: &str, long_val: &[&str]) -> (usize, Vec<String>) {
    let (mut i, mut seen) = (0, Vec::new());
    while i < args.len() {
        let Some(a) = args[i].literal() else { break };
        if a == "--" {
            i += 1;
            break;
        }
        if !a.starts_with('-') || a == "-" {
            break;
        }
        i += if let Some(long) = a.strip_prefix("--") {
            if !long.contains('=') && long_val.contains(&long) { 2 } else { 1 }
        } else {
            let cluster = &a[1..];
            let takes = cluster
                .char_indices()
                .find(|(_, c)| short_val.contains(*c))
                .is_some_and(|(k, c)| k + c.len_utf8() == cluster.len());
            if takes { 2 } else { 1 }
        };
        seen.push(a);
    }
    (i.min(args.len()), seen)
}

/// A short flag in any cluster (`-xc` has `c`) or a long one.
fn has(seen: &[String], short: char, long: &str) -> bool {
    seen.iter().any(|s| match s.strip_prefix("--") {
        Some(l) => l == long || l.starts_with(&format!("{long}=")),
        None => s[1..].contains(short),
    })
}

fn is_assignment(w: &Word) -> Option<String> {
    let Some(Piece::Text(t)) = w.0.first() else { return None };
    let (name, _) = t.split_once('=')?;
    let ok = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '%');
    ok.then(|| name.to_owned())
}

/// Variables whose value bash runs.
pub(super) fn check_variable(walk: &mut Walk, name: &str, cx: &Ctx) {
    if matches!(name, "PS4" | "PROMPT_COMMAND" | "BASH_ENV" | "ENV")
        || name.starts_with("BASH_FUNC_")
    {
        walk.unprovable(format!("setting {name} makes bash run its value"), cx.guess);
    }
}

/// Code words joined by spaces, as `eval` and `watch` join them.
fn joined(args: &[Word]) -> Option<String> {
    let parts: Option<Vec<String>> = args.iter().map(Word::literal).collect();
    parts.map(|p| p.join(" "))
}

/// List the commands `argv` runs (with `assignments` in force), seeing through wrappers.
pub(super) fn expand(walk: &mut Walk, mut argv: Vec<Word>, mut assignments: Vec<Word>, cx: &Ctx) {
    if cx.depth > super::syntax::MAX_CODE_DEPTH {
        walk.unprovable("commands nest too deeply", cx.guess);
        return;
    }
    for _ in 0..64 {
        // `time FOO=1 rm x`: bash's `time` and `!` are keywords, the assignments after them
        // belong to the command (and an assignment a wrapper passes as a name is kept too).
        while let Some(name) = argv.first().and_then(is_assignment) {
            check_variable(walk, &name, cx);
            assignments.push(argv.remove(0));
        }
        if argv.is_empty() {
            return;
        }
        argv[0] = command_name(&argv[0]);
        let step = match argv[0].literal() {
            Some(name) => step(walk, &name, &argv, &assignments, cx),
            None => Step::Done(Role::Runs),
        };
        let role_of = |r: Role| if cx.guess { Role::Guess } else { r };
        let mut cmd = Command {
            assignments: assignments.clone(),
            argv: argv.clone(),
            without_globals: None,
            globals_harmless: false,
            role: Role::Runs,
        };
        if argv[0].literal().as_deref() == Some("git") {
            git_globals(&mut cmd);
        }
        match step {
            Step::Inner { at, role, env } => {
                cmd.role = role_of(role);
                walk.push(cmd);
                assignments.extend(env);
                argv.drain(..at.min(argv.len()));
            }
            Step::Code { code, role } => {
                cmd.role = role_of(role);
                walk.push(cmd);
                match code {
                    Some(c) => walk.code(&c, &assignments, cx.depth + 1, cx.guess),
                    None => walk.unprovable("code built at run time (`eval`, `sh -c`)", cx.guess),
                }
                return;
            }
            Step::Then { argv: next, role } => {
                cmd.role = role_of(role);
                walk.push(cmd);
                argv = next;
            }
            Step::Done(role) => {
                cmd.role = role_of(role);
                walk.push(cmd);
                return;
            }
            Step::Unprovable(role, why) => {
                cmd.role = role_of(role);
                walk.push(cmd);
                walk.unprovable(why, cx.guess);
                return;
            }
        }
    }
    walk.unprovable("wrappers nest too deeply", cx.guess);
}

fn step(walk: &mut Walk, name: &str, argv: &[Word], assignments: &[Word], cx: &Ctx) -> Step {
    use Role::{Runs, Wrapper};
    let args = &argv[1..];
    let inner = |at: usize, role| {
        if at < argv.len() { Step::Inner { at, role, env: Vec::new() } } else { Step::Done(Runs) }
    };
    match name {
        "!" => inner(1, Wrapper),
        // The parser took a reserved word for a command (`! if …` is read as commands `if …`,
        // `then …`): bash reads the line otherwise. What follows the word is judged as a command.
        "if" | "then" | "else" | "elif" | "fi" | "do" | "done" | "case" | "esac" | "while"
        | "until" | "for" | "in" | "select" | "function" | "{" | "}" | "[[" | "]]" => {
            walk.unprovable("a reserved word where a command stands", cx.guess);
            inner(1, Wrapper)
        }
        "env" => {
            let (i, seen) = options(args, "uCS", &["unset", "chdir", "split-string"]);
            if has(&seen, 'S', "split-string") {
                return Step::Unprovable(Runs, "`env -S` splits a string into a command");
            }
            let mut env = Vec::new();
            let mut j = i;
            while let Some(n) = args.get(j).and_then(is_assignment) {
                check_variable(walk, &n, cx);
                env.push(args[j].clone());
                j += 1;
            }
            if j + 1 < argv.len() {
                Step::Inner { at: j + 1, role: Wrapper, env }
            } else {
                Step::Done(Runs)
            }
        }
        "timeout" => inner(1 + options(args, "sk", &["signal", "kill-after"]).0 + 1, Wrapper),
        "nice" => inner(1 + options(args, "n", &["adjustment"]).0, Wrapper),
        "nohup" | "setsid" | "builtin" | "coproc" | "busybox" => {
            inner(1 + options(args, "", &[]).0, Wrapper)
        }
        "stdbuf" => inner(1 + options(args, "ioe", &["input", "output", "error"]).0, Wrapper),
        "time" => inner(1 + options(args, "fo", &["format", "output"]).0, Wrapper),
        "exec" => inner(1 + options(args, "a", &[]).0, Wrapper),
        "command" => {
            let (i, seen) = options(args, "", &[]);
            if seen.iter().any(|s| s.contains(['v', 'V'])) {
                Step::Done(Runs)
            } else {
                inner(1 + i, Wrapper)
            }
        }
        "sudo" | "doas" => {
            let long = [
                "user",
                "group",
                "close-from",
                "chdir",
                "host",
                "prompt",
                "role",
                "type",
                "command-timeout",
                "other-user",
                "chroot",
            ];
            let (i, seen) = options(args, if name == "sudo" { "ugCDhprtTUR" } else { "uC" }, &long);
            if has(&seen, 'e', "edit") && name == "sudo" {
                return Step::Done(Runs);
            }
            let mut env = Vec::new();
            let mut j = i;
            while name == "sudo"
                && let Some(n) = args.get(j).and_then(is_assignment)
            {
                check_variable(walk, &n, cx);
                env.push(args[j].clone());
                j += 1;
            }
            if j + 1 < argv.len() {
                Step::Inner { at: j + 1, role: Runs, env }
            } else if has(&seen, 's', "shell") || has(&seen, 'i', "login") {
                Step::Unprovable(Runs, "a root shell reading its input")
            } else {
                Step::Done(Runs)
            }
        }
        "ionice" => {
            let (i, seen) = options(args, "cnpPu", &["class", "classdata", "pid", "pgid", "uid"]);
            if has(&seen, 'p', "pid") || has(&seen, 'P', "pgid") || has(&seen, 'u', "uid") {
                Step::Done(Runs)
            } else {
                inner(1 + i, Wrapper)
            }
        }
        "chrt" => {
            let (i, seen) =
                options(args, "TPD", &["sched-runtime", "sched-period", "sched-deadline"]);
            if has(&seen, 'p', "pid") || has(&seen, 'm', "max") {
                Step::Done(Runs)
            } else {
                inner(1 + i + 1, Wrapper)
            }
        }
        "watch" => {
            let (i, seen) = options(args, "nq", &["interval", "equexit"]);
            if has(&seen, 'x', "exec") {
                inner(1 + i, Wrapper)
            } else if i < args.len() {
                Step::Code { code: joined(&args[i..]), role: Wrapper }
            } else {
                Step::Done(Runs)
            }
        }
        "flock" => {
            let (i, _) = options(args, "wE", &["timeout", "wait", "conflict-exit-code"]);
            match args.get(i + 1).and_then(Word::literal).as_deref() {
                Some("-c" | "--command") => {
                    Step::Code { code: args.get(i + 2).and_then(Word::literal), role: Wrapper }
                }
                _ => inner(1 + i + 1, Wrapper),
            }
        }
        "xargs" => {
            let long = [
                "arg-file",
                "delimiter",
                "eof",
                "replace",
                "max-lines",
                "max-args",
                "max-procs",
                "max-chars",
                "process-slot-var",
            ];
            let (i, _) = options(args, "adEILnPs", &long);
            let mut argv: Vec<Word> =
                if i < args.len() { args[i..].to_vec() } else { vec![Word::text("echo")] };
            argv.push(Word::unknown());
            Step::Then { argv, role: Wrapper }
        }
        "find" => {
            find_exec(walk, args, assignments, cx);
            Step::Done(Runs)
        }
        "eval" => Step::Code { code: joined(args), role: Wrapper },
        "trap" => {
            let args = match args.first().and_then(Word::literal).as_deref() {
                Some("--") => &args[1..],
                _ => args,
            };
            match args.first().map(Word::literal) {
                Some(Some(a)) if a.starts_with('-') && a != "-" => Step::Done(Runs),
                Some(Some(a)) if args.len() >= 2 && !a.is_empty() && a != "-" => {
                    Step::Code { code: Some(a), role: Wrapper }
                }
                Some(None) if args.len() >= 2 => Step::Code { code: None, role: Wrapper },
                _ => Step::Done(Runs),
            }
        }
        "su" => su(args),
        "source" | "." => Step::Unprovable(Runs, "`source` runs a file herd cannot read"),
        "alias" if args.iter().any(|a| a.literal().is_none_or(|t| t.contains('='))) => {
            Step::Unprovable(Runs, "an alias can rename any command")
        }
        "fc" => Step::Unprovable(Runs, "`fc` runs commands from the history"),
        "enable" | "bind" | "complete" | "compgen" | "mapfile" | "readarray" | "hash" => {
            let flags = match name {
                "enable" => "f",
                "bind" => "x",
                "hash" => "p",
                "complete" | "compgen" => "CF",
                _ => "C",
            };
            let risky = args.iter().any(|a| {
                a.literal().is_none_or(|t| t.starts_with('-') && t.contains(|c| flags.contains(c)))
            });
            if risky {
                Step::Unprovable(Runs, "a builtin that loads or runs code given to it")
            } else {
                Step::Done(Runs)
            }
        }
        "let"
            if args.iter().any(|a| {
                a.literal()
                    .is_none_or(|t| t.contains(|c: char| c.is_ascii_alphabetic() || c == '$'))
            }) =>
        {
            Step::Unprovable(
                Runs,
                "arithmetic on a variable's value (bash runs `a[$(…)]` found in it)",
            )
        }
        "declare" | "typeset" | "local" | "export" | "readonly" | "unset" | "printf" | "read"
        | "test" | "[" | "wait" | "getopts" => {
            if declares_risky(name, args) {
                Step::Unprovable(
                    Runs,
                    "a subscripted or integer variable evaluates its value as arithmetic",
                )
            } else {
                Step::Done(Runs)
            }
        }
        _ if SHELLS.contains(&name) => shell(args),
        // Guesses are not guessed into again (`strace strace …` stays linear).
        _ if GUESSED.contains(&name) && !cx.guess => {
            for k in 1..argv.len().min(10) {
                if argv[k].literal().is_some_and(|a| !a.starts_with('-')) {
                    let guess = Ctx { guess: true, depth: cx.depth + 1, ..*cx };
                    expand(walk, argv[k..].to_vec(), assignments.to_vec(), &guess);
                }
            }
            Step::Done(Runs)
        }
        _ => Step::Done(Runs),
    }
}

/// `find … -exec CMD {} ;` (also `-execdir`, `-ok`, `-okdir`, ending in `;` or `+`).
fn find_exec(walk: &mut Walk, args: &[Word], assignments: &[Word], cx: &Ctx) {
    let mut i = 0;
    while i < args.len() {
        let flag = args[i].literal();
        i += 1;
        if !matches!(flag.as_deref(), Some("-exec" | "-execdir" | "-ok" | "-okdir")) {
            continue;
        }
        let start = i;
        while i < args.len() && !matches!(args[i].literal().as_deref(), Some(";" | "+")) {
            i += 1;
        }
        let cmd: Vec<Word> = args[start..i]
            .iter()
            .map(|w| if w.literal().as_deref() == Some("{}") { Word::unknown() } else { w.clone() })
            .collect();
        expand(walk, cmd, assignments.to_vec(), &Ctx { depth: cx.depth + 1, ..*cx });
    }
}

/// `bash [opts] -c CODE [name args…]`; any other use runs a script or the shell's input.
fn shell(args: &[Word]) -> Step {
    let mut has_c = false;
    let mut i = 0;
    while i < args.len() {
        let Some(a) = args[i].literal() else { break };
        if a == "--" {
            i += 1;
            break;
        }
        if a == "-" || !(a.starts_with('-') || a.starts_with('+')) {
            break;
        }
        if let Some(long) = a.strip_prefix("--") {
            if matches!(long, "version" | "help") {
                return Step::Done(Role::Runs);
            }
            i += if matches!(long, "rcfile" | "init-file") { 2 } else { 1 };
            continue;
        }
        has_c |= a.starts_with('-') && a.contains('c');
        i += if a.ends_with(['o', 'O']) { 2 } else { 1 };
    }
    match (has_c, args.get(i)) {
        (true, Some(code)) => Step::Code { code: code.literal(), role: Role::Wrapper },
        (true, None) => Step::Done(Role::Runs),
        (false, _) => Step::Unprovable(Role::Runs, "a shell running a script or its input"),
    }
}

fn su(args: &[Word]) -> Step {
    for (i, a) in args.iter().enumerate() {
        let Some(a) = a.literal() else { continue };
        if matches!(a.as_str(), "-c" | "--command" | "--session-command") {
            return Step::Code { code: args.get(i + 1).and_then(Word::literal), role: Role::Runs };
        }
        if let Some(code) = a.strip_prefix("--command=") {
            return Step::Code { code: Some(code.to_owned()), role: Role::Runs };
        }
    }
    Step::Unprovable(Role::Runs, "`su` starts a shell reading its input")
}

/// Builtins that take variable names evaluate a subscript (`a[$(…)]`) as arithmetic, and an
/// integer (`-i`) or nameref (`-n`) attribute evaluates values.
fn declares_risky(name: &str, args: &[Word]) -> bool {
    let bracket = |w: &Word| w.literal().is_none_or(|t| t.contains('['));
    match name {
        "printf" => {
            args.windows(2).any(|p| p[0].literal().as_deref() == Some("-v") && bracket(&p[1]))
        }
        "test" | "[" => {
            args.windows(2).any(|p| p[0].literal().as_deref() == Some("-v") && bracket(&p[1]))
        }
        "declare" | "typeset" | "local" => {
            args.iter().any(|a| {
                a.literal().is_some_and(|t| t.starts_with(['-', '+']) && t.contains(['i', 'n']))
            }) || args.iter().any(|a| {
                a.literal().is_some_and(|t| t.split('=').next().is_some_and(|n| n.contains('[')))
            })
        }
        _ => args.iter().any(|a| {
            a.literal().is_some_and(|t| t.split('=').next().is_some_and(|n| n.contains('[')))
        }),
    }
}

/// `git -C dir -c k=v --no-pager push` → `git push`.
fn git_globals(cmd: &mut Command) {
    const VALUE: &[&str] = &[
        "-C",
        "-c",
        "--git-dir",
        "--work-tree",
        "--namespace",
        "--super-prefix",
        "--config-env",
        "--attr-source",
        "--list-cmds",
    ];
    const HARMLESS: &[&str] = &[
        "-p",
        "--paginate",
        "-P",
        "--no-pager",
        "--no-replace-objects",
        "--no-lazy-fetch",
        "--literal-pathspecs",
        "--glob-pathspecs",
        "--noglob-pathspecs",
        "--icase-pathspecs",
        "--no-optional-locks",
        "--no-advice",
        "--bare",
    ];
    let (mut i, mut harmless) = (1, true);
    while i < cmd.argv.len() {
        let Some(a) = cmd.argv[i].literal() else { break };
        if !a.starts_with('-') {
            break;
        }
        harmless &= HARMLESS.contains(&a.as_str());
        i += if VALUE.contains(&a.as_str()) { 2 } else { 1 };
    }
    if i > 1 {
        let rest = cmd.argv.get(i..).unwrap_or_default();
        cmd.without_globals =
            Some(std::iter::once(Word::text("git")).chain(rest.iter().cloned()).collect());
        cmd.globals_harmless = harmless;
    }
}
