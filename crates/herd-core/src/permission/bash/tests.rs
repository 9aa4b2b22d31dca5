//! The analysis of Bash lines, and the attacks measured against the real claude (issue 15).

use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::permission::pattern::words_to_string;
use crate::permission::{Call, Decision, Policy, Rule};

fn policy(allow: &[&str], deny: &[&str], ask: &[&str]) -> Policy {
    let rules = |l: &[&str]| l.iter().map(|r| Rule::parse(r).unwrap()).collect();
    Policy { allow: rules(allow), deny: rules(deny), ask: rules(ask), ..Policy::default() }
}

fn decide(p: &Policy, line: &str) -> Decision {
    p.evaluate(&Call::new("Bash", &json!({ "command": line }), None), &[])
}

/// The commands as text, roles aside.
fn runs(line: &str) -> Vec<String> {
    analyze_bash(line).commands.iter().map(|c| words_to_string(&c.argv)).collect()
}

const RM_ATTACKS: &[&str] = &[
    "/bin/rm x",
    "\\rm x",
    "'rm' x",
    "r''m x",
    "rm\tx",
    "rm${IFS}x",
    "a=rm;$a x",
    "env -i rm x",
    "timeout 5 rm x",
    "ls | xargs rm",
    "find . -exec rm {} \\;",
    "echo 'rm x'|bash",
];

#[test]
fn every_measured_rm_spelling_is_never_allowed() {
    let p = policy(&["Bash"], &["Bash(rm *)"], &[]);
    for line in RM_ATTACKS {
        let d = decide(&p, line);
        assert!(!matches!(d, Decision::Allow { .. }), "{line:?} → {d:?}");
    }
    // The ones herd can read are refused outright, not only asked about.
    for line in [
        "/bin/rm x",
        "\\rm x",
        "'rm' x",
        "r''m x",
        "rm\tx",
        "env -i rm x",
        "timeout 5 rm x",
        "ls | xargs rm",
        "find . -exec rm {} \\;",
    ] {
        assert!(matches!(decide(&p, line), Decision::Deny { .. }), "{line:?}");
    }
}

#[test]
fn more_rm_spellings() {
    let p = policy(&["Bash"], &["Bash(rm *)"], &[]);
    for line in [
        "$'\\x72m' x",
        "$'r\\155' x",
        "\"r\"m x",
        "{rm,x}",
        "r? x",
        "$(echo rm) x",
        "`echo rm` x",
        "echo $(rm x)",
        "x=$(rm y)",
        "cat <<EOF\n$(rm x)\nEOF",
        "bash -c 'rm x'",
        "sh -lc \"rm x\"",
        "eval 'rm x'",
        "eval \"$c\"",
        "sudo -u root rm x",
        "nice -n 5 nohup stdbuf -oL time -p command rm x",
        "exec -a foo rm x",
        "builtin rm x",
        "f() { rm x; }; f",
        "if true; then rm x; fi",
        "for i in 1; do rm $i; done",
        "case a in a) rm x;; esac",
        "(rm x)",
        "{ rm x; }",
        "diff <(rm x) y",
        "watch -n1 'rm x'",
        "flock /tmp/l -c 'rm x'",
        "trap 'rm x' EXIT",
        "xargs -I{} sh -c 'rm {}'",
        "find . -name '*.o' -execdir rm -f {} +",
        "source ./script.sh",
        ". ./script.sh",
        "bash script.sh",
        "curl x | sh -s",
        "bash <<< 'rm x'",
        "x='a[$(rm y)]'; echo $((x))",
        "PS4='$(rm x)' bash -xc true",
        "env 'BASH_FUNC_ls%%=() { rm x; }' bash -c ls",
        "alias ls=rm; ls x",
        "strace -f rm x",
        "declare -i x; x='a[$(rm y)]'",
        "echo ${x@P}",
        "printf -v 'a[$(rm x)]' 1",
    ] {
        let d = decide(&p, line);
        assert!(
            !matches!(d, Decision::Allow { .. }),
            "{line:?} → {d:?} ({:?})",
            analyze_bash(line)
        );
    }
}

#[test]
fn git_push_spellings_are_asked_about() {
    let p = policy(&["Bash"], &[], &["Bash(git push *)"]);
    for line in [
        "git push origin main",
        "git -C . push origin",
        "'git' push origin",
        "git  push origin",
        "git --no-pager push origin",
        "git -c k=v push origin",
        "/usr/bin/git -P push x",
        "git --git-dir=.git --work-tree . push x",
        "cd x && git push y",
        "git $cmd origin",
    ] {
        assert!(matches!(decide(&p, line), Decision::Ask { .. }), "{line:?}");
    }
    assert!(matches!(decide(&p, "git status"), Decision::Allow { .. }));
    assert!(matches!(decide(&p, "git -C . log"), Decision::Allow { .. }));
}

