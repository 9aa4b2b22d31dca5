//! `herd serve`: the daemon in the foreground — its options from the flags, the project's
//! config and the environment; the daemon itself is `herd_server::serve`.

use std::path::Path;

use anyhow::Context;
use herd_engine::service::ServiceOptions;
use herd_server::ServeOptions;
use herd_server::auth::{self, TOKEN_VAR};

use crate::cli::ServeArgs;

pub fn run(state_dir: &Path, a: ServeArgs) -> anyhow::Result<u8> {
    let project_root = crate::state::project_root()?;
    let mut service = ServiceOptions::for_project(&project_root, "daemon")?;
    if let Some(n) = a.max_concurrent {
        service.max_concurrent = n as usize;
    }
    if let Some(n) = a.max_queue {
        service.max_queue = n as usize;
    }
    let token = match (&a.token_file, std::env::var(TOKEN_VAR)) {
        (Some(f), _) => Some(auth::read(f)?),
        (None, Ok(t)) if a.listen.is_some() => Some(auth::checked(TOKEN_VAR, &t)?),
        _ => None,
    };
    let opts = ServeOptions {
        state_dir: state_dir.to_path_buf(),
        project_root,
        listen: a.listen,
        token,
        service,
        guard: None,
    };
    let rt = super::runtime()?;
    rt.block_on(herd_server::serve(opts)).context("herd serve")?;
    Ok(crate::exit::COMPLETED)
}
