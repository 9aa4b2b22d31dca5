//! Differential test of the Bash rules against bash itself: lines built from dangerous pieces
//! (rm spellings, wrappers, quoting, operators, substitutions, xargs, find -exec, `| bash`) are
//! decided under `{allow: [Bash], deny: [Bash(rm *)]}`, and every line decided Allow is run by
//! `/bin/bash -c` under bubblewrap with a logging stub over `rm`: the stub must never run.

use std::path::{Path, PathBuf};
use std::process::Command as Process;
use std::sync::Mutex;

use herd_core::permission::{Call, Decision, Policy, Rule};
use serde_json::json;

const RM: &[&str] = &[
    "rm",
    "/bin/rm",
    "/usr/bin/rm",
    "\\rm",
    "'rm'",
    "\"rm\"",
    "r''m",
    "r\"\"m",
    "$'rm'",
    "$'\\x72m'",
    "$'\\162\\155'",
    "r\\m",
    "\\r\\m",
    "\"r\"'m'",
    "\"$(echo rm)\"",
    "$(echo r)m",
    "${R:-rm}",
    "$'\\u0072m'",
    "$R",
    "${R}",
    "$(echo rm)",
    "`echo rm`",
    "/usr/bin/r?",
    "/bin/r[m]",
    "/usr/bin/r*m",
    "{rm,x}",
    "rm${IFS}x",
    "$(printf rm)",
    "\"$R\"",
    // Not rm: must stay allowed and must not trip the stub.
    "rmdir",
    "echo",
    "true",
    "ls",
    "firm",
];

const WRAPPERS: &[&str] = &[
    "",
    "env ",
    "env -i ",
    "env FOO=1 ",
    "/usr/bin/env -u HOME ",
    "timeout 5 ",
    "timeout -s KILL 5 ",
    "nice ",
    "nice -n 5 ",
    "nohup ",
    "stdbuf -oL ",
    "time ",
    "time -p ",
    "command ",
    "command -p ",
    "exec ",
    "builtin ",
    "setsid ",
    "ionice -c3 ",
    "FOO=1 ",
    "flock /tmp/lock ",
    "R=rm ",
    "env -- ",
    "timeout --kill-after=1 5 ",
    "nice -5 ",
    "xargs -a /dev/null ",
];

/// `X` is the command, `{}` is replaced by it.
const CONTEXTS: &[&str] = &[
    "X",
    "true && X",
    "false || X",
    "true; X",
    "true | X",
    "(X)",
    "{ X; }",
    "$(X)",
    "`X`",
    "echo $(X)",
    "if true; then X; fi",
    "for i in 1; do X; done",
    "case a in a) X;; esac",
    "f() { X; }; f",
    "bash -c 'X'",
    "sh -c \"X\"",
    "eval 'X'",
    "eval \"X\"",
    "echo 'X' | bash",
    "echo \"X\" | sh",
    "bash <<< 'X'",
    "cat <(X)",
    "X &\nwait",
    "! X",
    "trap 'X' EXIT",
    "x=$(X)",
    "echo x | xargs X",
    "find . -name x -exec X {} \\;",
    "find . -name x -exec X {} +",
    "R=rm; X",
    "a=rm;$a x; X",
    "bash -c \"X\" 2>&1",
    "X > /dev/null",
    "cat <<EOF\n$(X)\nEOF",
    "cat <<'EOF'\n$(X)\nEOF",
    "echo 'X' > /dev/null",
    "echo X",
];

fn bwrap() -> PathBuf {
    let p = PathBuf::from("/usr/bin/bwrap");
    assert!(
        p.exists(),
        "bwrap is missing: this test runs lines in a sandbox; install the Debian package `bubblewrap`"
    );
    p
}

/// A small deterministic generator (xorshift).
struct Rng(u64);
impl Rng {
    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        from[(self.0 % from.len() as u64) as usize]
    }
}

