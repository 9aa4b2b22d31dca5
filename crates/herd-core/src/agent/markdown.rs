//! Markdown definitions with YAML frontmatter — Claude's `.claude/agents/*.md` and Gemini's
//! `.gemini/agents/*.md`: splitting the frontmatter off, and mapping its fields.

use serde_json::{Map, Value};

use super::foreign::{Fields, Locator, literal_prompt};
use super::text::yaml_error;
use super::{AgentDef, AgentError, Format, Loaded, Memory};
use crate::BackendKind;

/// A Markdown file split at its frontmatter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frontmatter<'a> {
    /// The YAML between the two `---` lines.
    pub yaml: &'a str,
    /// The file line (1-based) where `yaml` starts.
    pub yaml_line: usize,
    /// Everything after the closing `---` line.
    pub body: &'a str,
}

/// Split `text` into frontmatter and body: the first line is `---`, the frontmatter runs to the
/// next line that is `---` (trailing whitespace and CRLF tolerated, as is a leading BOM).
pub fn split_frontmatter(text: &str) -> Result<Frontmatter<'_>, String> {
    let t = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = t.split_inclusive('\n');
    let starts = lines.next().is_some_and(|first| first.trim_end() == "---");
    if !starts {
        return Err("no frontmatter: the file must start with a `---` line, then YAML fields \
                    (name, description, …), then another `---` line, then the prompt"
            .into());
    }
    let start = t.find('\n').map_or(t.len(), |i| i + 1);
    let mut pos = start;
    for line in lines {
        if line.trim_end() == "---" {
            return Ok(Frontmatter {
                yaml: &t[start..pos],
                yaml_line: 2,
                body: &t[pos + line.len()..],
            });
        }
        pos += line.len();
    }
    Err("the frontmatter opened on line 1 has no closing `---` line".into())
}

/// Frontmatter read as plain `key: value` lines (indented lines continue a value, `- x` lines
/// make a list) — for files whose frontmatter is not strict YAML, e.g. an unquoted description
/// containing `: `. `None` when even that does not fit.
fn loose_fields(yaml: &str) -> Option<Map<String, Value>> {
    let mut map = Map::new();
    let mut last: Option<String> = None;
    for line in yaml.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if line.starts_with([' ', '\t']) {
            let v = map.get_mut(last.as_deref()?)?;
            match (trimmed.strip_prefix("- "), v) {
                (Some(item), Value::Array(a)) => a.push(Value::String(item.trim().into())),
                (Some(item), v @ Value::Null) => *v = Value::Array(vec![item.trim().into()]),
                (None, Value::String(s)) => {
                    s.push(' ');
                    s.push_str(trimmed);
                }
                (None, v @ Value::Null) => *v = Value::String(trimmed.into()),
                _ => return None,
            }
            continue;
        }
        let (key, value) = line.split_once(':')?;
        let ok = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
        if key.is_empty() || !key.chars().all(ok) || map.contains_key(key) {
            return None;
        }
        let value = value.trim();
        let unquoted = ['"', '\'']
            .iter()
            .find_map(|&q| value.strip_prefix(q).and_then(|v| v.strip_suffix(q)))
            .filter(|_| value.len() >= 2)
            .unwrap_or(value);
        let v = if value.is_empty() { Value::Null } else { Value::String(unquoted.into()) };
        map.insert(key.into(), v);
        last = Some(key.into());
    }
    Some(map)
}

/// The frontmatter's fields: strict YAML, else (with a note) plain `key: value` lines.
fn fields<'a>(file: &'a str, fm: &Frontmatter<'a>) -> Result<Fields<'a>, AgentError> {
    let at = Locator::Yaml { text: fm.yaml, first_line: fm.yaml_line };
    if fm.yaml.trim().is_empty() {
        return Ok(Fields::new(file, at, Map::new()));
    }
    match serde_saphyr::from_str::<Map<String, Value>>(fm.yaml) {
        Ok(map) => Ok(Fields::new(file, at, map)),
        Err(e) => {
            let strict = yaml_error(file, fm.yaml, fm.yaml_line, &e);
            let map = loose_fields(fm.yaml).ok_or_else(|| strict.clone())?;
            let mut f = Fields::new(file, at, map);
            f.dropped.push(format!(
                "the frontmatter is not valid YAML ({strict}); it was read as plain `key: value` \
                 lines"
            ));
            Ok(f)
        }
    }
}

pub(super) fn parse(format: Format, file: &str, text: &str) -> Result<Loaded, AgentError> {
    let fm = split_frontmatter(text).map_err(|m| AgentError::new(file, m))?;
    let mut f = fields(file, &fm)?;
    let mut def = AgentDef::new(f.name()?);
    def.description = f.text("description")?;
    def.prompt = literal_prompt(fm.body);
    match format {
        Format::Claude => {
            def.tools = f.list("tools")?;
            def.deny = f.list("disallowedTools")?.unwrap_or_default();
            def.model = f.model("model")?;
            def.max_turns = f.count("maxTurns")?;
            if let Some(v) = f.take("permissionMode") {
                let why = "herd runs agents headless; permissions come from allow/deny";
                f.keep("permissionMode", v, why);
            }
            match f.take("memory") {
                Some(Value::String(m)) if m == "project" => def.memory = Memory::Project,
                Some(Value::String(m)) if m == "user" => def.memory = Memory::User,
                Some(v) => f.keep("memory", v, "herd's memory is none, project or user"),
                None => {}
            }
            Ok(f.finish(format, BackendKind::Claude, def))
        }
        _ => {
            def.tools = f.list("tools")?;
            def.model = f.model("model")?;
            def.max_turns = f.count("max_turns")?;
            def.timeout = f.count("timeout_mins")?.map(|m| format!("{m}m"));
            match f.take("kind") {
                None => {}
                Some(Value::String(k)) if k == "local" => {}
                Some(Value::String(k)) if k == "remote" => f.keep(
                    "kind",
                    Value::String(k),
                    "a remote (A2A) agent: herd lists it but cannot run it",
                ),
                Some(v) => {
                    return Err(f.err("kind", format!("expected local or remote, found {v}")));
                }
            }
            Ok(f.finish(format, BackendKind::Gemini, def))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_with_crlf_and_bom() {
        let fm = split_frontmatter("\u{feff}---\r\nname: a\r\n---  \r\nbody\r\n").unwrap();
        assert_eq!(fm.yaml, "name: a\r\n");
        assert_eq!(fm.body, "body\r\n");
        assert!(split_frontmatter("name: a\n").is_err());
        assert!(split_frontmatter("---\nname: a\n").is_err());
        assert_eq!(split_frontmatter("---\n---").unwrap().body, "");
    }

    #[test]
    fn loose_fields_read_colons_and_lists() {
        let m = loose_fields("name: a\ndescription: Use when: x\n  and more\ntools:\n  - Read\n")
            .unwrap();
        assert_eq!(m["description"], "Use when: x and more");
        assert_eq!(m["tools"], serde_json::json!(["Read"]));
        assert!(loose_fields("not a field\n").is_none());
    }
}
