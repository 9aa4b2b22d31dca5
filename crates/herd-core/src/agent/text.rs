//! Where things are in a definition's text: the field path on each line of YAML or TOML (best
//! effort, one pass), and parser errors turned into [`AgentError`]s with file, line and field.

use super::AgentError;

/// One step of a field path.
#[derive(Debug, Clone, PartialEq)]
enum Seg {
    Key(String),
    Index(usize),
}

fn join(segs: &[(usize, Seg, bool)]) -> String {
    let mut out = String::new();
    for (_, seg, _) in segs {
        match seg {
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

fn unquote(s: &str) -> &str {
    let s = s.trim();
    for q in ['"', '\''] {
        if let Some(inner) = s.strip_prefix(q).and_then(|r| r.strip_suffix(q)) {
            return inner;
        }
    }
    s
}

/// What one YAML line holds, as far as paths go.
struct YamlLine<'a> {
    /// Columns of the dashes (`- `) opening sequence items.
    dashes: Vec<usize>,
    /// Column of what follows them.
    col: usize,
    /// The key written there, if any, and whether it opens a block (`key:` with nothing after).
    key: Option<(&'a str, bool)>,
}

fn yaml_line(line: &str) -> Option<YamlLine<'_>> {
    let mut col = line.len() - line.trim_start_matches(' ').len();
    let mut rest = &line[col..];
    let mut dashes = Vec::new();
    while rest == "-" || rest.starts_with("- ") {
        dashes.push(col);
        let after = rest[1..].trim_start_matches(' ');
        col += rest.len() - after.len();
        rest = after;
    }
    if rest.is_empty() || rest.starts_with('#') {
        return (!dashes.is_empty()).then_some(YamlLine { dashes, col, key: None });
    }
    let key = rest
        .char_indices()
        .find(|&(i, c)| c == ':' && rest[i + 1..].chars().next().is_none_or(|n| n == ' '))
        .map(|(i, _)| (unquote(&rest[..i]), rest[i + 1..].trim().is_empty()))
        .filter(|(k, _)| !k.is_empty() && !k.starts_with(['{', '[', '"', '\'']));
    Some(YamlLine { dashes, col, key })
}

/// The field path of each line of a YAML document (`None` for blank and comment lines).
pub(super) fn yaml_paths(text: &str) -> Vec<Option<String>> {
    // (indent, segment, opens a block)
    let mut stack: Vec<(usize, Seg, bool)> = Vec::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(YamlLine { dashes, col, key }) = yaml_line(line) else {
            out.push(None);
            continue;
        };
        for d in dashes {
            let mut next = 0;
            while let Some((indent, seg, opens)) = stack.last() {
                let keep = *indent < d || (*indent == d && matches!(seg, Seg::Key(_)) && *opens);
                if keep {
                    break;
                }
                if let (true, Seg::Index(i)) = (*indent == d, seg) {
                    next = i + 1;
                }
                stack.pop();
            }
            stack.push((d, Seg::Index(next), true));
        }
        if let Some((k, opens)) = key {
            while stack.last().is_some_and(|(indent, _, _)| *indent >= col) {
                stack.pop();
            }
            stack.push((col, Seg::Key(k.to_string()), opens));
        }
        out.push(Some(join(&stack)));
    }
    out
}

/// The 1-based line where `path` (as [`yaml_paths`] writes it) first appears.
pub(super) fn yaml_line_of(text: &str, path: &str) -> Option<usize> {
    yaml_paths(text).iter().position(|p| p.as_deref() == Some(path)).map(|i| i + 1)
}

/// The field path of each line of a TOML document (`None` for lines that set nothing).
pub(super) fn toml_paths(text: &str) -> Vec<Option<String>> {
    let mut table = String::new();
    let mut in_string: Option<&str> = None;
    let mut out = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        if let Some(q) = in_string {
            if t.matches(q).count() % 2 == 1 {
                in_string = None;
            }
            out.push(None);
            continue;
        }
        if t.starts_with('[') {
            table = unquote(t.trim_start_matches('[').split(']').next().unwrap_or("")).into();
            out.push(Some(table.clone()));
            continue;
        }
        let Some((k, v)) = t.split_once('=').filter(|_| !t.starts_with('#')) else {
            out.push(None);
            continue;
        };
        for q in ["\"\"\"", "'''"] {
            if v.matches(q).count() % 2 == 1 {
                in_string = Some(q);
            }
        }
        let key = unquote(k);
        out.push(Some(if table.is_empty() { key.into() } else { format!("{table}.{key}") }));
    }
    out
}

