//! Transport behaviour against a tiny scripted HTTP/1.1 server: each accepted connection plays
//! the next script, byte for byte, so timing and connection closure are under the test's control.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_provider::{ProviderError, StreamEvent, TimeoutKind};
use dsh_session::ChunkDelta;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::support::{body, call_config, client, collect, request, test_config, user};

/// One step of a scripted response.
#[derive(Clone, Debug)]
enum Step {
    Write(Vec<u8>),
    Sleep(Duration),
    /// Hold the connection open until the client closes it, then report the closure.
    WaitForClose,
}

struct RawServer {
    base_url: String,
    bodies: Arc<Mutex<Vec<Vec<u8>>>>,
    closed: mpsc::UnboundedReceiver<Instant>,
}

impl RawServer {
    async fn start(scripts: Vec<Vec<Step>>) -> RawServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let (closed_sender, closed) = mpsc::unbounded_channel();
        let recorded = Arc::clone(&bodies);
        tokio::spawn(async move {
            let mut scripts = scripts.into_iter();
            while let Ok((socket, _)) = listener.accept().await {
                let script =
                    scripts.next().unwrap_or_else(|| vec![Step::Write(http_error(500, "{}"))]);
                let recorded = Arc::clone(&recorded);
                let closed_sender = closed_sender.clone();
                tokio::spawn(async move {
                    serve(socket, script, recorded, closed_sender).await;
                });
            }
        });
        RawServer { base_url, bodies, closed }
    }

    fn bodies(&self) -> Vec<Vec<u8>> {
        self.bodies.lock().unwrap().clone()
    }
}

async fn serve(
    mut socket: TcpStream,
    script: Vec<Step>,
    recorded: Arc<Mutex<Vec<Vec<u8>>>>,
    closed: mpsc::UnboundedSender<Instant>,
) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(position) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break position + 4;
        }
        let read = socket.read(&mut chunk).await.unwrap();
        assert!(read > 0, "client closed before sending a request");
        buffer.extend_from_slice(&chunk[..read]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).to_lowercase();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .map(|value| value.trim().parse().unwrap())
        .unwrap_or(0);
    while buffer.len() < head_end + length {
        let read = socket.read(&mut chunk).await.unwrap();
        buffer.extend_from_slice(&chunk[..read]);
    }
    recorded.lock().unwrap().push(buffer[head_end..head_end + length].to_vec());
    for step in script {
        match step {
            Step::Write(bytes) => {
                if socket.write_all(&bytes).await.is_err() {
                    return;
                }
                let _ = socket.flush().await;
            }
            Step::Sleep(duration) => tokio::time::sleep(duration).await,
            Step::WaitForClose => {
                loop {
                    match socket.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                }
                let _ = closed.send(Instant::now());
                return;
            }
        }
    }
    let _ = socket.shutdown().await;
}

fn sse_head() -> Step {
    Step::Write(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n"
            .to_vec(),
    )
}

fn http_error(status: u16, json: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status} Whatever\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{json}",
        json.len()
    )
    .into_bytes()
}

fn frame(delta: &str, finish_reason: Option<&str>, usage: Option<&str>) -> Step {
    let finish_reason = finish_reason.map_or("null".to_owned(), |reason| format!("\"{reason}\""));
    let usage = usage.unwrap_or("null");
    Step::Write(
        format!(
            "data: {{\"id\":\"1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"logprobs\":null,\"finish_reason\":{finish_reason}}}],\"usage\":{usage}}}\n\n"
        )
        .into_bytes(),
    )
}

fn text(piece: &str) -> Step {
    frame(&format!("{{\"content\":\"{piece}\",\"reasoning_content\":null}}"), None, None)
}

const USAGE: &str = r#"{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12,"prompt_cache_hit_tokens":0,"prompt_cache_miss_tokens":10}"#;