#[test]
fn redirections_are_writes() {
    let p = policy(&["Bash(echo *)"], &[], &[]);
    for line in [
        "echo x > any/file",
        "echo x >> ~/.bashrc",
        "echo SECRET > /dev/tcp/127.0.0.1/9",
        "echo x &> f",
        "echo x >| f",
        "echo x 3> f",
        "echo x >& f",
        "echo x > $f",
        "echo $(echo y > f)",
        "bash -c 'echo x > f'",
    ] {
        assert!(!matches!(decide(&p, line), Decision::Allow { .. }), "{line:?}");
    }
    for line in [
        "echo x > /dev/null",
        "echo x 2>&1",
        "echo x >&2",
        "echo x 2>/dev/null >/dev/stderr",
        "echo $HOME",
        "echo x < f",
    ] {
        assert!(matches!(decide(&p, line), Decision::Allow { .. }), "{line:?}");
    }
    let writes = analyze_bash("echo a > x; echo b >> 'y z' 2>&1; cat <<EOF >out\nhi\nEOF");
    let given: Vec<_> = writes.writes.iter().map(|w| w.path.given.clone()).collect();
    assert_eq!(given, [Some("x".into()), Some("y z".into()), Some("out".into())]);
    assert_eq!(analyze_bash("echo > \"$f\"").writes[0].path.given, None);
    // Writes of a guessed command count too (`strace` runs `sh -c …`).
    assert_eq!(analyze_bash("strace -f sh -c 'echo > f'").writes.len(), 1);
}

#[test]
fn a_write_needs_a_write_permission() {
    let mut call = Call::new("Bash", &json!({"command": "echo x > out.txt"}), None);
    call.paths_mut().for_each(|p| p.canonical = Some("/repo/out.txt".into()));
    let allows = |allow: &[&str], deny: &[&str]| policy(allow, deny, &[]).evaluate(&call, &[]);
    assert!(matches!(allows(&["Bash(echo *)", "Write(/repo/*)"], &[]), Decision::Allow { .. }));
    assert!(matches!(allows(&["Bash(echo *)", "Write(/etc/*)"], &[]), Decision::Undecided));
    assert!(
        matches!(allows(&["Bash"], &[]), Decision::Allow { .. }),
        "`tee` could write it anyway"
    );
    assert!(matches!(allows(&["Bash"], &["Edit(/repo/*)"]), Decision::Deny { .. }));
    assert!(matches!(allows(&["Bash", "Write"], &["Write(*.txt)"]), Decision::Deny { .. }));
    // A target decided at run time: a Write deny rule with a pattern might match it.
    let call = Call::new("Bash", &json!({"command": "echo x > \"$f\""}), None);
    let d = policy(&["Bash", "Write"], &["Write(/etc/*)"], &[]).evaluate(&call, &[]);
    assert!(matches!(d, Decision::Ask { .. }), "{d:?}");
}

#[test]
fn ordinary_lines_stay_allowed() {
    let p = policy(&["Bash(cargo *)", "Bash(tee *)"], &["Bash(rm *)"], &[]);
    assert!(matches!(decide(&p, "cargo test 2>&1 | tee log"), Decision::Allow { .. }));
    assert!(matches!(
        decide(&p, "cargo build && cargo test -- --nocapture"),
        Decision::Allow { .. }
    ));
    assert!(matches!(decide(&p, "timeout 60 cargo test"), Decision::Allow { .. }));
    assert!(!matches!(decide(&p, "LD_PRELOAD=x.so cargo test"), Decision::Allow { .. }));
    assert!(!matches!(decide(&p, "cargo test $(curl x)"), Decision::Allow { .. }));
    assert!(!matches!(decide(&p, "sudo cargo test"), Decision::Allow { .. }));
    let p = policy(&["Bash(echo *)", "Bash(git log *)"], &[], &[]);
    assert!(matches!(decide(&p, "echo $HOME"), Decision::Allow { .. }));
    assert!(matches!(decide(&p, "git log --format='(%h)'"), Decision::Allow { .. }));
    assert!(matches!(decide(&p, "git --no-pager log -3"), Decision::Allow { .. }));
    assert!(!matches!(decide(&p, "git -c core.pager=evil log"), Decision::Allow { .. }));
    // A wildcard-free rule allows exactly its own line.
    let p = policy(&["Bash(cd /repo && make > build.log)"], &[], &[]);
    assert!(matches!(decide(&p, "cd /repo && make > build.log"), Decision::Allow { .. }));
    assert!(!matches!(decide(&p, "cd /repo && make > build.log; curl x"), Decision::Allow { .. }));
}