/// The 1-based line where `path` (`key` or `table.key`) is set.
pub(super) fn toml_line_of(text: &str, path: &str) -> Option<usize> {
    toml_paths(text).iter().position(|p| p.as_deref() == Some(path)).map(|i| i + 1)
}

/// 1-based line of a byte offset.
fn line_of_offset(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end].iter().filter(|&&b| b == b'\n').count() + 1
}

/// `message at line N, column M` without its location (herd shows the line its own way).
fn strip_location(msg: &str) -> &str {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if let Some(at) = msg.rfind(" at line ")
        && let Some((l, c)) = msg[at + " at line ".len()..].split_once(", column ")
        && digits(l)
        && digits(c)
    {
        return &msg[..at];
    }
    msg
}

/// A serde-saphyr error as an [`AgentError`]; `first_line` is the file line of the text's
/// first line (frontmatter starts on line 2).
pub(super) fn yaml_error(
    file: &str,
    text: &str,
    first_line: usize,
    e: &serde_saphyr::Error,
) -> AgentError {
    let full = e.without_snippet().to_string().replace("<input>", file);
    let msg = match strip_location(&full) {
        "invalid u32" | "invalid u64" => "expected a whole number from 0 up".to_string(),
        m => m.replace(", set DuplicateKeyPolicy in Options if acceptable", ""),
    };
    let line = e.location().map(|l| l.line() as usize).filter(|&l| l > 0);
    let mut field = line.and_then(|l| yaml_paths(text).get(l - 1).cloned().flatten());
    if let Some(missing) =
        msg.strip_prefix("missing field `").and_then(|r| r.split('`').next()).map(str::to_string)
    {
        // The error points at the mapping that lacks the field, at its first key.
        let parent = field.as_deref().map_or("", |p| p.rfind('.').map_or("", |i| &p[..i]));
        field = Some(if parent.is_empty() { missing } else { format!("{parent}.{missing}") });
    }
    AgentError {
        file: file.into(),
        line: line.map(|l| l + first_line - 1),
        field: field.filter(|f| !f.is_empty()),
        message: msg,
    }
}

/// A TOML syntax error as an [`AgentError`].
pub(super) fn toml_error(file: &str, text: &str, e: &toml::de::Error) -> AgentError {
    let line = e.span().map(|s| line_of_offset(text, s.start));
    let field = line.and_then(|l| toml_paths(text).get(l - 1).cloned().flatten());
    AgentError { file: file.into(), line, field, message: e.message().trim().to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_paths_follow_nesting_and_sequences() {
        let y = "name: x\ninputs:\n  - name: a\n    required: true\n  - name: b\n\nenv:\n  K: v\n\
                 tools:\n- Read\n- Grep\nsource:\n  from: claude\n";
        let p = yaml_paths(y);
        let want = [
            Some("name"),
            Some("inputs"),
            Some("inputs[0].name"),
            Some("inputs[0].required"),
            Some("inputs[1].name"),
            None,
            Some("env"),
            Some("env.K"),
            Some("tools"),
            Some("tools[0]"),
            Some("tools[1]"),
            Some("source"),
            Some("source.from"),
        ];
        assert_eq!(p.iter().map(Option::as_deref).collect::<Vec<_>>(), want);
        assert_eq!(yaml_line_of(y, "inputs[1].name"), Some(5));
    }

    #[test]
    fn toml_paths_know_tables_and_skip_multiline_strings() {
        let t = "name = \"x\"\ndeveloper_instructions = \"\"\"\na = b\n\"\"\"\n[run]\ntimeout_mins = 5\n";
        let p = toml_paths(t);
        assert_eq!(p[0].as_deref(), Some("name"));
        assert_eq!(p[2], None);
        assert_eq!(p[5].as_deref(), Some("run.timeout_mins"));
        assert_eq!(toml_line_of(t, "run.timeout_mins"), Some(6));
    }
}
