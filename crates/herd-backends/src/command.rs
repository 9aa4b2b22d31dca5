//! The command backend: any program. The prompt goes to its stdin, each stdout line is a text
//! event, and the exit code decides — the one backend where an exit code is the whole truth.

use herd_core::{AgentEvent, Decoded, FailureReason, ResultInfo, Usage};

use std::path::{Path, PathBuf};

use crate::{
    Backend, BackendError, BackendKind, Decoder, Exit, Invocation, Launch, PermissionRoute,
    RunSpec, Verdict,
};

/// Runs `spec.command` (program and arguments).
#[derive(Debug, Clone, Copy)]
pub struct Command;

impl Backend for Command {
    fn kind(&self) -> BackendKind {
        BackendKind::Command
    }

    fn program(
        &self,
        spec: &RunSpec,
        path_var: Option<&str>,
        _override_bin: Option<&str>,
    ) -> Result<PathBuf, BackendError> {
        let Some(program) = spec.command.first() else {
            return Err(BackendError::Invalid(
                "the command backend needs a program: herd task PROMPT --cli command -- PROGRAM [ARGS…]"
                    .into(),
            ));
        };
        Ok(crate::resolve_program(program, "PATH", path_var, None)?)
    }

    fn invocation(&self, spec: &RunSpec, launch: &Launch<'_>) -> Result<Invocation, BackendError> {
        let program = self.program(spec, launch.var("PATH"), None)?;
        Ok(Invocation { program, args: spec.command[1..].to_vec() })
    }

    fn env_prefixes(&self, _spec: &RunSpec) -> &'static [&'static str] {
        &[]
    }

    fn permission_route(&self, _spec: &RunSpec, _confined: bool) -> PermissionRoute {
        PermissionRoute::None
    }

    fn initial_stdin(&self, spec: &RunSpec) -> Vec<u8> {
        spec.prompt.as_bytes().to_vec()
    }

    fn holds_stdin(&self) -> bool {
        false
    }

    fn interrupt_message(&self) -> Option<Vec<u8>> {
        None
    }

    fn decoder(&self, _spec: &RunSpec, _cwd: &Path) -> Box<dyn Decoder> {
        Box::new(LineDecoder)
    }

    fn verdict(&self, _result: Option<&ResultInfo>, exit: Exit) -> Verdict {
        match exit {
            Exit::Code(0) => Verdict::Completed,
            Exit::Code(code) => Verdict::Failed(FailureReason::ExitCode { code }),
            Exit::Signal(signal) => Verdict::Failed(FailureReason::Signal { signal }),
        }
    }
}

/// Each line is text.
#[derive(Debug)]
struct LineDecoder;

impl Decoder for LineDecoder {
    fn decode(&mut self, line: &[u8], out: &mut Vec<Decoded>) {
        let text = String::from_utf8_lossy(line.strip_suffix(b"\r").unwrap_or(line)).into_owned();
        out.push(Decoded::top(AgentEvent::Text { text }));
    }

    fn turns(&self) -> u32 {
        0
    }

    fn usage(&self) -> Usage {
        Usage::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_code_decides_and_lines_are_text() {
        assert_eq!(Command.verdict(None, Exit::Code(0)), Verdict::Completed);
        assert_eq!(
            Command.verdict(None, Exit::Code(3)),
            Verdict::Failed(FailureReason::ExitCode { code: 3 })
        );
        let mut out = Vec::new();
        Command
            .decoder(&RunSpec::default(), Path::new("/"))
            .decode(b"caf\xc3\xa9 \xff\r", &mut out);
        assert_eq!(out[0].event, AgentEvent::Text { text: "café \u{fffd}".into() });
    }

    #[test]
    fn needs_a_program() {
        let env = [("PATH".to_owned(), "/bin".to_owned())];
        let launch = Launch { env: &env, override_bin: None, confined: false, files: &[] };
        let err = Command.invocation(&RunSpec::default(), &launch).unwrap_err();
        assert!(err.to_string().contains("needs a program"));
    }
}