fn lines() -> Vec<String> {
    let mut out = Vec::new();
    // Every rm spelling in every context, plain.
    for rm in RM {
        for ctx in CONTEXTS {
            out.push(ctx.replace('X', &format!("{rm} x")));
        }
    }
    // Random combinations: wrappers (one or two), spelling, context.
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..2000 {
        let cmd = format!("{}{}{}x", rng.pick(WRAPPERS), rng.pick(WRAPPERS), rng.pick(RM));
        let cmd = cmd.replacen("x", " x", usize::from(!cmd.ends_with(" x")));
        let inner = rng.pick(CONTEXTS).replace('X', &cmd);
        out.push(rng.pick(CONTEXTS).replace('X', &inner));
    }
    out.sort();
    out.dedup();
    out
}

/// Run `line` in a sandbox whose `rm` is a stub writing to `log`; true if the stub ran.
fn stub_ran(sandbox: &Path, line: &str) -> bool {
    let work = tempfile::tempdir_in(sandbox).unwrap();
    let logs = tempfile::tempdir_in(sandbox).unwrap();
    std::fs::write(work.path().join("x"), "precious").unwrap();
    let stub = sandbox.join("stubs/rm");
    let status = Process::new("timeout")
        .args(["-k", "1", "5"])
        .arg(bwrap())
        .args(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"])
        .args(["--unshare-net", "--unshare-pid", "--die-with-parent", "--new-session"])
        .arg("--bind")
        .arg(work.path())
        .arg("/tmp/work")
        .arg("--bind")
        .arg(logs.path())
        .arg("/tmp/log")
        .arg("--ro-bind")
        .arg(&stub)
        .arg("/usr/bin/rm")
        .arg("--ro-bind")
        .arg(sandbox.join("stubs"))
        .arg("/tmp/stubs")
        .args(["--chdir", "/tmp/work", "--setenv", "PATH", "/tmp/stubs:/usr/bin:/bin"])
        .args(["--setenv", "HOME", "/tmp/work", "/bin/bash", "-c", line])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run bwrap");
    let _ = status;
    logs.path().join("rm.log").exists() || !work.path().join("x").exists()
}

fn sandbox() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("stubs")).unwrap();
    let stub = dir.path().join("stubs/rm");
    std::fs::write(&stub, "#!/bin/sh\necho \"rm $*\" >> /tmp/log/rm.log\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

#[test]
fn no_line_decided_allow_runs_rm() {
    let policy = Policy {
        allow: vec![Rule::parse("Bash").unwrap()],
        deny: vec![Rule::parse("Bash(rm *)").unwrap()],
        ..Policy::default()
    };
    let sandbox = sandbox();
    // The harness sees rm when it runs, however it is spelled (else this test proves nothing).
    for line in ["rm x", "echo 'rm x' | bash", "/bin/r? x", "a=rm;$a x", "find . -exec rm {} +"] {
        assert!(stub_ran(sandbox.path(), line), "the stub did not see {line:?}");
    }
    assert!(!stub_ran(sandbox.path(), "rmdir x; echo rm x"), "the stub ran without rm");

    let lines = lines();
    let allowed: Vec<&String> = lines
        .iter()
        .filter(|l| {
            let d = policy.evaluate(&Call::new("Bash", &json!({ "command": l }), None), &[]);
            matches!(d, Decision::Allow { .. })
        })
        .collect();
    eprintln!("{} lines, {} decided Allow and run", lines.len(), allowed.len());
    assert!(allowed.len() > 100, "the grammar makes lines that are allowed too");
    let ran_rm = Mutex::new(Vec::new());
    let next = Mutex::new(allowed.iter());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let Some(line) = next.lock().unwrap().next().copied() else { break };
                    if stub_ran(sandbox.path(), line) {
                        ran_rm.lock().unwrap().push(line.clone());
                    }
                }
            });
        }
    });
    let ran_rm = ran_rm.into_inner().unwrap();
    assert!(ran_rm.is_empty(), "decided Allow, yet rm ran: {ran_rm:#?}");
}
