//! The `herd` binary: parses the command line, runs one command, maps the outcome to an exit
//! code (0 completed, 1 failed, 2 usage or input error, 3 timeout, 4 completed with calls
//! denied for want of an answer, 130 cancelled).

mod board;
mod cli;
mod cmd;
#[cfg(test)]
mod fixtures;
mod fmt;
mod state;
mod tables;

use std::process::ExitCode;

use clap::Parser;

/// An error that is the caller's to fix (bad flag value, unknown id): exit code 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Exit codes, documented in `herd --help`.
pub mod exit {
    pub const COMPLETED: u8 = 0;
    pub const FAILED: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const TIMEOUT: u8 = 3;
    /// Completed, but tool calls were denied because nobody answered.
    pub const DENIED: u8 = 4;
    pub const CANCELLED: u8 = 130;
}

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == herd_engine::guard::GUARD_ARG) {
        return herd_engine::guard::guard_main(&args[2..]);
    }
    if args.get(1).is_some_and(|a| a == herd_engine::sandbox::INIT_ARG) {
        return herd_engine::sandbox::init_main(&args[2..]);
    }
    let cli = cli::Cli::parse();
    match cmd::dispatch(cli) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            if is_broken_pipe(&err) {
                return ExitCode::SUCCESS;
            }
            eprintln!("herd: error: {err:#}");
            if err.downcast_ref::<UsageError>().is_some() {
                return ExitCode::from(exit::USAGE);
            }
            let code = err
                .downcast_ref::<herd_engine::service::ApiError>()
                .map_or(exit::FAILED, |e| e.code.exit_code());
            ExitCode::from(code)
        }
    }
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
