//! The Gemini backend. herd runs `gemini --acp` (protocols.md §3.3), whose permission requests
//! reach herd's gate; `-p … -o stream-json` (argv, settings, verdict, decoder here) asks nothing.

mod decode;

pub use decode::GeminiDecoder;

use std::path::Path;

use herd_core::{AgentEvent, BackendKind, FailureReason, ResultInfo, ResultKind};
use serde_json::{Value, json};

use crate::acp::AcpAgent;
use crate::{
    Backend, BackendError, Decoder, Exit, Invocation, Launch, PermissionAnswer, PermissionRequest,
    PermissionRoute, RunFile, RunSpec, Verdict,
};

/// What in `~/.gemini` configures gemini (settings with hooks, MCP servers and tool policy,
/// global instructions, commands, extensions, policies, agents, skills, the `.env` it loads).
/// None gets a placeholder: gemini reads a directory there as a broken settings file.
pub const PROTECTED_STATE: &[(&str, bool)] = &[
    ("settings.json", false),
    ("GEMINI.md", false),
    (".env", false),
    ("commands", false),
    ("extensions", false),
    ("policies", false),
    ("agents", false),
    ("skills", false),
];

/// Gemini CLI (`@google/gemini-cli`), through `gemini --acp`: the route that carries permission
/// requests (`-p` removes the tools that would ask). The turn limit is herd's (gemini takes
/// `model.maxSessionTurns` only from a settings file, and the system settings file it reads
/// only when the file and every directory above it belong to root: measured in 0.61.0).
#[derive(Debug, Clone, Copy)]
pub struct Gemini;

impl Backend for Gemini {
    fn kind(&self) -> BackendKind {
        BackendKind::Gemini
    }

    fn fixed_program(&self) -> Option<(&'static str, &'static str)> {
        Some(("gemini", PROGRAM_OVERRIDE_VAR))
    }

    fn run_files(&self, spec: &RunSpec) -> Vec<RunFile> {
        policy_file(spec).into_iter().collect()
    }

    fn invocation(&self, spec: &RunSpec, launch: &Launch<'_>) -> Result<Invocation, BackendError> {
        let program = self.program(spec, launch.var("PATH"), launch.override_bin)?;
        let mut args = acp_args(spec);
        args.extend(policy_args(launch));
        Ok(Invocation { program, args })
    }

    fn builtin_tools(&self) -> &'static [&'static str] {
        BUILTIN_TOOLS
    }

    fn env_prefixes(&self, _spec: &RunSpec) -> &'static [&'static str] {
        ENV_PREFIXES
    }

    fn fixed_env(&self, _spec: &RunSpec) -> &'static [(&'static str, &'static str)] {
        REQUIRED_ENV
    }

    fn home_state(&self, _spec: &RunSpec) -> &'static [&'static str] {
        AcpAgent::Gemini.home_state()
    }

    fn protected_state(&self, _spec: &RunSpec) -> &'static [(&'static str, bool)] {
        PROTECTED_STATE
    }

    fn takes_system_prompt(&self, _spec: &RunSpec) -> bool {
        false
    }

    fn resumes_natively(&self, _spec: &RunSpec) -> bool {
        true
    }

    fn permission_route(&self, _spec: &RunSpec, _confined: bool) -> PermissionRoute {
        PermissionRoute::Asks("gemini --acp: ACP session/request_permission")
    }

    fn initial_stdin(&self, _spec: &RunSpec) -> Vec<u8> {
        Vec::new()
    }

    fn holds_stdin(&self) -> bool {
        true
    }

    fn interrupt_message(&self) -> Option<Vec<u8>> {
        None
    }

    fn permission_request(&self, ev: &AgentEvent) -> Option<PermissionRequest> {
        crate::acp::permission_request(ev)
    }

    fn answer_permission(
        &self,
        req: &PermissionRequest,
        answer: &PermissionAnswer,
    ) -> Option<Vec<u8>> {
        Some(crate::acp::answer_permission(req, answer))
    }

    fn decoder(&self, spec: &RunSpec, cwd: &Path) -> Box<dyn Decoder> {
        crate::acp::run_decoder(Some(AcpAgent::Gemini), spec, cwd)
    }

    fn verdict(&self, result: Option<&ResultInfo>, exit: Exit) -> Verdict {
        crate::acp::verdict(result, exit)
    }
}