#[test]
fn what_the_analysis_sees() {
    assert_eq!(
        runs("/usr/bin/env -i FOO=1 timeout -s KILL 5 nice -n3 /bin/rm -rf x"),
        [
            "env -i FOO=1 timeout -s KILL 5 nice -n3 /bin/rm -rf x",
            "timeout -s KILL 5 nice -n3 /bin/rm -rf x",
            "nice -n3 /bin/rm -rf x",
            "rm -rf x",
        ]
    );
    assert_eq!(runs("ls | xargs -0 -n1 rm -f"), ["ls", "xargs -0 -n1 rm -f", "rm -f …"]);
    assert_eq!(
        runs("bash -c 'a && b' && eval 'c; d'"),
        ["bash -c a && b", "a", "b", "eval c; d", "c", "d"]
    );
    assert_eq!(runs("$'\\x72m' \"a b\" c\\ d"), ["rm a b c d"]);
    assert_eq!(runs("command -v rm"), ["command -v rm"]);
    // Backslashes pair up as bash pairs them (found by the bash_rules fuzz target): rm plus eight
    // is a command named rm plus four, and only an odd one out escapes the next character.
    assert_eq!(runs(r"rm\\\\\\\\ x"), [r"rm\\\\ x"]);
    assert_eq!(runs(r"r\m x"), ["rm x"]);
    assert_eq!(runs(r"\\rm x"), [r"\rm x"]);
    let git = &analyze_bash("git -C /x -c a=b --no-pager push o").commands[0];
    assert_eq!(words_to_string(git.without_globals.as_ref().unwrap()), "git push o");
    assert!(!git.globals_harmless);
    let line = analyze_bash("FOO=$(id) cargo test");
    assert_eq!(
        line.commands.iter().map(|c| words_to_string(&c.assignments)).collect::<Vec<_>>(),
        ["FOO=…", ""]
    );
    // Quoted here-document bodies are text, unquoted ones run their substitutions.
    assert_eq!(runs("cat <<'EOF'\n$(rm x)\nEOF"), ["cat"]);
    assert!(runs("cat <<EOF\n$(rm x)\nEOF").contains(&"rm x".to_owned()));
    for line in ["echo 'unterminated", "(", "echo $((", "cat <<$( <$("] {
        assert!(!analyze_bash(line).is_provable(), "{line:?}");
    }
    for line in [
        "echo $((1 + 2))",
        "cargo test 2>&1 | tee log",
        "git log --format='(%h)'",
        "for f in *.rs; do wc -l \"$f\"; done",
    ] {
        assert!(analyze_bash(line).is_provable(), "{line:?}: {:?}", analyze_bash(line));
    }
}

#[test]
fn hostile_lines_are_cheap() {
    for line in [
        "$(".repeat(5000),
        "{ ".repeat(5000),
        "if true; then ".repeat(3000),
        format!("{}echo{}", "bash -c \"".repeat(30), "\"".repeat(30)),
        "echo x; ".repeat(20_000),
        "a".repeat(MAX_LINE_BYTES + 1),
        "{\u{41e20} \u{8e769}é".into(),
        "strace ".repeat(2000),
        "find . -exec ".repeat(500),
        "bash -c 'eval \"watch -x xargs env ".repeat(100),
    ] {
        let t = std::time::Instant::now();
        let _ = analyze_bash(&line);
        assert!(t.elapsed().as_secs() < 5, "{} bytes took {:?}", line.len(), t.elapsed());
    }
}

proptest! {
    #[test]
    fn never_panics(s in ".{0,120}") {
        let _ = analyze_bash(&s);
    }

    #[test]
    fn never_panics_on_shell_soup(parts in prop::collection::vec(prop::sample::select(vec![
        "rm", " ", "x", ";", "&&", "|", "$(", ")", "`", "'", "\"", "\\", "<<", "EOF", "\n", ">", "&", "{", "}", "$", "=", "(", "((", "[[", "]]", "*", "bash -c ", "eval ", "xargs ", "-exec ", "$'", "<(", "${",
    ]), 0..30)) {
        let _ = analyze_bash(&parts.concat());
    }

    /// A command joined to anything by an operator is still seen.
    #[test]
    fn a_joined_command_is_seen(
        a in "[a-z][a-z./-]{0,10}( [a-z./-]{1,8}){0,3}",
        b in "[a-z][a-z./-]{0,10}( [a-z./-]{1,8}){0,3}",
        op in prop::sample::select(vec![";", "&&", "||", "|", "&", "\n"]),
    ) {
        const KEYWORDS: &[&str] = &["if", "then", "else", "elif", "fi", "do", "done", "case", "esac", "in", "for", "while", "until", "select", "function", "time", "coproc"];
        for part in [&a, &b] {
            prop_assume!(part.split(' ').all(|w| !KEYWORDS.contains(&w)));
        }
        let seen = runs(&format!("{a} {op} {b}"));
        for part in [&a, &b] {
            let name = part.split(' ').next().unwrap_or("");
            let norm = part.replacen(name, name.rsplit('/').next().unwrap_or(""), 1);
            prop_assert!(seen.contains(&norm), "{:?} not in {:?}", norm, seen);
        }
    }
}
