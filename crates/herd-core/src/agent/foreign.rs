//! Other tools' definitions mapped to herd's: the shared field reader (what maps is taken, the
//! rest kept under `source.extra` with a note), and the Codex and legacy Gemini TOML formats.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::text::{toml_error, toml_line_of, yaml_line_of};
use super::{AgentDef, AgentError, Format, Loaded, Source, template};
use crate::BackendKind;

/// Where a foreign file's fields are written, to give errors a line.
pub(super) enum Locator<'a> {
    /// YAML text whose first line is line `first_line` of the file.
    Yaml {
        text: &'a str,
        first_line: usize,
    },
    Toml {
        text: &'a str,
    },
}

impl Locator<'_> {
    fn line(&self, path: &str) -> Option<usize> {
        match self {
            Locator::Yaml { text, first_line } => {
                yaml_line_of(text, path).map(|l| l + first_line - 1)
            }
            Locator::Toml { text } => toml_line_of(text, path),
        }
    }
}

/// A foreign file's fields, taken one by one as they are mapped.
pub(super) struct Fields<'a> {
    file: &'a str,
    at: Locator<'a>,
    /// `table.` for the fields of a TOML table, else empty.
    prefix: String,
    map: Map<String, Value>,
    pub extra: BTreeMap<String, Value>,
    pub dropped: Vec<String>,
}

/// A short rendering of a value for a note.
fn brief(v: &Value) -> String {
    let s = match v {
        Value::String(s) => format!("{s:?}"),
        Value::Array(_) | Value::Object(_) => return String::new(),
        other => other.to_string(),
    };
    if s.chars().count() > 40 { String::new() } else { format!(" = {s}") }
}

impl<'a> Fields<'a> {
    pub fn new(file: &'a str, at: Locator<'a>, map: Map<String, Value>) -> Self {
        Self { file, at, prefix: String::new(), map, extra: BTreeMap::new(), dropped: Vec::new() }
    }

    fn path(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    pub fn err(&self, key: &str, msg: impl Into<String>) -> AgentError {
        let path = self.path(key);
        AgentError::new(self.file, msg).at(self.at.line(&path), path)
    }

    pub fn take(&mut self, key: &str) -> Option<Value> {
        self.map.remove(key).filter(|v| !v.is_null())
    }

    /// A scalar as text (numbers and booleans written out).
    pub fn text(&mut self, key: &str) -> Result<Option<String>, AgentError> {
        match self.take(key) {
            None => Ok(None),
            Some(v) => scalar(&v)
                .map(Some)
                .ok_or_else(|| self.err(key, format!("expected text, found {}", kind(&v)))),
        }
    }

    /// A list of names, written as a list or as one comma-separated string.
    pub fn list(&mut self, key: &str) -> Result<Option<Vec<String>>, AgentError> {
        let items = match self.take(key) {
            None => return Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| {
                    let msg = || format!("expected a list of names, found {} in it", kind(v));
                    scalar(v).ok_or_else(|| self.err(key, msg()))
                })
                .collect::<Result<Vec<_>, _>>()?,
            Some(v) => {
                let msg = format!("expected a list of names, found {}", kind(&v));
                let s = scalar(&v).ok_or_else(|| self.err(key, msg))?;
                s.split(',').map(str::to_string).collect()
            }
        };
        Ok(Some(items.iter().map(|s| s.trim()).filter(|s| !s.is_empty()).map(Into::into).collect()))
    }

    /// A whole number of at least 1 (written as a number or as digits).
    pub fn count(&mut self, key: &str) -> Result<Option<u32>, AgentError> {
        let Some(v) = self.take(key) else { return Ok(None) };
        let n = match &v {
            Value::Number(n) => n.as_u64(),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        };
        n.and_then(|n| u32::try_from(n).ok())
            .filter(|&n| n >= 1)
            .map(Some)
            .ok_or_else(|| self.err(key, format!("expected a whole number from 1 up, found {v}")))
    }

    /// A model name; `inherit` means the CLI's default and maps to none.
    pub fn model(&mut self, key: &str) -> Result<Option<String>, AgentError> {
        Ok(self.text(key)?.filter(|m| {
            let inherit = m == "inherit";
            if inherit {
                let path = self.path(key);
                self.dropped
                    .push(format!("{path} = \"inherit\": herd uses the CLI's default model"));
            }
            !inherit && !m.is_empty()
        }))
    }

    /// Keep a field under `source.extra`, saying why it is not used.
    pub fn keep(&mut self, key: &str, value: Value, why: &str) {
        let path = self.path(key);
        self.dropped.push(format!("{path}{}: {why}; kept under source.extra", brief(&value)));
        self.extra.insert(key.to_string(), value);
    }

    /// The definition: cli and source filled in, every field not taken kept with a note.
    pub fn finish(mut self, format: Format, cli: BackendKind, mut def: AgentDef) -> Loaded {
        for (key, value) in std::mem::take(&mut self.map) {
            if !value.is_null() {
                self.keep(&key, value, "no meaning in herd");
            }
        }
        def.cli = Some(cli);
        def.runnable = super::native::runnable_from(Some(&Source {
            from: format.as_str().into(),
            file: String::new(),
            imported_at: None,
            extra: self.extra.clone(),
        }));
        def.source = Some(Source {
            from: format.as_str().into(),
            file: self.file.into(),
            imported_at: None,
            extra: self.extra,
        });
        Loaded { def, format, dropped: self.dropped }
    }

