//! The optional network front (`dsh serve --listen 127.0.0.1:PORT`): the same
//! [`jsonrpsee::Methods`] over WebSocket and HTTP, behind two checks in an HTTP middleware: a
//! bearer token (read from `$DSH_HOME/token`, mode 0600, created on first use) and an Origin
//! check (a browser page may only connect from an origin the user allowed). Loopback only.
//!
//! `jsonrpsee`'s server takes the HTTP connections and answers plain HTTP requests itself; an
//! RPC middleware gives "what the model saw" the line transport's treatment there (answered
//! and serialized on the blocking pool, two in the process at a time). A WebSocket upgrade is
//! taken over by the middleware and served by the socket's line transport ([`websocket`]).

use std::borrow::Cow;
use std::future::Future;
use std::io::Write as _;
use std::net::SocketAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use anyhow::{Context as _, bail};
use dsh_protocol::code::SHUTTING_DOWN;
use jsonrpsee::MethodResponse;
use jsonrpsee::core::middleware::{Batch, Notification, Request, RpcServiceBuilder, RpcServiceT};
use jsonrpsee::server::{HttpRequest, HttpResponse, ServerHandle};
use jsonrpsee::types::ErrorObject;
use tower::{Layer, Service};

use crate::connection::{LargePlaces, is_large, on_blocking_pool};

mod websocket;

pub use websocket::WebSockets;
use websocket::refuse;

/// Reads (or creates) the bearer token; refuses a token file others can read.
pub fn load_token(home: &Path) -> anyhow::Result<String> {
    let path = crate::startup::DshHome::new(home).token_file();
    if !path.exists() {
        // 16 bytes from the kernel's CSPRNG (fastrand is not meant for secrets).
        let mut bytes = [0u8; 16];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut random| std::io::Read::read_exact(&mut random, &mut bytes))
            .context("reading /dev/urandom for the token")?;
        let token: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
        let mut file = std::fs::OpenOptions::new()
            .create_new(true)
            .write(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        file.write_all(token.as_bytes()).with_context(|| format!("writing {}", path.display()))?;
        return Ok(token);
    }
    let mode = std::fs::metadata(&path)?.permissions().mode();
    if mode & 0o077 != 0 {
        bail!(
            "{} is readable by other users (mode {:o}): chmod 600 it",
            path.display(),
            mode & 0o777
        );
    }
    let token =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let token = token.trim().to_owned();
    if token.len() < 16 {
        bail!("{} holds a token shorter than 16 characters", path.display());
    }
    Ok(token)
}

/// Writes a small file only the user can read (replacing it).
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.write_all(bytes).with_context(|| format!("writing {}", path.display()))
}

/// Starts the network listener; answers its handle and the address it is bound to.
pub async fn start(
    home: &Path,
    addr: SocketAddr,
    allow_origins: &[String],
    websockets: WebSockets,
) -> anyhow::Result<(ServerHandle, SocketAddr)> {
    if !addr.ip().is_loopback() {
        bail!("--listen {addr}: only loopback addresses are allowed");
    }
    let token = load_token(home)?;
    let methods = websockets.methods.clone();
    let places = websockets.daemon.large_places.clone();
    let own_origin = crate::web::OwnOrigin::default();
    let layer = AuthLayer {
        bearer: Arc::from(format!("Bearer {token}")),
        token: Arc::from(token),
        origins: Arc::new(allow_origins.to_vec()),
        own_origin: Arc::clone(&own_origin),
        websockets,
    };
    // As on the socket: one request per message, no batches. Answers up to `MAX_ANSWER_BYTES`:
    // "what the model saw" of a long conversation is a hundred megabytes, and jsonrpsee refuses
    // anything past 10 MB by default. HTTP only: the middleware takes every WebSocket upgrade.
    let config = jsonrpsee::server::ServerConfig::builder()
        .http_only()
        .set_batch_request_config(jsonrpsee::server::BatchRequestConfig::Disabled)
        .max_response_body_size(MAX_ANSWER_BYTES)
        .build();
    let server = jsonrpsee::server::Server::builder()
        .set_config(config)
        .set_http_middleware(tower::ServiceBuilder::new().layer(layer))
        .set_rpc_middleware(
            RpcServiceBuilder::new()
                .layer_fn(move |inner| LargeAnswers { inner, places: places.clone() }),
        )
        .build(addr)
        .await
        .with_context(|| format!("listening on {addr}"))?;
    let bound = server.local_addr().unwrap_or(addr);
    let _ = own_origin.set(crate::web::origin_of(bound));
    tracing::info!(%bound, "network listener (WebSocket/HTTP, bearer token or web login required)");
    Ok((server.start(methods), bound))
}

