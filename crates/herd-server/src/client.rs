//! A client of a running daemon: over its Unix socket (found from the state directory) or TCP
//! with a bearer token; calls return the service's own `ApiError`s, as a local call would.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use herd_engine::service::ApiError;
use hyper_util::rt::TokioIo;
use tonic::Request;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::pb::subagent_service_client::SubagentServiceClient;

/// The socket a daemon of `state_dir` listens on.
pub fn socket_path(state_dir: &Path) -> PathBuf {
    state_dir.join("herd.sock")
}

/// Adds the bearer token (when there is one) to each request.
#[derive(Debug, Clone)]
pub struct Token(Option<Arc<str>>);

impl tonic::service::Interceptor for Token {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, tonic::Status> {
        if let Some(t) = &self.0 {
            let v = format!("Bearer {t}")
                .parse()
                .map_err(|_| tonic::Status::invalid_argument("the token is not a header value"))?;
            req.metadata_mut().insert("authorization", v);
        }
        Ok(req)
    }
}

/// The generated client, with the token interceptor.
pub type Client = SubagentServiceClient<InterceptedService<Channel, Token>>;

fn client(channel: Channel, token: Option<String>) -> Client {
    SubagentServiceClient::with_interceptor(channel, Token(token.map(Into::into)))
        .max_decoding_message_size(64 << 20)
}

/// Connect to the daemon listening on `socket`.
pub async fn connect_unix(socket: &Path) -> Result<Client, ApiError> {
    let path = Arc::new(socket.to_path_buf());
    // The URI is required and unused: the connector dials the socket.
    let channel = Endpoint::from_static("http://herd.sock")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = Arc::clone(&path);
            async move { tokio::net::UnixStream::connect(&*path).await.map(TokioIo::new) }
        }))
        .await
        .map_err(|e| unavailable(&socket.display().to_string(), &e))?;
    Ok(client(channel, None))
}

/// Connect to a daemon's TCP listener (`http://HOST:PORT`) with its token.
pub async fn connect_tcp(url: &str, token: Option<String>) -> Result<Client, ApiError> {
    let endpoint = Endpoint::from_shared(url.to_owned())
        .map_err(|e| ApiError::invalid(format!("{url}: not a daemon address ({e})")))?;
    let channel = endpoint.connect().await.map_err(|e| unavailable(url, &e))?;
    Ok(client(channel, token))
}

/// The daemon of `state_dir`, if one is running there (its socket takes a connection).
pub async fn running(state_dir: &Path) -> Option<Client> {
    let socket = socket_path(state_dir);
    if !socket.exists() {
        return None;
    }
    connect_unix(&socket).await.ok()
}

fn unavailable(at: &str, e: &dyn std::error::Error) -> ApiError {
    let mut why = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        why = format!("{why}: {s}");
        src = s.source();
    }
    ApiError::internal(format!("cannot reach the herd daemon at {at}: {why}"))
}