    /// The `name` every foreign format requires, checked.
    pub fn name(&mut self) -> Result<String, AgentError> {
        let name = self.text("name")?.ok_or_else(|| self.err("name", "missing `name`"))?;
        super::validate_name(&name).map_err(|m| self.err("name", m))?;
        Ok(name)
    }
}

/// What a value is, for messages.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "true/false",
        Value::Number(_) => "a number",
        Value::String(_) => "text",
        Value::Array(_) => "a list",
        Value::Object(_) => "a table of fields",
    }
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A prompt from a format without templates: literal text, trimmed, `${` escaped.
pub(super) fn literal_prompt(text: &str) -> Option<String> {
    let t = text.replace("\r\n", "\n");
    let t = t.trim();
    (!t.is_empty()).then(|| template::escape(t))
}

fn toml_to_json(v: toml::Value) -> Value {
    match v {
        toml::Value::String(s) => Value::String(s),
        toml::Value::Integer(i) => Value::from(i),
        toml::Value::Float(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        toml::Value::Boolean(b) => Value::Bool(b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(a) => Value::Array(a.into_iter().map(toml_to_json).collect()),
        toml::Value::Table(t) => {
            Value::Object(t.into_iter().map(|(k, v)| (k, toml_to_json(v))).collect())
        }
    }
}

/// Unmapped keys of the Codex format, with why herd does not use them.
const CODEX_KEPT: &[(&str, &str)] = &[
    ("model_reasoning_effort", "herd has no reasoning-effort setting yet"),
    ("sandbox_mode", "herd limits an agent with tools/allow/deny, not a sandbox mode"),
    ("nickname_candidates", "display names only"),
    ("mcp_servers", "herd does not configure MCP servers"),
];

pub(super) fn parse_toml(format: Format, file: &str, text: &str) -> Result<Loaded, AgentError> {
    let table: toml::Table = text.parse().map_err(|e| toml_error(file, text, &e))?;
    let map = table.into_iter().map(|(k, v)| (k, toml_to_json(v))).collect();
    let mut f = Fields::new(file, Locator::Toml { text }, map);
    let mut def = AgentDef::new(f.name()?);
    def.description = f.text("description")?;
    match format {
        Format::Codex => {
            def.model = f.model("model")?;
            for key in ["developer_instructions", "instructions", "prompt"] {
                let Some(text) = f.text(key)? else { continue };
                match &def.prompt {
                    None => def.prompt = literal_prompt(&text),
                    Some(_) => {
                        f.keep(key, Value::String(text), "the prompt is taken from another key")
                    }
                }
            }
            for (key, why) in CODEX_KEPT {
                if let Some(v) = f.take(key) {
                    f.keep(key, v, why);
                }
            }
            Ok(f.finish(format, BackendKind::Codex, def))
        }
        _ => {
            if !matches!(f.map.get("model"), Some(Value::Object(_))) {
                def.model = f.model("model")?;
            }
            let mut prompts = sub_table(&mut f, "prompts")?;
            if let Some(p) = prompts.text("system_prompt")? {
                def.prompt = literal_prompt(&p);
            }
            let mut run = sub_table(&mut f, "run")?;
            def.max_turns = run.count("max_turns")?;
            def.timeout = run.count("timeout_mins")?.map(|m| format!("{m}m"));
            let mut model = sub_table(&mut f, "model")?;
            if def.model.is_none() {
                def.model = model.model("model")?;
            }
            for (name, mut sub) in [("prompts", prompts), ("run", run), ("model", model)] {
                for (k, v) in std::mem::take(&mut sub.map) {
                    sub.keep(&k, v, "no meaning in herd");
                }
                f.dropped.append(&mut sub.dropped);
                if !sub.extra.is_empty() {
                    f.extra.insert(name.into(), Value::Object(sub.extra.into_iter().collect()));
                }
            }
            Ok(f.finish(format, BackendKind::Gemini, def))
        }
    }
}

/// A `[table]` of a TOML file as fields of their own (taken out of `f`; errors and notes name
/// `table.key`; what is not taken goes back under `source.extra.table`).
fn sub_table<'a>(f: &mut Fields<'a>, name: &str) -> Result<Fields<'a>, AgentError> {
    let map = match f.map.get(name) {
        None => Map::new(),
        Some(Value::Object(_)) => match f.map.remove(name) {
            Some(Value::Object(m)) => m,
            _ => Map::new(),
        },
        Some(_) => return Err(f.err(name, format!("expected a [{name}] table"))),
    };
    let at = match &f.at {
        Locator::Toml { text } => Locator::Toml { text },
        Locator::Yaml { text, first_line } => Locator::Yaml { text, first_line: *first_line },
    };
    let mut sub = Fields::new(f.file, at, map);
    sub.prefix = format!("{}{name}.", f.prefix);
    Ok(sub)
}
