//! The command backend: any program. The prompt goes to its stdin, each stdout line is a text
//! event, and the exit code decides — the one backend where an exit code is the whole truth.

use herd_core::{AgentEvent, Decoded, FailureReason, ResultInfo, Usage};

use crate::{Backend, BackendError, BackendKind, Decoder, Exit, Invocation, RunSpec, Verdict};

/// Runs `spec.command` (program and arguments).
#[derive(Debug, Clone, Copy)]
pub struct Command;

impl Backend for Command {
    fn kind(&self) -> BackendKind {
        BackendKind::Command
    }

    fn program_override_var(&self) -> Option<&'static str> {
        None
    }

    fn invocation(
        &self,
        spec: &RunSpec,
        path_var: Option<&str>,
        _override_bin: Option<&str>,
    ) -> Result<Invocation, BackendError> {
        let Some((program, args)) = spec.command.split_first() else {
            return Err(BackendError::Invalid(
                "the command backend needs a program: herd task PROMPT --cli command -- PROGRAM [ARGS…]"
                    .into(),
            ));
        };
        let program = crate::resolve_program(program, "PATH", path_var, None)?;
        Ok(Invocation { program, args: args.to_vec() })
    }

    fn env_prefixes(&self) -> &'static [&'static str] {
        &[]
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

    fn decoder(&self) -> Box<dyn Decoder> {
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
        Command.decoder().decode(b"caf\xc3\xa9 \xff\r", &mut out);
        assert_eq!(out[0].event, AgentEvent::Text { text: "café \u{fffd}".into() });
    }

    #[test]
    fn needs_a_program() {
        let err = Command.invocation(&RunSpec::default(), Some("/bin"), None).unwrap_err();
        assert!(err.to_string().contains("needs a program"));
    }
}