/// gemini's tools in Claude's vocabulary (what a run has when it names none).
const BUILTIN_TOOLS: &[&str] = &[
    "Bash",
    "Write",
    "Edit",
    "Read",
    "Glob",
    "Grep",
    "WebSearch",
    "WebFetch",
    "TodoWrite",
    "Agent",
];

/// The name of the policy file among a run's files.
pub const POLICY_FILE: &str = "gemini-policy.toml";

/// The gemini natives of the Claude-named tools `names` picks (case-insensitive).
fn natives(pick: impl Fn(&str) -> bool) -> Vec<&'static str> {
    crate::tools::GEMINI_TOOLS
        .iter()
        .filter(|(claude, _)| pick(&claude.to_ascii_lowercase()))
        .flat_map(|(_, n)| n.iter().copied())
        .collect()
}

/// gemini's Policy Engine rules (`--policy FILE`, measured on 0.61.0) that make it follow the
/// run: a tool the run does not have (`tools`) is denied, which removes it from gemini's tool
/// registry (as `--tools` removes a tool from claude), and a tool herd
/// must hear about on every call (`ask_first`: rules, hooks or limits name it) asks herd
/// through `session/request_permission` even where gemini would run it unasked (reads).
/// `None` when neither applies.
pub fn policy(spec: &RunSpec) -> Option<String> {
    let lower = |v: &[String]| v.iter().map(|t| t.to_ascii_lowercase()).collect::<Vec<_>>();
    let denied = match &spec.tools {
        Some(tools) => {
            let have = lower(tools);
            natives(|t| !have.iter().any(|h| h == t))
        }
        None => Vec::new(),
    };
    let ask = lower(&spec.ask_first);
    let asked: Vec<&str> = natives(|t| ask.iter().any(|a| a == t))
        .into_iter()
        .filter(|n| !denied.contains(n))
        .collect();
    if denied.is_empty() && asked.is_empty() {
        return None;
    }
    let list =
        |names: &[&str]| names.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ");
    let mut out =
        String::from("# Written by herd for one run: its tools and what gemini asks herd about.\n");
    if !denied.is_empty() {
        out.push_str(&format!(
            "\n[[rule]]\ntoolName = [{}]\ndecision = \"deny\"\npriority = 999\n\
             denyMessage = \"not one of this run's tools (herd)\"\n",
            list(&denied)
        ));
    }
    if !asked.is_empty() {
        out.push_str(&format!(
            "\n[[rule]]\ntoolName = [{}]\ndecision = \"ask_user\"\npriority = 998\n",
            list(&asked)
        ));
    }
    Some(out)
}

/// [`policy`] as the run's file.
pub(crate) fn policy_file(spec: &RunSpec) -> Option<RunFile> {
    policy(spec).map(|contents| RunFile { name: POLICY_FILE, contents })
}

/// `--policy FILE` once the engine wrote it.
pub(crate) fn policy_args(launch: &Launch<'_>) -> Vec<String> {
    match launch.file(POLICY_FILE) {
        Some(p) => vec!["--policy".into(), p.display().to_string()],
        None => Vec::new(),
    }
}

/// The argv of `gemini --acp` (after the program name): `--acp [-m MODEL]`.
pub fn acp_args(spec: &RunSpec) -> Vec<String> {
    let mut a = AcpAgent::Gemini.args();
    if let Some(m) = &spec.model {
        a.extend(AcpAgent::Gemini.model_args(m).unwrap_or_default());
    }
    a
}

/// The gemini-cli version herd was tested with.
pub const TESTED_VERSION: &str = "0.61.0";

/// The variable that overrides the binary's location.
pub const PROGRAM_OVERRIDE_VAR: &str = "HERD_GEMINI_BIN";

/// Prefixes of the variables gemini needs passed through (`GEMINI_API_KEY`,
/// `GOOGLE_GEMINI_BASE_URL`, `GEMINI_CLI_*`, `GOOGLE_*` for Vertex).
pub const ENV_PREFIXES: &[&str] = &["GEMINI_", "GOOGLE_"];

