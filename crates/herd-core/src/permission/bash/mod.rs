//! Bash command lines as the permission rules read them: every command a line would run (through
//! wrappers, `sh -c`, substitutions, function bodies), every file it redirects output to, and
//! what herd cannot know about it. Parsed with tree-sitter-bash; no I/O.
//!
//! Read by bash's rules: quotes and escapes removed (`\rm`, `'rm'`, `r''m`, `$'\x72m'` are `rm`),
//! the path stripped from a command name (`/bin/rm` → `rm`), words joined by one space.
//! Wrappers are seen through with their options (`env`, `timeout`, `nice`, `nohup`, `stdbuf`,
//! `time`, `command`, `builtin`, `exec`, `sudo`, `doas`, `setsid`, `ionice`, `chrt`, `coproc`,
//! `watch`, `flock`, `xargs`, `find -exec`), the literal code of `sh`/`bash`/`zsh`/`dash -c`,
//! `eval`, `trap`, `su -c` is parsed in turn, and `git`'s global options are skipped.
//! Unprovable (a rule cannot be sure what runs): a parse error; a shell reading code from a file
//! or its input (`… | bash`); `source`; non-literal `eval`/`sh -c`; `alias`; arithmetic on
//! variables (bash evaluates `a[$(…)]` in a variable's value); `${!x}`, `${x@P}`; subscripted
//! names given to `declare`/`read`/`printf -v`/`test -v`…; `PS4=`, `BASH_ENV=`, `BASH_FUNC_…`.

mod commands;
mod syntax;
mod words;

use std::path::PathBuf;

use super::pattern::Word;

/// How far an executed command binds allow rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Runs as written: an allow rule must cover it.
    Runs,
    /// A wrapper (`timeout 5 cargo test`) whose command is listed after it with the wrapper's
    /// environment: allow rules judge that command instead.
    Wrapper,
    /// Perhaps a command: an argument of a tool that runs commands herd does not model
    /// (`strace -f rm x`). Deny and ask rules take a match as possible; allow rules ignore it.
    Guess,
}

/// A command the line would run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// `NAME=value` words in force for it (its own and its wrappers').
    pub assignments: Vec<Word>,
    /// The name (normalised) and the arguments.
    pub argv: Vec<Word>,
    /// `git` without its global options (`git -C . push` → `git push`): deny and ask rules
    /// see this form too.
    pub without_globals: Option<Vec<Word>>,
    /// The skipped global options only change output (`--no-pager`, `-P`…): allow rules may
    /// use `without_globals` too.
    pub globals_harmless: bool,
    pub role: Role,
}

impl Command {
    /// The forms a rule pattern is matched against: the command, with its assignments, and
    /// without git's global options. For allow rules only the forms that may be trusted.
    pub fn forms(&self, for_allow: bool) -> Vec<Vec<Word>> {
        let mut bases = vec![self.argv.clone()];
        if let Some(w) = &self.without_globals
            && (!for_allow || self.globals_harmless)
        {
            bases.push(w.clone());
        }
        let mut out = Vec::new();
        for b in bases {
            if self.assignments.is_empty() {
                out.push(b);
            } else {
                if !for_allow {
                    out.push(b.clone());
                }
                out.push(self.assignments.iter().cloned().chain(b).collect());
            }
        }
        out
    }
}

/// A path as written and as it resolves on disk (the engine fills `canonical`: symlinks
/// resolved, for a file not yet created its longest existing ancestor).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathRef {
    /// The literal path; `None` when an expansion decides it.
    pub given: Option<String>,
    pub canonical: Option<PathBuf>,
}

/// An output redirection (`>`, `>>`, `>|`, `&>`, `&>>`, `>&file`, `n>`): a write of that path.
/// `/dev/null`, `/dev/stdout`, `/dev/stderr`, `/dev/fd/N` and fd duplications are not writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    pub target: Word,
    pub path: PathRef,
}

/// What a Bash line would do, as far as herd can tell.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BashLine {
    pub commands: Vec<Command>,
    pub writes: Vec<Redirect>,
    /// Why herd cannot tell everything the line runs (empty: it can).
    pub unprovable: Vec<String>,
}

impl BashLine {
    pub fn is_provable(&self) -> bool {
        self.unprovable.is_empty()
    }
}

/// Longer lines are not parsed (unprovable).
pub const MAX_LINE_BYTES: usize = 256 * 1024;

/// Analyse one Bash command line. Never fails: what cannot be analysed is unprovable.
pub fn analyze_bash(line: &str) -> BashLine {
    let mut out = BashLine::default();
    if line.len() > MAX_LINE_BYTES {
        out.unprovable.push(format!("the line is longer than {MAX_LINE_BYTES} bytes"));
        return out;
    }
    syntax::Walk::new(&mut out).code(line, &[], 0, false);
    out.unprovable.dedup();
    out
}

#[cfg(test)]
mod tests;
