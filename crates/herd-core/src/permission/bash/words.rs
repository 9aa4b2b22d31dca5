//! One word of the syntax tree as bash hands it to a command: quotes and escapes removed,
//! expansions, substitutions, globs and brace expansions unknown.

use tree_sitter::Node;

use crate::permission::pattern::Word;

/// The source text of `n`, widened to whole characters (the parser sees bytes).
pub(super) fn text<'a>(n: Node, src: &'a str) -> &'a str {
    span(src, n.start_byte(), n.end_byte())
}

pub(super) fn span(src: &str, start: usize, end: usize) -> &str {
    let mut start = start.min(src.len());
    let mut end = end.clamp(start, src.len());
    while !src.is_char_boundary(start) {
        start -= 1;
    }
    while !src.is_char_boundary(end) {
        end += 1;
    }
    &src[start..end]
}

fn children(n: Node) -> Vec<Node> {
    (0..n.child_count() as u32).filter_map(|i| n.child(i)).collect()
}

/// The word `n` stands for.
pub(super) fn word(n: Node, src: &str) -> Word {
    let mut w = Word::default();
    add(n, src, &mut w);
    w
}

fn add(n: Node, src: &str, w: &mut Word) {
    match n.kind() {
        "word" | "variable_name" | "file_descriptor" | "heredoc_start" => unquoted(text(n, src), w),
        "number" if n.named_child_count() == 0 => w.push_text(text(n, src)),
        "raw_string" => {
            let t = text(n, src);
            w.push_text(t.strip_prefix('\'').and_then(|t| t.strip_suffix('\'')).unwrap_or(t));
        }
        "string" | "translated_string" => double_quoted(n, src, w),
        "ansi_c_string" => match ansi_c(text(n, src)) {
            Some(t) => w.push_text(&t),
            None => w.push_unknown(),
        },
        "concatenation" | "command_name" => {
            // `{a,b}` is split into pieces by the grammar: an unquoted brace pair anywhere in
            // the word may be a brace expansion (several words): unknown.
            let kids = children(n);
            let unquoted_brace =
                |c: &str| kids.iter().any(|k| k.kind() == "word" && text(*k, src).contains(c));
            if n.kind() == "concatenation" && unquoted_brace("{") && unquoted_brace("}") {
                w.push_unknown();
                return;
            }
            let mut pos = n.start_byte();
            for k in kids {
                if k.start_byte() > pos {
                    unquoted(span(src, pos, k.start_byte()), w);
                }
                add(k, src, w);
                pos = k.end_byte();
            }
            if n.end_byte() > pos {
                unquoted(span(src, pos, n.end_byte()), w);
            }
        }
        _ => w.push_unknown(),
    }
}

/// Unquoted text: backslash escapes removed; `*`, `?`, `[` are globs and `{…}` a possible
/// brace expansion, so unknown.
fn unquoted(t: &str, w: &mut Word) {
    if t.contains('{') && t.contains('}') {
        w.push_unknown();
        return;
    }
    let mut chars = t.chars();
    let mut lit = String::new();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\n') => {}
                Some(n) => lit.push(n),
                None => lit.push('\\'),
            },
            '*' | '?' | '[' => {
                w.push_text(&std::mem::take(&mut lit));
                w.push_unknown();
            }
            c => lit.push(c),
        }
    }
    w.push_text(&lit);
}

/// `"…"`: literal runs with `\$ \` \" \\ \newline` unescaped; every expansion unknown.
fn double_quoted(n: Node, src: &str, w: &mut Word) {
    let open = if n.kind() == "translated_string" { 2 } else { 1 };
    let (start, end) = (n.start_byte() + open, n.end_byte().saturating_sub(1).max(n.start_byte()));
    let mut pos = start;
    let lit = |from: usize, to: usize, w: &mut Word| {
        if to > from {
            w.push_text(&dq_unescape(span(src, from, to)));
        }
    };
    let inner = if n.kind() == "translated_string" { n.named_child(0) } else { Some(n) };
    for k in inner.map(children).unwrap_or_default() {
        if k.start_byte() < start || k.end_byte() > end {
            continue; // the quotes themselves
        }
        lit(pos, k.start_byte(), w);
        if k.kind() == "string_content" {
            lit(k.start_byte(), k.end_byte(), w);
        } else {
            w.push_unknown();
        }
        pos = k.end_byte();
    }
    lit(pos, end, w);
}

fn dq_unescape(t: &str) -> String {
    let mut out = String::new();
    let mut chars = t.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.peek() {
                Some('\n') => {
                    chars.next();
                }
                Some(&n @ ('$' | '`' | '"' | '\\')) => {
                    out.push(n);
                    chars.next();
                }
                _ => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `$'…'` decoded, or `None` for an escape it does not know.
pub(super) fn ansi_c(t: &str) -> Option<String> {
    let body = t.strip_prefix("$'")?.strip_suffix('\'')?;
    let mut out = String::new();
    let mut chars = body.chars().peekable();
    // Up to `max` more digits of `radix` after `v`.
    let digits =
        |chars: &mut std::iter::Peekable<std::str::Chars>, radix: u32, max: usize, v: u32| {
            let (mut v, mut n) = (v, 0);
            while n < max
                && let Some(d) = chars.peek().and_then(|c| c.to_digit(radix))
            {
                v = v * radix + d;
                chars.next();
                n += 1;
            }
            (v, n)
        };
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let e = chars.next()?;
        let decoded = match e {
            'a' => '\x07',
            'b' => '\x08',
            'e' | 'E' => '\x1b',
            'f' => '\x0c',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'v' => '\x0b',
            '\\' | '\'' | '"' | '?' => e,
            '0'..='7' => char::from_u32(digits(&mut chars, 8, 2, e.to_digit(8)?).0 & 0xff)?,
            'x' | 'u' | 'U' => {
                let max = match e {
                    'x' => 2,
                    'u' => 4,
                    _ => 8,
                };
                match digits(&mut chars, 16, max, 0) {
                    (_, 0) => return None,
                    (v, _) => char::from_u32(v)?,
                }
            }
            _ => return None,
        };
        if decoded == '\0' {
            break; // bash ends the string at NUL
        }
        out.push(decoded);
    }
    Some(out)
}