/// The largest answer the network front sends (256 MiB); a larger one is an error.
const MAX_ANSWER_BYTES: u32 = 256 * 1024 * 1024;

/// The RPC middleware of one HTTP request: a method the table marks large runs, its answer
/// serialized, on the blocking pool once one of the daemon's places is free (the line
/// transport's, [`LargePlaces`]); any other call goes straight through. The place is given
/// back when the answer is made, not when it is written (hyper writes it): over HTTP a client
/// holds as many answers as the requests it has open (HTTP/2 runs several on one connection).
#[derive(Clone)]
struct LargeAnswers<S> {
    inner: S,
    places: LargePlaces,
}

impl<S> RpcServiceT for LargeAnswers<S>
where
    S: RpcServiceT<MethodResponse = MethodResponse> + Clone + Send + Sync + 'static,
{
    type MethodResponse = MethodResponse;
    type NotificationResponse = S::NotificationResponse;
    type BatchResponse = S::BatchResponse;

    fn call<'a>(&self, request: Request<'a>) -> impl Future<Output = MethodResponse> + Send + 'a {
        let (inner, places) = (self.inner.clone(), self.places.clone());
        async move {
            if !is_large(request.method_name()) {
                return inner.call(request).await;
            }
            // The blocking pool needs the request for as long as it runs: owned.
            let Request { jsonrpc, id, method, params, extensions } = request;
            let id = id.into_owned();
            let owned = Request {
                jsonrpc,
                id: id.clone(),
                method: Cow::Owned(method.into_owned()),
                params: params.map(|params| Cow::Owned(params.into_owned())),
                extensions,
            };
            let failed = |(code, message): (i32, String)| {
                MethodResponse::error(id.clone(), ErrorObject::owned(code, message, None::<()>))
            };
            // The semaphore is never closed.
            let Some(place) = places.take().await else {
                return failed((SHUTTING_DOWN, "the daemon is shutting down".to_owned()));
            };
            let method = owned.method.to_string();
            let answered = on_blocking_pool(&method, place, async move { inner.call(owned).await });
            answered.await.unwrap_or_else(failed)
        }
    }

    fn batch<'a>(&self, batch: Batch<'a>) -> impl Future<Output = Self::BatchResponse> + Send + 'a {
        // Batches are disabled on this front (`BatchRequestConfig::Disabled` above): a batched
        // `session/request` would bypass the places.
        self.inner.batch(batch)
    }

    fn notification<'a>(
        &self,
        notification: Notification<'a>,
    ) -> impl Future<Output = Self::NotificationResponse> + Send + 'a {
        self.inner.notification(notification)
    }
}

/// The middleware: the browser's login; the bearer token or the session cookie, then Origin;
/// then a WebSocket upgrade is taken over and the page's assets are served.
#[derive(Clone)]
struct AuthLayer {
    /// `Bearer TOKEN`, as the header says it.
    bearer: Arc<str>,
    /// The token itself (the session cookie's key).
    token: Arc<str>,
    /// Origins allowed with `--allow-origin`.
    origins: Arc<Vec<String>>,
    /// The page's own origin (once bound): allowed too.
    own_origin: crate::web::OwnOrigin,
    websockets: WebSockets,
}

impl<S> Layer<S> for AuthLayer {
    type Service = Auth<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Auth { inner, layer: self.clone() }
    }
}

#[derive(Clone)]
struct Auth<S> {
    inner: S,
    layer: AuthLayer,
}

