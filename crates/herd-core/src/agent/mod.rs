//! Agent definitions, parsed from `&str` (no I/O): the native `.herd/agents/<name>.yml` format,
//! Claude / Gemini Markdown and Codex / legacy Gemini TOML mapped to it, names, prompt templates.

mod foreign;
mod markdown;
mod native;
mod template;
mod text;

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::BackendKind;

pub use markdown::{Frontmatter, split_frontmatter};
pub use native::to_native_yaml;
pub use template::{TemplateError, escape as escape_template, render};

/// The largest definition file herd reads (checked before a file is read whole).
pub const MAX_FILE_BYTES: u64 = 256 * 1024;

/// The longest agent name.
pub const MAX_NAME_LEN: usize = 64;

/// Which persistent memory an agent reads and keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Memory {
    #[default]
    None,
    /// `.herd/memory/<agent>/MEMORY.md` in the project.
    Project,
    /// The user-level one.
    User,
}

impl Memory {
    pub fn as_str(self) -> &'static str {
        match self {
            Memory::None => "none",
            Memory::Project => "project",
            Memory::User => "user",
        }
    }
}

impl fmt::Display for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Memory {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Memory::None),
            "project" => Ok(Memory::Project),
            "user" => Ok(Memory::User),
            _ => Err(format!("unknown memory {s:?} (expected one of none, project, user)")),
        }
    }
}

/// One `${name}` a prompt template takes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputDef {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub required: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Where an imported definition came from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// `claude`, `gemini`, `codex` or `gemini-toml`.
    pub from: String,
    /// The original file.
    pub file: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imported_at: Option<String>,
    /// Fields of the original with no meaning in herd, kept verbatim.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, serde_json::Value>,
}

/// An agent definition, whatever file it came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentDef {
    pub name: String,
    pub description: Option<String>,
    pub cli: Option<BackendKind>,
    /// For `cli: acp`: the agent's program and arguments.
    pub acp: Option<crate::AcpSpec>,
    pub model: Option<String>,
    /// The system prompt template (`${input}` placeholders).
    pub prompt: Option<String>,
    pub inputs: Vec<InputDef>,
    /// What the agent has at all (`None`: the CLI's default set).
    pub tools: Option<Vec<String>>,
    pub allow: Vec<String>,
    pub deny: Vec<String>,
    /// Rules for calls that always wait for a person.
    pub ask: Vec<String>,
    /// Hooks run for this agent's runs, on top of the project's.
    pub hooks: crate::permission::HookSpecs,
    pub max_turns: Option<u32>,
    pub timeout: Option<String>,
    pub max_output_kb: Option<u64>,
    pub env: BTreeMap<String, String>,
    pub memory: Memory,
    pub source: Option<Source>,
    /// False for definitions herd can list but not run (a Gemini `kind: remote` agent).
    pub runnable: bool,
}

impl AgentDef {
    /// A definition with only a name: everything else unset, runnable.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: None,
            cli: None,
            acp: None,
            model: None,
            prompt: None,
            inputs: Vec::new(),
            tools: None,
            allow: Vec::new(),
            deny: Vec::new(),
            ask: Vec::new(),
            hooks: BTreeMap::new(),
            max_turns: None,
            timeout: None,
            max_output_kb: None,
            env: BTreeMap::new(),
            memory: Memory::None,
            source: None,
            runnable: true,
        }
    }
}

/// The file formats herd reads definitions from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// `.herd/agents/<name>.yml` (or the user's config dir).
    Native,
    /// `.claude/agents/*.md`.
    Claude,
    /// `.gemini/agents/*.md`.
    Gemini,
    /// `.codex/agents/*.toml`.
    Codex,
    /// The older Gemini TOML: name, description, `[prompts] system_prompt`, `[run] timeout_mins`.
    GeminiToml,
}

impl Format {
    /// The name used in `source.from` and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Native => "native",
            Format::Claude => "claude",
            Format::Gemini => "gemini",
            Format::Codex => "codex",
            Format::GeminiToml => "gemini-toml",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A parsed file: the definition, its format, and what of the original was not mapped.
#[derive(Debug, Clone, PartialEq)]
pub struct Loaded {
    pub def: AgentDef,
    pub format: Format,
    /// Human notes: what was not mapped and why.
    pub dropped: Vec<String>,
}

/// Why a definition file was rejected. Displays as `FILE:LINE: FIELD: MESSAGE`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct AgentError {
    pub file: String,
    /// 1-based.
    pub line: Option<usize>,
    /// Dotted path, e.g. `inputs[0].required`.
    pub field: Option<String>,
    pub message: String,
}

impl AgentError {
    pub fn new(file: &str, message: impl Into<String>) -> Self {
        Self { file: file.into(), line: None, field: None, message: message.into() }
    }

    pub fn at(mut self, line: Option<usize>, field: impl Into<String>) -> Self {
        self.line = line;
        self.field = Some(field.into());
        self
    }
}

impl fmt::Display for AgentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(field) = &self.field {
            write!(f, ": {field}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Check an agent (or input) name: `^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$`, ASCII only.
pub fn validate_name(name: &str) -> Result<(), String> {
    const RULE: &str = "names are 1 to 64 ASCII letters, digits, `_` or `-`, starting with a \
                        letter or digit";
    if name.is_empty() {
        return Err(format!("the name is empty; {RULE}"));
    }
    if let Some(c) = name.chars().find(|c| !c.is_ascii()) {
        return Err(format!(
            "{name:?} contains the non-ASCII character {c:?} (U+{:04X}); {RULE} (this also \
             keeps out look-alike letters)",
            c as u32
        ));
    }
    let len = name.len();
    if len > MAX_NAME_LEN {
        return Err(format!("the name is {len} characters long; {RULE}"));
    }
    let path_char = ['/', '\\', '.'].into_iter().find(|&c| name.contains(c));
    if let Some(c) = path_char {
        return Err(format!("{name:?} contains {c:?}, which could name another path; {RULE}"));
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-')) {
        return Err(format!("{name:?} contains {c:?}; {RULE}"));
    }
    if !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(format!("{name:?} does not start with a letter or digit; {RULE}"));
    }
    Ok(())
}

/// Parse one definition file of `format`. `file` names it in errors (and, for native files,
/// its stem must equal the agent's name).
pub fn parse(format: Format, file: &str, text: &str) -> Result<Loaded, AgentError> {
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(AgentError::new(
            file,
            format!("the file is {} bytes; the limit is {MAX_FILE_BYTES}", text.len()),
        ));
    }
    match format {
        Format::Native => native::parse(file, text),
        Format::Claude | Format::Gemini => markdown::parse(format, file, text),
        Format::Codex | Format::GeminiToml => foreign::parse_toml(format, file, text),
    }
}
