//! Rule patterns (globs) matched against text that may hold unknown parts — what a shell
//! expansion or a file glob will put there: does the pattern match for every value, or for some?

use std::fmt;

/// One piece of a word as bash passes it on, quotes and escapes removed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Piece {
    Text(String),
    /// Known only when the line runs: `$x`, `$(…)`, `*.rs`, `{a,b}`. It may hold any text,
    /// spaces too (unquoted, it may become several words, never an operator).
    Unknown,
}

/// A word of a command line: literal text with unknown pieces in it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Word(pub Vec<Piece>);

impl Word {
    pub fn text(s: impl Into<String>) -> Self {
        Word(vec![Piece::Text(s.into())])
    }

    pub fn unknown() -> Self {
        Word(vec![Piece::Unknown])
    }

    /// The word's text when nothing in it is unknown.
    pub fn literal(&self) -> Option<String> {
        let mut out = String::new();
        for p in &self.0 {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Unknown => return None,
            }
        }
        Some(out)
    }

    pub fn is_known(&self) -> bool {
        self.0.iter().all(|p| matches!(p, Piece::Text(_)))
    }

    pub(crate) fn push_text(&mut self, s: &str) {
        if s.is_empty() {
            return;
        }
        if let Some(Piece::Text(t)) = self.0.last_mut() {
            t.push_str(s);
        } else {
            self.0.push(Piece::Text(s.to_owned()));
        }
    }

    pub(crate) fn push_unknown(&mut self) {
        if self.0.last() != Some(&Piece::Unknown) {
            self.0.push(Piece::Unknown);
        }
    }

    pub(crate) fn append(&mut self, other: &Word) {
        for p in &other.0 {
            match p {
                Piece::Text(t) => self.push_text(t),
                Piece::Unknown => self.push_unknown(),
            }
        }
    }
}

impl fmt::Display for Word {
    /// Unknown pieces show as `…`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.0 {
            match p {
                Piece::Text(t) => f.write_str(t)?,
                Piece::Unknown => f.write_str("…")?,
            }
        }
        Ok(())
    }
}

/// Words joined by one space, as a rule pattern sees a command.
pub fn words_to_string(words: &[Word]) -> String {
    words.iter().map(ToString::to_string).collect::<Vec<_>>().join(" ")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
    Lit(char),
    One,
    Star,
}

/// `*` any run of characters, `?` one, the rest literal; Claude Code's legacy `prefix:*` is
/// `prefix` (literally) then anything.
fn compile(pattern: &str) -> Vec<Tok> {
    if let Some(prefix) = pattern.strip_suffix(":*") {
        let mut toks: Vec<Tok> = prefix.chars().map(Tok::Lit).collect();
        toks.push(Tok::Star);
        return toks;
    }
    pattern
        .chars()
        .map(|c| match c {
            '*' => Tok::Star,
            '?' => Tok::One,
            c => Tok::Lit(c),
        })
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seg {
    C(char),
    Hole,
}

fn segments(words: &[Word]) -> Vec<Seg> {
    let mut out = Vec::new();
    for (i, w) in words.iter().enumerate() {
        if i > 0 {
            out.push(Seg::C(' '));
        }
        for p in &w.0 {
            match p {
                Piece::Text(t) => out.extend(t.chars().map(Seg::C)),
                Piece::Unknown => {
                    if out.last() != Some(&Seg::Hole) {
                        out.push(Seg::Hole)
                    }
                }
            }
        }
    }
    out
}

/// Follow the `*`s that may match nothing.
fn close(toks: &[Tok], set: &mut [bool]) {
    for i in 0..toks.len() {
        if set[i] && toks[i] == Tok::Star {
            set[i + 1] = true;
        }
    }
}

/// Run the pattern over the text; `every` chooses what an unknown piece means: only a `*` may
/// swallow it (the pattern matches whatever it holds), or it may be any text at all.
fn run(pattern: &str, words: &[Word], every: bool) -> bool {
    let toks = compile(pattern);
    let m = toks.len();
    let mut cur = vec![false; m + 1];
    cur[0] = true;
    close(&toks, &mut cur);
    let mut next = vec![false; m + 1];
    for seg in segments(words) {
        next.iter_mut().for_each(|b| *b = false);
        match seg {
            Seg::C(c) => {
                for i in 0..m {
                    if !cur[i] {
                        continue;
                    }
                    match toks[i] {
                        Tok::Star => next[i] = true,
                        Tok::One => next[i + 1] = true,
                        Tok::Lit(l) if l == c => next[i + 1] = true,
                        Tok::Lit(_) => {}
                    }
                }
            }
            Seg::Hole if every => {
                for i in 0..m {
                    if cur[i] && toks[i] == Tok::Star {
                        next[i] = true;
                    }
                }
            }
            Seg::Hole => {
                if let Some(first) = cur.iter().position(|&b| b) {
                    next[first..].iter_mut().for_each(|b| *b = true);
                }
            }
        }
        close(&toks, &mut next);
        std::mem::swap(&mut cur, &mut next);
        if !cur.iter().any(|&b| b) {
            return false;
        }
    }
    cur[m]
}

/// `cmd *` also matches `cmd` without arguments.
fn bare(pattern: &str) -> Option<&str> {
    pattern.strip_suffix(" *").filter(|p| !p.is_empty())
}

/// The pattern matches the words whatever their unknown pieces hold (each is swallowed by a
/// `*`). Sound, not complete: `true` is a proof, `false` may be a match we cannot prove.
pub fn matches_all(pattern: &str, words: &[Word]) -> bool {
    run(pattern, words, true) || bare(pattern).is_some_and(|p| run(p, words, true))
}

/// The pattern matches the words for some value of their unknown pieces.
pub fn matches_some(pattern: &str, words: &[Word]) -> bool {
    run(pattern, words, false) || bare(pattern).is_some_and(|p| run(p, words, false))
}

/// A pattern that matches any text at all (`*`, `**`).
pub fn matches_anything(pattern: &str) -> bool {
    compile(pattern).iter().all(|t| *t == Tok::Star)
}

/// Glob: `*` is any run of characters (`/` and spaces included), `?` one character, the rest
/// literal. Linear in the text for a given pattern.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    glob(pattern, text)
}