fn success() -> Vec<Step> {
    vec![
        sse_head(),
        frame(r#"{"role":"assistant","content":""}"#, None, None),
        text("hel"),
        text("lo"),
        frame(r#"{"content":"","reasoning_content":null}"#, Some("stop"), Some(USAGE)),
        Step::Write(b"data: [DONE]\n\n".to_vec()),
    ]
}

fn keep_alive() -> Step {
    Step::Write(b": keep-alive\n\n".to_vec())
}

fn sample_body() -> bytes::Bytes {
    body(&request(call_config("deepseek-v4-flash", false), vec![], vec![user("hi")]))
}

#[tokio::test]
async fn a_scripted_stream_yields_text_then_finish() {
    let server = RawServer::start(vec![success()]).await;
    let outcome = collect(&client(test_config(&server.base_url, "sk-test")), sample_body()).await;
    let (reason, usage) = outcome.expect_success();
    assert_eq!(reason, "stop");
    assert_eq!(usage.prompt_tokens, 10);
    assert_eq!(outcome.message().content, "hello");
    assert_eq!(server.bodies(), vec![sample_body().to_vec()]);
}

#[tokio::test]
async fn retryable_statuses_are_retried_with_byte_identical_bodies() {
    let busy = r#"{"error":{"message":"Server Overloaded","type":"server_error","param":null,"code":null}}"#;
    let server = RawServer::start(vec![
        vec![Step::Write(http_error(503, busy))],
        vec![Step::Write(http_error(429, busy))],
        vec![Step::Write(http_error(500, busy))],
        success(),
    ])
    .await;
    let outcome = collect(&client(test_config(&server.base_url, "sk-test")), sample_body()).await;
    outcome.expect_success();
    assert_eq!(outcome.retries(), vec![1, 2, 3]);
    let bodies = server.bodies();
    assert_eq!(bodies.len(), 4);
    assert!(bodies.iter().all(|body| body == &sample_body().to_vec()));
}

#[tokio::test]
async fn retries_stop_at_max_attempts_with_the_last_error() {
    let busy = r#"{"error":{"message":"Server Overloaded"}}"#;
    let scripts = (0..6).map(|_| vec![Step::Write(http_error(503, busy))]).collect();
    let server = RawServer::start(scripts).await;
    let outcome = collect(&client(test_config(&server.base_url, "sk-test")), sample_body()).await;
    let error = outcome.expect_error();
    assert_eq!(
        error,
        &ProviderError::Http { status: 503, message: "Server Overloaded".to_owned() }
    );
    assert_eq!(outcome.retries(), vec![1, 2, 3]);
    assert_eq!(server.bodies().len(), 4);
}

#[tokio::test]
async fn an_auth_error_is_not_retried_and_never_shows_the_configured_key() {
    let key = "sk-supersecret9876";
    // A misbehaving proxy that echoes the whole key must not leak it either.
    let json = format!(
        r#"{{"error":{{"message":"Authentication Fails, Your api key: ****9876 is invalid ({key})","type":"authentication_error","param":null,"code":"invalid_request_error"}}}}"#
    );
    let server = RawServer::start(vec![vec![Step::Write(http_error(401, &json))], success()]).await;
    let deepseek = client(test_config(&server.base_url, key));
    let outcome = collect(&deepseek, sample_body()).await;
    let error = outcome.expect_error();
    let shown = format!("{error} {error:?} {deepseek:?}");
    assert!(!shown.contains("supersecret"), "{shown}");
    assert!(error.to_string().contains("Authentication Fails"), "{error}");
    assert!(matches!(error, ProviderError::Http { status: 401, .. }));
    assert!(!error.is_retryable());
    assert_eq!(server.bodies().len(), 1);
}

/// An error the server (or a proxy) reports inside the stream, echoing the key, is scrubbed like
/// an HTTP error body.
#[tokio::test]
async fn an_error_inside_the_stream_never_shows_the_configured_key() {
    let key = "sk-supersecret9876";
    let error_frame =
        format!("data: {{\"error\":{{\"message\":\"quota exceeded for key {key}\"}}}}\n\n");
    let server = RawServer::start(vec![vec![
        sse_head(),
        text("par"),
        Step::Write(error_frame.into_bytes()),
    ]])
    .await;
    let outcome = collect(&client(test_config(&server.base_url, key)), sample_body()).await;
    let error = outcome.expect_error();
    let shown = format!("{error} {error:?}");
    assert!(shown.contains("quota exceeded for key ****"), "{shown}");
    assert!(!shown.contains("supersecret"), "{shown}");
}

#[tokio::test]
async fn a_stream_closed_before_done_is_stream_cut_and_not_retried_after_deltas() {
    let server = RawServer::start(vec![
        vec![sse_head(), frame(r#"{"role":"assistant","content":""}"#, None, None), text("par")],
        success(),
    ])
    .await;
    let outcome = collect(&client(test_config(&server.base_url, "sk-test")), sample_body()).await;
    assert!(matches!(outcome.expect_error(), ProviderError::StreamCut(_)), "{:?}", outcome.error);
    assert_eq!(outcome.deltas(), 1);
    assert_eq!(outcome.retries(), Vec::<u32>::new());
    assert_eq!(server.bodies().len(), 1);
}

#[tokio::test]
async fn a_stream_cut_before_any_delta_is_retried() {
    let server = RawServer::start(vec![vec![sse_head(), keep_alive()], success()]).await;
    let outcome = collect(&client(test_config(&server.base_url, "sk-test")), sample_body()).await;
    outcome.expect_success();
    assert_eq!(outcome.retries(), vec![1]);
    assert_eq!(outcome.message().content, "hello");
}

#[tokio::test]
async fn keep_alive_comments_do_not_reset_the_data_timer() {
    let mut script =
        vec![sse_head(), frame(r#"{"role":"assistant","content":""}"#, None, None), text("a")];
    for _ in 0..60 {
        script.push(Step::Sleep(Duration::from_millis(50)));
        script.push(keep_alive());
    }
    let server = RawServer::start(vec![script]).await;
    let mut config = test_config(&server.base_url, "sk-test");
    config.data_timeout = Duration::from_millis(400);
    let started = Instant::now();
    let outcome = collect(&client(config), sample_body()).await;
    let elapsed = started.elapsed();
    assert_eq!(
        outcome.expect_error(),
        &ProviderError::Timeout { kind: TimeoutKind::NoData, after: Duration::from_millis(400) }
    );
    assert!(elapsed < Duration::from_millis(1500), "took {elapsed:?}: keep-alives reset the timer");
}

#[tokio::test]
async fn the_overall_timer_bounds_a_slowly_progressing_stream() {
    let mut script = vec![sse_head(), frame(r#"{"role":"assistant","content":""}"#, None, None)];
    for _ in 0..40 {
        script.push(Step::Sleep(Duration::from_millis(50)));
        script.push(text("x"));
    }
    let server = RawServer::start(vec![script]).await;
    let mut config = test_config(&server.base_url, "sk-test");
    config.data_timeout = Duration::from_millis(400);
    config.overall_timeout = Duration::from_millis(600);
    let outcome = collect(&client(config), sample_body()).await;
    assert!(
        matches!(outcome.expect_error(), ProviderError::Timeout { kind: TimeoutKind::Overall, .. }),
        "{:?}",
        outcome.error
    );
    assert!(outcome.deltas() > 3);
}

#[tokio::test]
async fn cancelling_mid_stream_returns_cancelled_promptly_and_closes_the_connection() {
    let script = vec![
        sse_head(),
        frame(r#"{"role":"assistant","content":""}"#, None, None),
        text("a"),
        Step::WaitForClose,
    ];
    let mut server = RawServer::start(vec![script]).await;
    let deepseek = client(test_config(&server.base_url, "sk-test"));
    let cancel = CancellationToken::new();
    let mut stream = deepseek.stream(sample_body(), cancel.clone());
    let first = stream.next().await.unwrap().unwrap();
    assert_eq!(first, StreamEvent::Delta(ChunkDelta::Text { text: "a".to_owned() }));

    let cancelled_at = Instant::now();
    cancel.cancel();
    let next = tokio::time::timeout(Duration::from_millis(200), stream.next()).await.unwrap();
    assert_eq!(next, Some(Err(ProviderError::Cancelled)));
    assert_eq!(stream.next().await, None);
    let closed_at =
        tokio::time::timeout(Duration::from_secs(2), server.closed.recv()).await.unwrap().unwrap();
    assert!(closed_at.duration_since(cancelled_at) < Duration::from_secs(1));
}

#[tokio::test]
async fn dropping_the_stream_closes_the_connection() {
    let script = vec![sse_head(), text("a"), Step::WaitForClose];
    let mut server = RawServer::start(vec![script]).await;
    let deepseek = client(test_config(&server.base_url, "sk-test"));
    let mut stream = deepseek.stream(sample_body(), CancellationToken::new());
    assert!(matches!(stream.next().await, Some(Ok(StreamEvent::Delta(_)))));
    drop(stream);
    tokio::time::timeout(Duration::from_secs(2), server.closed.recv()).await.unwrap().unwrap();
}

#[tokio::test]
async fn an_unreachable_server_is_retried_then_reported_as_a_connect_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    let outcome =
        collect(&client(test_config(&format!("http://{address}"), "sk-test")), sample_body()).await;
    assert!(matches!(outcome.expect_error(), ProviderError::Connect(_)), "{:?}", outcome.error);
    assert_eq!(outcome.retries(), vec![1, 2, 3]);
}

#[tokio::test]
async fn an_https_base_url_builds_a_client() {
    // The ring provider is installed, so a TLS client can be built (no network needed).
    let config = test_config("https://api.deepseek.com/", "sk-test");
    assert!(dsh_provider::DeepSeek::new(config).is_ok());
}