/// Compares without an early exit, so timing does not tell how much of a guess was right.
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, B> Service<HttpRequest<B>> for Auth<S>
where
    B: Send + 'static,
    S: Service<HttpRequest<B>, Response = HttpResponse>,
    S::Error: Into<BoxError> + 'static,
    S::Future: Send + 'static,
{
    type Response = HttpResponse;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<HttpResponse, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: HttpRequest<B>) -> Self::Future {
        let own_origin = self.layer.own_origin.get().cloned();
        let response = match self.check(&request, own_origin.as_deref()) {
            Checked::Answer(response) => response,
            Checked::Upgrade { protocol } => self.layer.websockets.upgrade(request, protocol),
            Checked::Api => {
                let future = self.inner.call(request);
                return Box::pin(async move {
                    let mut response = future.await.map_err(Into::into)?;
                    crate::web::http::secure(&mut response, own_origin.as_deref());
                    Ok(response)
                });
            }
        };
        let mut response = response;
        crate::web::http::secure(&mut response, own_origin.as_deref());
        Box::pin(async { Ok(response) })
    }
}

/// What the middleware does with a request.
enum Checked {
    /// Answered here (a refusal, the login, an asset).
    Answer(HttpResponse),
    /// An authorized WebSocket upgrade; the page's subprotocol to echo, if it sent one.
    Upgrade { protocol: Option<String> },
    /// An authorized API call over HTTP.
    Api,
}

impl<S> Auth<S> {
    fn check<B>(&self, request: &HttpRequest<B>, own_origin: Option<&str>) -> Checked {
        let get = request.method() == http::Method::GET;
        let path = request.uri().path();
        let upgrade = websocket::is_upgrade_request(request);
        if get && !upgrade && path == "/login" {
            let web = &self.layer.websockets.daemon.web;
            return Checked::Answer(crate::web::http::login(
                web,
                &self.layer.token,
                request.uri().query(),
            ));
        }
        let headers = request.headers();
        let bearer = headers
            .get("authorization")
            .is_some_and(|value| same(value.as_bytes(), self.layer.bearer.as_bytes()));
        let token = &self.layer.token;
        // Every valid `dsh_web` cookie the browser sent (another local server can set one of
        // that name too): the tab secret below may be any one's.
        let cookies: Vec<&str> = if bearer {
            Vec::new()
        } else {
            headers
                .get_all("cookie")
                .iter()
                .filter_map(|header| header.to_str().ok())
                .flat_map(crate::web::cookie::in_header)
                .filter(|value| crate::web::cookie::valid(token, value))
                .collect()
        };
        if !bearer && cookies.is_empty() {
            return Checked::Answer(crate::web::http::not_logged_in(get && !upgrade));
        }
        let origin = headers.get("origin").map(|origin| origin.to_str().unwrap_or("\0"));
        let own = |origin: &str| own_origin == Some(origin);
        let allowed = match origin {
            Some(origin) => {
                own(origin) || self.layer.origins.iter().any(|allowed| allowed == origin)
            }
            // A cookie comes with any request the browser makes to this site, from pages of
            // other local servers too: what it authorizes beyond fetching the page's own files
            // must say it comes from the page.
            None => bearer || (get && !upgrade),
        };
        if !allowed {
            return Checked::Answer(refuse(403, "origin not allowed\n"));
        }
        // The cookie reaches other local servers too (cookies are scoped by host, not port):
        // the API also wants the tab secret of the cookie's login, which only the page's own
        // origin holds. The page's files need the cookie alone.
        let protocol = headers
            .get_all("sec-websocket-protocol")
            .iter()
            .filter_map(|header| header.to_str().ok())
            .find_map(crate::web::cookie::protocol_from_header);
        if !cookies.is_empty() && (upgrade || !get) {
            let secret = if upgrade {
                protocol.map(crate::web::cookie::secret_of_protocol)
            } else {
                headers.get(crate::web::cookie::SECRET_HEADER).and_then(|value| value.to_str().ok())
            };
            let matched = secret.is_some_and(|secret| {
                cookies
                    .iter()
                    .any(|cookie| crate::web::cookie::secret_matches(token, cookie, secret))
            });
            if !matched {
                return Checked::Answer(refuse(
                    403,
                    "this tab's login secret is missing or not the cookie's: run `dsh web` again\n",
                ));
            }
        }
        if upgrade {
            // A browser refuses an answer that does not echo the subprotocol it asked for.
            Checked::Upgrade { protocol: protocol.filter(|_| !bearer).map(str::to_owned) }
        } else if get {
            Checked::Answer(crate::web::http::asset(path))
        } else {
            Checked::Api
        }
    }
}