/// [`glob_match`], where `cmd *` also matches `cmd` alone (a command pattern).
pub fn command_glob(pattern: &str, text: &str) -> bool {
    glob(pattern, text) || bare(pattern).is_some_and(|p| glob(p, text))
}

fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || (p[pi] != '*' && p[pi] == t[ti])) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn w(parts: &[Option<&str>]) -> Word {
        let mut word = Word::default();
        for p in parts {
            match p {
                Some(t) => word.push_text(t),
                None => word.push_unknown(),
            }
        }
        word
    }

    #[test]
    fn unknowns_are_swallowed_only_by_stars() {
        assert!(matches_all("rm *", &[Word::text("rm")]), "`cmd *` covers `cmd` alone");
        assert!(!matches_all("rm *", &[Word::text("rmdir")]));
        let rm_x = [Word::text("rm"), w(&[None])];
        assert!(matches_all("rm *", &rm_x));
        assert!(!matches_all("rm -rf *", &rm_x));
        assert!(matches_some("rm -rf *", &rm_x));
        // A command name from an expansion: anything could run.
        let dollar = [w(&[None]), Word::text("x")];
        assert!(!matches_all("echo *", &dollar));
        assert!(matches_some("rm *", &dollar));
        assert!(matches_all("*", &dollar));
        // `rm${IFS}x` may split into `rm x`.
        let ifs = [w(&[Some("rm"), None, Some("x")])];
        assert!(matches_some("rm *", &ifs));
        assert!(!matches_all("rm *", &ifs));
        assert!(!matches_some("ls *", &ifs));
        assert!(matches_all(
            "npm run test:*",
            &[Word::text("npm"), Word::text("run"), Word::text("test"), w(&[None])]
        ));
        assert!(matches_anything("**") && !matches_anything("*a"));
    }

    #[test]
    fn globs() {
        assert!(glob_match("*", ""));
        assert!(glob_match("a*b?d", "axxxbcd"));
        assert!(!glob_match("a*b?d", "axxxbd"));
        assert!(glob_match("**", "a/b/c"));
        let text = "a".repeat(10_000);
        assert!(!glob_match(&format!("{}b", "*a".repeat(50)), &text));
    }

    proptest! {
        /// Without unknowns both views are the plain glob.
        #[test]
        fn known_text_agrees_with_glob(p in "[ab*? ]{0,8}", t in "[ab ]{0,8}") {
            let words = [Word::text(t.clone())];
            prop_assert_eq!(matches_all(&p, &words), command_glob(&p, &t));
            prop_assert_eq!(matches_some(&p, &words), command_glob(&p, &t));
        }

        /// `all` implies every filling matches; some filling matching implies `some`.
        #[test]
        fn all_and_some_bound_every_filling(
            p in "[ab*? ]{0,8}",
            pre in "[ab ]{0,4}",
            post in "[ab ]{0,4}",
            fill in "[ab ]{0,4}",
        ) {
            let holey = [w(&[Some(&pre), None, Some(&post)])];
            let filled = format!("{pre}{fill}{post}");
            if matches_all(&p, &holey) {
                prop_assert!(command_glob(&p, &filled));
            }
            if command_glob(&p, &filled) {
                prop_assert!(matches_some(&p, &holey));
            }
        }

        #[test]
        fn star_matches_everything_and_literals_only_themselves(s in "[^*?]{0,40}", t in ".{0,40}") {
            prop_assert!(glob_match("*", &t));
            prop_assert!(glob_match(&s, &s));
            prop_assert_eq!(glob_match(&s, &t), s == t);
            let wrapped = format!("*{s}*");
            prop_assert_eq!(glob_match(&wrapped, &t), t.contains(&s));
        }
    }
}
