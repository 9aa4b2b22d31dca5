//! `herd serve`: the daemon in the foreground — its options from the flags, the project's
//! config and the environment; the daemon itself is `herd_server::serve`.

use std::path::Path;

use anyhow::Context;
use herd_server::ServeOptions;
use herd_server::auth::{self, TOKEN_VAR};
use herd_server::web::WebOptions;

use crate::cli::{ServeArgs, WebArgs};

pub fn run(state_dir: &Path, a: ServeArgs) -> anyhow::Result<u8> {
    let project_root = crate::state::project_root()?;
    let mut service = super::service_options(&project_root, "daemon")?;
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
        web: a.web.map(|addr| WebOptions { addr, token: a.web_token }),
    };
    let rt = super::runtime()?;
    rt.block_on(herd_server::serve(opts)).context("herd serve")?;
    Ok(crate::exit::COMPLETED)
}

/// `herd web`: the running dashboard's URL (with its token), printed, and opened with xdg-open
/// when there is a display (not with `--print`).
pub fn web(state_dir: &Path, a: WebArgs) -> anyhow::Result<u8> {
    let running = herd_server::client::socket_path(state_dir);
    let up = std::os::unix::net::UnixStream::connect(&running).is_ok();
    let url = herd_server::web::read_url(state_dir).filter(|_| up);
    let Some(url) = url else {
        anyhow::bail!(
            "no web dashboard runs for {}: start one with `herd serve --web`",
            state_dir.display()
        );
    };
    println!("{url}");
    let display = ["DISPLAY", "WAYLAND_DISPLAY"].iter().any(|v| std::env::var_os(v).is_some());
    if !a.print && display {
        let opened = std::process::Command::new("xdg-open")
            .arg(&url)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        if let Err(e) = opened {
            eprintln!("herd web: cannot run xdg-open ({e}); open the URL above");
        }
    }
    Ok(crate::exit::COMPLETED)
}
