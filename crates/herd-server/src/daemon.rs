//! `herd serve`: one daemon per state directory (a lock naming its pid), the SubagentService on
//! `.herd/herd.sock` (0600) and optionally TCP with a bearer token, stopped cleanly by a signal.

use std::io::{Read, Seek, Write};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use herd_engine::GuardCommand;
use herd_engine::service::{ApiError, Service, ServiceOptions};
use nix::fcntl::{Flock, FlockArg};
use tokio::sync::watch;
use tokio_stream::wrappers::{TcpListenerStream, UnixListenerStream};

use crate::api::{self, Api};
use crate::auth::{self, Bearer};
use crate::request::Defaults;

/// How to serve.
#[derive(Debug)]
pub struct ServeOptions {
    pub state_dir: PathBuf,
    /// The project whose config, agents and memory requests use unless they say otherwise.
    pub project_root: PathBuf,
    /// Also listen on TCP here (needs a token).
    pub listen: Option<SocketAddr>,
    /// The TCP listener's token (from the environment or a file); `None`: generated into
    /// `<state>/herd.token` for a loopback address, refused for any other.
    pub token: Option<String>,
    pub service: ServiceOptions,
    /// The guard program (`None`: this executable).
    pub guard: Option<GuardCommand>,
    /// Also serve the web dashboard (`--web`).
    pub web: Option<crate::web::WebOptions>,
}

/// Why the daemon could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(
        "another herd serve (pid {pid}) already serves {state}; stop it first (kill -TERM {pid})"
    )]
    Running { pid: String, state: String },
    #[error("{what} {path}: {source}")]
    Io { what: &'static str, path: String, source: std::io::Error },
    #[error(
        "--listen {addr}: not a loopback address, and no token was given; set {var} (or \
         --token-file) so that only clients with the token can call it",
        var = auth::TOKEN_VAR
    )]
    NoToken { addr: SocketAddr },
    #[error(transparent)]
    Token(#[from] auth::TokenError),
    #[error(transparent)]
    Service(#[from] ApiError),
    #[error(transparent)]
    Web(#[from] crate::web::WebError),
    #[error("the gRPC server failed: {0}")]
    Transport(String),
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> DaemonError + 'a {
    move |source| DaemonError::Io { what, path: path.display().to_string(), source }
}

/// Where a daemon writes its log (beside stderr).
pub fn log_path(state_dir: &Path) -> PathBuf {
    state_dir.join("logs").join("daemon.log")
}

/// The daemon's log: each line to stderr and to `<state>/logs/daemon.log`.
#[derive(Debug)]
struct Log(Option<std::fs::File>);

impl Log {
    fn open(state_dir: &Path) -> Self {
        let p = log_path(state_dir);
        let _ = std::fs::create_dir_all(p.parent().unwrap_or(state_dir));
        Self(std::fs::OpenOptions::new().create(true).append(true).open(p).ok())
    }

    fn line(&mut self, msg: &str) {
        eprintln!("herd serve: {msg}");
        if let Some(f) = self.0.as_mut() {
            let _ = writeln!(f, "{} pid {}: {msg}", herd_store::now_ms(), std::process::id());
        }
    }
}

/// The lock that makes a daemon the only one of its state directory: `herd.pid`, locked for
/// the daemon's life, holding its pid (released by the kernel however it ends).
fn take_lock(state_dir: &Path) -> Result<Flock<std::fs::File>, DaemonError> {
    let path = state_dir.join("herd.pid");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io("cannot open", &path))?;
    let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(l) => l,
        Err((mut file, _)) => {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            let pid = pid.trim();
            return Err(DaemonError::Running {
                pid: if pid.is_empty() { "unknown".into() } else { pid.into() },
                state: state_dir.display().to_string(),
            });
        }
    };
    let write = |f: &mut std::fs::File| -> std::io::Result<()> {
        f.set_len(0)?;
        f.rewind()?;
        writeln!(f, "{}", std::process::id())?;
        f.sync_data()
    };
    write(&mut lock).map_err(io("cannot write", &path))?;
    Ok(lock)
}

/// Bind the Unix socket with mode 0600 from the start (umask around the bind).
fn bind_socket(path: &Path) -> Result<tokio::net::UnixListener, DaemonError> {
    // The lock is ours: a socket file left there is a dead daemon's.
    let _ = std::fs::remove_file(path);
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let bound = tokio::net::UnixListener::bind(path);
    nix::sys::stat::umask(old);
    let listener = bound.map_err(io("cannot listen on", path))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(io("cannot restrict", path))?;
    Ok(listener)
}

/// The TCP listener's token: given, else generated next to the state for a loopback address.
fn tcp_token(
    addr: SocketAddr,
    given: Option<String>,
    state_dir: &Path,
    log: &mut Log,
) -> Result<String, DaemonError> {
    if let Some(t) = given {
        return Ok(auth::checked("the token", &t)?);
    }
    if !addr.ip().is_loopback() {
        return Err(DaemonError::NoToken { addr });
    }
    let path = state_dir.join("herd.token");
    let token = auth::generate(&path)?;
    log.line(&format!("the TCP listener's bearer token is in {} (mode 0600)", path.display()));
    Ok(token)
}