/// Variables herd should set for every gemini run (protocols.md §3.0, §3.5): a trusted
/// workspace (else rc 55), and no self re-spawn, so signals reach the process that works.
pub const REQUIRED_ENV: &[(&str, &str)] =
    &[("GEMINI_CLI_TRUST_WORKSPACE", "true"), ("GEMINI_CLI_NO_RELAUNCH", "true")];

/// The variable naming a settings file that outranks the user's; herd writes
/// [`system_settings`] there.
pub const SYSTEM_SETTINGS_VAR: &str = "GEMINI_CLI_SYSTEM_SETTINGS_PATH";

/// Exit code of a run stopped by `model.maxSessionTurns` (FatalTurnLimitedError).
pub const EXIT_TURN_LIMIT: i32 = 53;

/// A Claude allow rule as a gemini `--allowed-tools` entry: `Bash(cargo test *)` ->
/// `run_shell_command(cargo test)` (gemini matches a command prefix), `Write` -> `write_file`.
/// `None` for rules gemini cannot express (a pattern with a wildcard inside, unknown tools).
pub fn allowed_tool(rule: &str) -> Option<String> {
    let (tool, pattern) = match rule.split_once('(') {
        Some((t, rest)) => (t.trim(), Some(rest.strip_suffix(')')?)),
        None => (rule.trim(), None),
    };
    let native = match tool.to_ascii_lowercase().as_str() {
        "bash" => "run_shell_command",
        "write" => "write_file",
        "edit" | "multiedit" => "replace",
        "read" => "read_file",
        "glob" => "glob",
        "grep" => "grep_search",
        "webfetch" => "web_fetch",
        "websearch" => "google_web_search",
        _ => return None,
    };
    match pattern.map(str::trim) {
        None | Some("*") | Some("") => Some(native.to_owned()),
        Some(p) if native == "run_shell_command" => {
            let prefix =
                p.strip_suffix(":*").or_else(|| p.strip_suffix('*')).unwrap_or(p).trim_end();
            (!prefix.is_empty() && !prefix.contains('*')).then(|| format!("{native}({prefix})"))
        }
        Some(_) => None,
    }
}

/// The argv after the program name (protocols.md §3.0–§3.4):
/// `--prompt=PROMPT -o stream-json [-m M] [--allowed-tools T]… [--resume ID]`.
///
/// `--prompt=` keeps a prompt that starts with `-` a prompt. In `-p` mode gemini never asks:
/// a tool needing approval is removed from what the model may call, so herd's allow rules
/// become `--allowed-tools` (see [`allowed_tool`]); the approval mode stays `default`.
/// The turn limit is a setting, not a flag: see [`system_settings`]. gemini has no flag to
/// append to its system prompt (`GEMINI_SYSTEM_MD` replaces it whole); herd does not pass
/// `append_system_prompt`.
pub fn args(spec: &RunSpec) -> Vec<String> {
    let mut a = vec![format!("--prompt={}", spec.prompt), "-o".into(), "stream-json".into()];
    if let Some(m) = &spec.model {
        a.push("-m".into());
        a.push(m.clone());
    }
    for tool in spec.allow.iter().filter_map(|r| allowed_tool(r)) {
        a.push("--allowed-tools".into());
        a.push(tool);
    }
    if let Some(r) = &spec.resume {
        a.push("--resume".into());
        a.push(r.clone());
    }
    a
}

/// The system settings a run needs (write them to a file named by [`SYSTEM_SETTINGS_VAR`]):
/// `model.maxSessionTurns` for `max_turns`; `None` when the run needs none.
pub fn system_settings(spec: &RunSpec) -> Option<Value> {
    spec.max_turns.map(|n| json!({"model": {"maxSessionTurns": n}}))
}

/// gemini reads its prompt from the command line; stdin gets `/dev/null` (anything piped is
/// prepended to the prompt).
pub fn initial_stdin(_spec: &RunSpec) -> Vec<u8> {
    Vec::new()
}

