//! `herd serve --web`: the dashboard — an HTTP/1 server (hyper) over the engine service with
//! its pages embedded in the binary, live through server-sent events fed by the watch streams.
//!
//! One listener; every request but the static assets needs the token (its cookie, set from the
//! URL printed at start); state-changing requests also need a same-origin check ([`guard`]).

mod assets;
mod guard;
mod http;
mod json;
mod routes;
mod sse;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use herd_engine::service::Service;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::sync::watch;

use crate::auth::{self, TokenError};

/// Where the dashboard listens when `--web` names no address.
pub const DEFAULT_ADDR: &str = "127.0.0.1:7400";
/// The environment variable the dashboard's token may come in.
pub const WEB_TOKEN_VAR: &str = "HERD_WEB_TOKEN";
/// The file (mode 0600, in the state directory) holding the dashboard's URL with its token
/// while the daemon runs: `herd web` prints it.
pub const URL_FILE: &str = "web.url";

/// How to serve the dashboard.
#[derive(Debug, Clone)]
pub struct WebOptions {
    pub addr: SocketAddr,
    /// The token (`--web-token` / `HERD_WEB_TOKEN`); `None`: a fresh random one, allowed only
    /// on a loopback address.
    pub token: Option<String>,
}

/// Why the dashboard cannot start.
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    #[error(
        "--web {addr}: not a loopback address, and no --web-token was given (or \
         {WEB_TOKEN_VAR}); refusing to serve the dashboard to the network without one"
    )]
    NoToken { addr: SocketAddr },
    #[error("--web {addr}: cannot listen: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error(transparent)]
    Token(#[from] TokenError),
}

/// A bound dashboard listener, not serving yet.
#[derive(Debug)]
pub struct Bound {
    listener: tokio::net::TcpListener,
    addr: SocketAddr,
    token: String,
}

/// Check the options and bind: nothing is served until [`Bound::serve`].
pub async fn bind(opts: WebOptions) -> Result<Bound, WebError> {
    let token = match opts.token {
        Some(t) => auth::checked("--web-token", &t)?,
        None if opts.addr.ip().is_loopback() => auth::random()?,
        None => return Err(WebError::NoToken { addr: opts.addr }),
    };
    let listener = tokio::net::TcpListener::bind(opts.addr)
        .await
        .map_err(|source| WebError::Bind { addr: opts.addr, source })?;
    let addr = listener.local_addr().unwrap_or(opts.addr);
    Ok(Bound { listener, addr, token })
}

impl Bound {
    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL to open: it carries the token once; the page trades it for a cookie.
    pub fn url(&self) -> String {
        format!("http://{}/?token={}", self.addr, self.token)
    }

    /// Serve until `stop` turns true; open connections (live streams) end with it.
    pub fn serve(
        self,
        svc: Service,
        project_root: PathBuf,
        stop: watch::Receiver<bool>,
    ) -> tokio::task::JoinHandle<()> {
        let state =
            Arc::new(routes::State::new(svc, self.token, self.addr, project_root, stop.clone()));
        tokio::spawn(accept(self.listener, state, stop))
    }
}

async fn accept(
    listener: tokio::net::TcpListener,
    state: Arc<routes::State>,
    mut stop: watch::Receiver<bool>,
) {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                // Out of descriptors and the like: wait a little rather than spin.
                Err(_) => {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = sse::stopped(&mut stop) => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        let _ = stream.set_nodelay(true);
        let state = Arc::clone(&state);
        conns.spawn(async move {
            let svc = service_fn(move |req| routes::handle(Arc::clone(&state), req));
            let _ = http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
    // Live streams never end on their own: the connections go with the daemon.
    conns.shutdown().await;
}

/// Write the dashboard's URL (with its token) to `<state>/web.url`, mode 0600.
pub fn write_url(state_dir: &Path, url: &str) -> std::io::Result<PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = state_dir.join(URL_FILE);
    let _ = std::fs::remove_file(&path);
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)?;
    writeln!(f, "{url}")?;
    Ok(path)
}

/// The dashboard's URL a running daemon wrote, if any.
pub fn read_url(state_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(state_dir.join(URL_FILE)).ok()?;
    let url = text.trim();
    (!url.is_empty()).then(|| url.to_owned())
}