/// Run the daemon until SIGTERM or SIGINT: then stop accepting, stop every run with the stop
/// ladder, persist, and return (the caller exits 0).
pub async fn serve(opts: ServeOptions) -> Result<(), DaemonError> {
    std::fs::create_dir_all(&opts.state_dir).map_err(io("cannot create", &opts.state_dir))?;
    let state_dir = opts.state_dir.canonicalize().map_err(io("cannot read", &opts.state_dir))?;
    let lock = take_lock(&state_dir)?;
    let mut log = Log::open(&state_dir);
    // The token before anything listens: a refused start leaves nothing behind.
    let token = match opts.listen {
        Some(addr) => Some(tcp_token(addr, opts.token, &state_dir, &mut log)?),
        None => None,
    };
    // The dashboard's address and token too: a refused one stops the start here.
    let web = match opts.web {
        Some(w) => Some(crate::web::bind(w).await?),
        None => None,
    };
    let mut service_opts = opts.service;
    service_opts.surface = "daemon".into();
    service_opts.shared = true;
    // Opening sweeps what a dead daemon left: its runs failed(orphaned), locks and requests
    // closed, its plans interrupted.
    let svc = match opts.guard {
        Some(g) => Service::open_with(&state_dir, g, service_opts)?,
        None => Service::open(&state_dir, service_opts)?,
    };
    let socket = crate::client::socket_path(&state_dir);
    let unix = bind_socket(&socket)?;
    let tcp = match (opts.listen, token) {
        (Some(addr), Some(token)) => match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => {
                let bound = l.local_addr().unwrap_or(addr);
                log.line(&format!("listening on {bound} (bearer token required)"));
                Some((l, token))
            }
            Err(e) => {
                let _ = std::fs::remove_file(&socket);
                return Err(io("cannot listen on", Path::new(&addr.to_string()))(e));
            }
        },
        _ => None,
    };
    log.line(&format!("serving {} on {} (mode 0600)", state_dir.display(), socket.display()));
    let (stop_tx, stop_rx) = watch::channel(false);
    let web = web.map(|bound| {
        let url = bound.url();
        // The URL with its token goes to stderr only (not the log file) and to a 0600 file.
        eprintln!("herd serve: the web dashboard is on {url}");
        match crate::web::write_url(&state_dir, &url) {
            Ok(p) => log.line(&format!(
                "web dashboard on http://{}/ (its URL with the token is in {})",
                bound.addr(),
                p.display()
            )),
            Err(e) => log.line(&format!("web dashboard on http://{}/ ({e})", bound.addr())),
        }
        bound.serve(svc.clone(), opts.project_root.clone(), stop_rx.clone())
    });
    let api = Api::new(
        svc.clone(),
        Defaults { project_root: opts.project_root, who: "a client of herd serve".into() },
    );
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let mut servers = tokio::task::JoinSet::new();
    // One server per listener, each stopping accepting when told.
    macro_rules! serve {
        ($svc:expr, $incoming:expr) => {{
            let (svc, incoming, done) = ($svc, $incoming, stopped(stop_rx.clone()));
            servers.spawn(async move {
                tonic::transport::Server::builder()
                    .serve_with_incoming_shutdown(svc, incoming, done)
                    .await
                    .map_err(|e| e.to_string())
            });
        }};
    }
    serve!(api::server(api.clone()), UnixListenerStream::new(unix));
    if let Some((l, token)) = tcp {
        let svc = tonic::service::interceptor::InterceptedService::new(
            api::server(api.clone()),
            Bearer::new(token),
        );
        serve!(svc, TcpListenerStream::new(l));
    }
    drop(api);
    let failed = tokio::select! {
        signal = stop_signal() => {
            log.line(&format!("{signal}: stopping (no new connections; runs stop on the ladder)"));
            None
        }
        Some(r) = servers.join_next() => Some(match r {
            Ok(Err(e)) => e,
            Ok(Ok(())) => "a listener ended".into(),
            Err(e) => e.to_string(),
        }),
    };
    let _ = stop_tx.send(true);
    // Runs first: their watchers' streams end with them, and the servers with their streams.
    let stopped_jobs = svc.stop_jobs().await;
    let drain = async { while servers.join_next().await.is_some() {} };
    if tokio::time::timeout(Duration::from_secs(5), drain).await.is_err() {
        servers.shutdown().await;
    }
    if let Some(mut w) = web
        && tokio::time::timeout(Duration::from_secs(2), &mut w).await.is_err()
    {
        w.abort();
    }
    let shut = svc.shutdown().await;
    let _ = std::fs::remove_file(&socket);
    let _ = std::fs::remove_file(state_dir.join(crate::web::URL_FILE));
    log.line("stopped");
    drop(lock);
    stopped_jobs?;
    shut?;
    match failed {
        Some(e) => Err(DaemonError::Transport(e)),
        None => Ok(()),
    }
}

/// The first SIGTERM or SIGINT, by name.
async fn stop_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) =
        (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    else {
        // Without handlers the default action (exit) applies: wait forever here.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}