/// Success is a `result` with status `success`: SIGTERM/SIGINT end gemini with rc 0 and no
/// `result` (protocols.md §3.5), which is a failure. An API error carries its HTTP status (the
/// exit code is that status mod 256); the turn limit is `MaxTurns`.
pub fn verdict(result: Option<&ResultInfo>, exit: Exit) -> Verdict {
    let Some(r) = result else {
        return Verdict::Failed(FailureReason::NoResult {
            exit_code: match exit {
                Exit::Code(c) => Some(c),
                Exit::Signal(_) => None,
            },
        });
    };
    let message = || r.errors.last().cloned().or_else(|| r.text.clone()).unwrap_or_default();
    match (&r.subtype, r.is_error) {
        (ResultKind::Success, false) => Verdict::Completed,
        (ResultKind::ErrorMaxTurns, _) => Verdict::Failed(FailureReason::MaxTurns),
        _ if r.api_error_status.is_some() => Verdict::Failed(FailureReason::ApiError {
            status: r.api_error_status,
            message: message(),
        }),
        _ => Verdict::Failed(FailureReason::AgentError { message: message() }),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn the_policy_refuses_missing_tools_and_asks_about_watched_ones() {
        assert_eq!(policy(&RunSpec::default()), None);
        let spec = RunSpec {
            tools: Some(vec!["Bash".into(), "read".into()]),
            ask_first: vec!["bash".into(), "read".into(), "write".into()],
            ..RunSpec::default()
        };
        let p = policy(&spec).unwrap();
        let rules: toml::Value = toml::from_str(&p).unwrap();
        let rules = rules["rule"].as_array().unwrap();
        let names = |i: usize| -> Vec<&str> {
            rules[i]["toolName"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect()
        };
        assert_eq!(rules[0]["decision"].as_str(), Some("deny"));
        assert!(names(0).contains(&"write_file") && names(0).contains(&"grep_search"));
        assert!(!names(0).contains(&"read_file") && !names(0).contains(&"run_shell_command"));
        assert_eq!(rules[1]["decision"].as_str(), Some("ask_user"));
        // Write is refused already: asked about are the run's own watched tools.
        assert_eq!(names(1), ["run_shell_command", "read_file", "read_many_files"]);
        let launch = Launch {
            env: &[],
            override_bin: None,
            confined: false,
            files: &[(POLICY_FILE, PathBuf::from("/s/t/x.gemini-policy.toml"))],
        };
        assert_eq!(policy_args(&launch), ["--policy", "/s/t/x.gemini-policy.toml"]);
    }

    #[test]
    fn allow_rules_become_allowed_tools() {
        assert_eq!(allowed_tool("Bash").as_deref(), Some("run_shell_command"));
        assert_eq!(
            allowed_tool("Bash(cargo test *)").as_deref(),
            Some("run_shell_command(cargo test)")
        );
        assert_eq!(
            allowed_tool("Bash(git diff:*)").as_deref(),
            Some("run_shell_command(git diff)")
        );
        assert_eq!(allowed_tool("Bash(echo)").as_deref(), Some("run_shell_command(echo)"));
        assert_eq!(allowed_tool("Bash(rm * -rf)"), None);
        assert_eq!(allowed_tool("Bash(*)").as_deref(), Some("run_shell_command"));
        assert_eq!(allowed_tool("Write").as_deref(), Some("write_file"));
        assert_eq!(allowed_tool("Edit(src/**)"), None);
        assert_eq!(allowed_tool("mcp__srv__x"), None);
        assert_eq!(allowed_tool("Bash(unclosed"), None);
    }

    #[test]
    fn argv_and_settings() {
        let spec = RunSpec {
            prompt: "-p looks like a flag".into(),
            model: Some("gemini-2.5-flash".into()),
            allow: vec!["Bash(echo *)".into(), "Edit".into(), "Weird(x)".into()],
            resume: Some("sess-1".into()),
            max_turns: Some(4),
            ..RunSpec::default()
        };
        assert_eq!(
            args(&spec),
            [
                "--prompt=-p looks like a flag",
                "-o",
                "stream-json",
                "-m",
                "gemini-2.5-flash",
                "--allowed-tools",
                "run_shell_command(echo)",
                "--allowed-tools",
                "replace",
                "--resume",
                "sess-1",
            ]
        );
        assert_eq!(system_settings(&spec), Some(json!({"model": {"maxSessionTurns": 4}})));
        assert_eq!(system_settings(&RunSpec::default()), None);
        assert!(initial_stdin(&spec).is_empty());
    }
}
