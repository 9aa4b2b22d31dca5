//! The native format, `.herd/agents/<name>.yml`: strict parsing (unknown keys rejected, every
//! error with file, line and field) and the writer `herd agents import` uses.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::text::{yaml_error, yaml_line_of};
use super::{AgentDef, AgentError, Format, InputDef, Loaded, Memory, Source, template};
use crate::BackendKind;
use crate::permission::{HookSpecs, Rule, check_hooks};
use crate::plan::parse_duration;

/// The file as written (field order is the order `to_native_yaml` writes).
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct NativeFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cli: Option<BackendKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    acp: Option<crate::AcpSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tools: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    allow: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    deny: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    ask: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    hooks: HookSpecs,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_turns: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    timeout: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_output_kb: Option<u64>,
    #[serde(default, skip_serializing_if = "is_no_memory")]
    memory: Memory,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    inputs: Vec<InputDef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    source: Option<Source>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    prompt: Option<String>,
}

fn is_no_memory(m: &Memory) -> bool {
    *m == Memory::None
}

/// The values `source.from` may take.
const SOURCES: &[&str] = &["claude", "gemini", "codex", "gemini-toml"];

/// Whether a definition can run, from what its source says (a Gemini remote agent cannot).
pub(super) fn runnable_from(source: Option<&Source>) -> bool {
    !source.is_some_and(|s| {
        s.from == "gemini" && s.extra.get("kind").and_then(|k| k.as_str()) == Some("remote")
    })
}

pub(super) fn parse(file: &str, text: &str) -> Result<Loaded, AgentError> {
    if text.trim().is_empty() {
        return Err(AgentError::new(file, "the file is empty; a definition needs at least a name"));
    }
    let f: NativeFile = serde_saphyr::from_str(text).map_err(|e| yaml_error(file, text, 1, &e))?;
    let err =
        |path: &str, msg: String| AgentError::new(file, msg).at(yaml_line_of(text, path), path);

    let stem = Path::new(file).file_stem().and_then(|s| s.to_str()).unwrap_or("").to_string();
    let name = match f.name {
        Some(name) => {
            super::validate_name(&name).map_err(|m| err("name", m))?;
            if name != stem {
                return Err(err(
                    "name",
                    format!(
                        "the name {name:?} differs from the file name {stem:?}; a native \
                         definition is named after its file (rename one of them)"
                    ),
                ));
            }
            name
        }
        None => {
            super::validate_name(&stem).map_err(|m| {
                AgentError::new(file, format!("no `name`, and the file name will not do: {m}"))
                    .at(None, "name")
            })?;
            stem
        }
    };
    match (&f.acp, f.cli) {
        (Some(a), Some(BackendKind::Acp) | None) => {
            a.check().map_err(|m| err("acp.command", m))?;
        }
        (Some(_), Some(other)) => {
            return Err(err("acp", format!("only for cli: acp (this agent uses cli: {other})")));
        }
        (None, _) => {}
    }
    if let Some(t) = &f.timeout {
        parse_duration(t).map_err(|m| err("timeout", m))?;
    }
    if f.max_turns == Some(0) {
        return Err(err("max_turns", "must be at least 1".into()));
    }
    if f.max_output_kb == Some(0) {
        return Err(err("max_output_kb", "must be at least 1".into()));
    }
    for (i, input) in f.inputs.iter().enumerate() {
        let path = format!("inputs[{i}].name");
        super::validate_name(&input.name).map_err(|m| err(&path, format!("input name: {m}")))?;
        if f.inputs[..i].iter().any(|o| o.name == input.name) {
            return Err(err(&path, format!("input {:?} is declared twice", input.name)));
        }
    }
    for (field, rules) in [("allow", &f.allow), ("deny", &f.deny), ("ask", &f.ask)] {
        for (i, r) in rules.iter().enumerate() {
            Rule::parse(r).map_err(|e| err(&format!("{field}[{i}]"), e.to_string()))?;
        }
    }
    check_hooks(&f.hooks).map_err(|(path, msg)| err(&path, msg))?;
    for (k, v) in &f.env {
        let path = format!("env.{k}");
        if k.is_empty() || k.contains(['=', '\0']) {
            return Err(err(&path, format!("{k:?} is not an environment variable name")));
        }
        if v.contains('\0') {
            return Err(err(&path, "the value contains a NUL byte".into()));
        }
    }
    if let Some(s) = &f.source
        && !SOURCES.contains(&s.from.as_str())
    {
        let msg = format!("unknown source {:?} (expected one of {})", s.from, SOURCES.join(", "));
        return Err(err("source.from", msg));
    }
    if let Some(p) = &f.prompt {
        let unknown = template::unknown_placeholders(p, &f.inputs);
        if !unknown.is_empty() {
            let msg = format!(
                "unknown placeholder(s): {} (declare them under `inputs`, or write `$${{` for a \
                 literal `${{`)",
                unknown.join(", ")
            );
            return Err(err("prompt", msg));
        }
    }

    let runnable = runnable_from(f.source.as_ref());
    let def = AgentDef {
        name,
        description: f.description,
        cli: f.cli,
        acp: f.acp,
        model: f.model,
        prompt: f.prompt,
        inputs: f.inputs,
        tools: f.tools,
        allow: f.allow,
        deny: f.deny,
        ask: f.ask,
        hooks: f.hooks,
        max_turns: f.max_turns,
        timeout: f.timeout,
        max_output_kb: f.max_output_kb,
        env: f.env,
        memory: f.memory,
        source: f.source,
        runnable,
    };
    Ok(Loaded { def, format: Format::Native, dropped: Vec::new() })
}

/// The native YAML for `def` (what `herd agents import` writes). Parses back to the same
/// definition; `runnable` is not written (it follows from `source`).
pub fn to_native_yaml(def: &AgentDef) -> String {
    let f = NativeFile {
        name: Some(def.name.clone()),
        description: def.description.clone(),
        cli: def.cli,
        acp: def.acp.clone(),
        model: def.model.clone(),
        tools: def.tools.clone(),
        allow: def.allow.clone(),
        deny: def.deny.clone(),
        ask: def.ask.clone(),
        hooks: def.hooks.clone(),
        max_turns: def.max_turns,
        timeout: def.timeout.clone(),
        max_output_kb: def.max_output_kb,
        memory: def.memory,
        env: def.env.clone(),
        inputs: def.inputs.clone(),
        source: def.source.clone(),
        prompt: def.prompt.clone(),
    };
    serde_saphyr::to_string(&f)
        .unwrap_or_else(|e| format!("# herd could not write this definition: {e}\n"))
}
