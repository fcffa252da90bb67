//! The network listener's WebSocket connections, served like the socket's: the token, the same
//! answers and refusals, subscriptions that belong to their connection, the connection cap,
//! and a client that never reads, disconnected with its memory given back.

use std::time::{Duration, Instant};

use dsh_protocol::jsonrpc::{Id, Request, raw};
use futures::io::{BufReader, BufWriter};
use serde_json::{Value, json};
use soketto::connection::{Receiver, Sender};
use soketto::handshake::client::{Client, Header, ServerResponse};
use tokio::net::TcpStream;
use tokio_util::compat::{Compat, TokioAsyncReadCompatExt};

use super::hardening::{vm_kib, write_log};
use super::security::bound_address;
use crate::support::{DEADLINE, Env};

type Stream = BufReader<BufWriter<Compat<TcpStream>>>;

/// A WebSocket to the listener at `address`, with `token` as its bearer token (or none); the
/// HTTP status when the upgrade is refused.
async fn open(
    address: &str,
    token: Option<&str>,
) -> Result<(Sender<Stream>, Receiver<Stream>), u16> {
    let stream = TcpStream::connect(address).await.unwrap();
    let mut client = Client::new(BufReader::new(BufWriter::new(stream.compat())), address, "/");
    let bearer = token.map(|token| format!("Bearer {token}"));
    let headers: Vec<Header<'_>> = bearer
        .iter()
        .map(|value| Header { name: "Authorization", value: value.as_bytes() })
        .collect();
    client.set_headers(&headers);
    match client.handshake().await.unwrap() {
        ServerResponse::Accepted { .. } => Ok(client.into_builder().finish()),
        ServerResponse::Rejected { status_code } | ServerResponse::Redirect { status_code, .. } => {
            Err(status_code)
        }
    }
}

fn request(id: u64, method: &str, params: Value) -> String {
    Request::new(Id::Number(id), method, raw(&params)).to_line()
}

/// The next message that answers `id` (events and notices in between are skipped).
async fn answer(receiver: &mut Receiver<Stream>, id: Value) -> Value {
    let read = async {
        loop {
            let mut message = Vec::new();
            receiver.receive_data(&mut message).await.unwrap();
            let value: Value = serde_json::from_slice(&message).unwrap();
            if value.get("id") == Some(&id) {
                return value;
            }
        }
    };
    tokio::time::timeout(DEADLINE, read).await.expect("no answer in time")
}

async fn call(
    (sender, receiver): &mut (Sender<Stream>, Receiver<Stream>),
    id: u64,
    method: &str,
    params: Value,
) -> Value {
    sender.send_text(request(id, method, params)).await.unwrap();
    sender.flush().await.unwrap();
    answer(receiver, json!(id)).await
}

fn token(env: &Env) -> String {
    std::fs::read_to_string(env.home.join("token")).unwrap().trim().to_owned()
}

/// Whether the connection ends within `wait` before any message that answers.
async fn closes(receiver: &mut Receiver<Stream>, wait: Duration) -> bool {
    let read = async {
        loop {
            let mut message = Vec::new();
            if receiver.receive_data(&mut message).await.is_err() {
                return true;
            }
            let value: Value = serde_json::from_slice(&message).unwrap();
            if value.get("id").is_some() {
                return false;
            }
        }
    };
    tokio::time::timeout(wait, read).await.expect("neither an answer nor the end in time")
}

/// Polls `daemon/status` on `connection` until the daemon counts `clients` (a client that just
/// left may take a moment to be counted out).
async fn wait_clients(connection: &mut (Sender<Stream>, Receiver<Stream>), clients: u64) {
    let started = Instant::now();
    for id in 1000.. {
        let status = call(connection, id, "daemon/status", json!({})).await;
        if status["result"]["clients"] == clients {
            return;
        }
        assert!(started.elapsed() < DEADLINE, "not {clients} clients: {status}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_websocket_is_served_like_the_socket() {
    let env = Env::new().await;
    let served = env.serve(&["--listen", "127.0.0.1:0", "--max-connections", "2"]).await;
    let address = bound_address(&env).await;
    let token = token(&env);
    assert_eq!(open(&address, None).await.err(), Some(401), "an upgrade without the token");
    assert_eq!(open(&address, Some("wrong-token-wrong-token")).await.err(), Some(401));
    let mut first = open(&address, Some(&token)).await.unwrap();
    let status = call(&mut first, 1, "daemon/status", json!({})).await;
    assert_eq!(status["result"]["pid"], served.pid(), "{status}");
    // The WebSocket is one of the daemon's clients (alone, once the readiness probe of
    // `Env::serve` on the socket is counted out).
    wait_clients(&mut first, 1).await;

    // A request written over several lines is one message, so one request; a binary message
    // is read as text.
    let status: Value = serde_json::from_str(&request(2, "daemon/status", json!({}))).unwrap();
    let pretty = serde_json::to_string_pretty(&status).unwrap();
    assert!(pretty.contains('\n'));
    first.0.send_text(pretty).await.unwrap();
    first.0.flush().await.unwrap();
    let status = answer(&mut first.1, json!(2)).await;
    assert_eq!(status["result"]["pid"], served.pid(), "{status}");
    first.0.send_binary(request(3, "daemon/status", json!({}))).await.unwrap();
    first.0.flush().await.unwrap();
    let status = answer(&mut first.1, json!(3)).await;
    assert_eq!(status["result"]["pid"], served.pid(), "{status}");

    // Refusals are the socket's: an unknown method, a raw line break inside a string (the
    // connection goes on).
    let unknown = call(&mut first, 4, "no/such", json!({})).await;
    assert_eq!(unknown["error"]["code"], -32601, "{unknown}");
    let raw_break = request(5, "no\nsuch", json!({})).replace("\\n", "\n");
    assert!(raw_break.contains('\n'));
    first.0.send_text(raw_break).await.unwrap();
    first.0.flush().await.unwrap();
    let broken = answer(&mut first.1, Value::Null).await;
    assert_eq!(broken["error"]["code"], -32700, "{broken}");

    // A subscription belongs to the connection that made it.
    let subscribed = call(&mut first, 6, "daemon/subscribe", json!({})).await;
    let subscription = subscribed["result"].clone();
    assert!(subscription.is_string() || subscription.is_number(), "{subscribed}");
    let mut second = open(&address, Some(&token)).await.unwrap();
    let status = call(&mut second, 1, "daemon/status", json!({})).await;
    assert_eq!(status["result"]["clients"], 2, "{status}");
    let theirs = call(&mut second, 2, "daemon/unsubscribe", json!([subscription])).await;
    assert_eq!(theirs["result"], false, "{theirs}");
    let own = call(&mut first, 7, "daemon/unsubscribe", json!([subscription])).await;
    assert_eq!(own["result"], true, "{own}");

    // The cap counts WebSockets and the socket alike.
    assert_eq!(open(&address, Some(&token)).await.err(), Some(503), "a third connection");
    let stream = tokio::net::UnixStream::connect(env.socket()).await.unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stream));
    let line = tokio::time::timeout(DEADLINE, lines.next_line()).await.unwrap().unwrap().unwrap();
    assert!(line.contains("at most 2 connections"), "{line}");

    // A message past the line limit gets the socket's error, then the connection closes
    // (the WebSocket layer cannot skip a fragmented one whole); the count goes down.
    let long = request(8, "x", json!("y".repeat(5 << 20)));
    second.0.send_text(long).await.unwrap();
    second.0.flush().await.unwrap();
    let refused = answer(&mut second.1, Value::Null).await;
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("exceeds 4194304 bytes"), "{refused}");
    let ended = closes(&mut second.1, DEADLINE).await;
    assert!(ended, "the connection went on after a message past the limit");
    wait_clients(&mut first, 1).await;

    // Shutdown answers, then closes the WebSocket.
    let stopping = call(&mut first, 10, "daemon/shutdown", json!({})).await;
    assert_eq!(stopping["result"], json!({"stopping": true}), "{stopping}");
    // Well before the daemon would give up on its connections (10 s) and exit anyway.
    let ended = closes(&mut first.1, Duration::from_secs(5)).await;
    assert!(ended, "the WebSocket outlived the daemon's shutdown");
    let mut served = served;
    assert!(served.wait().await.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_websocket_client_that_never_reads_is_disconnected_and_its_memory_returns() {
    let env = Env::new().await;
    // One event of 5 MB.
    let big = "x".repeat(5 * 1024 * 1024);
    write_log(&env, "big", &big);
    let served = env.serve(&["--listen", "127.0.0.1:0"]).await;
    let address = bound_address(&env).await;
    let pid = served.pid();
    let watcher = env.client().await;
    watcher.ok("session/list", json!({})).await;
    let before = vm_kib(pid, "VmRSS");
    let (mut sender, mut receiver) = open(&address, Some(&token(&env))).await.unwrap();
    // 150 requests for the page holding it, and never a byte read back.
    for id in 0..150 {
        let params = json!({"sessionId": "big", "fromSeq": 2, "limit": 10});
        sender.send_text(request(id, "session/events", params)).await.unwrap();
    }
    sender.flush().await.unwrap();
    // The daemon gives up on it: the connection is closed from its side.
    let started = Instant::now();
    let mut counted = false;
    loop {
        let status = watcher.ok("daemon/status", json!({})).await;
        counted |= status["clients"] == 2;
        if counted && status["clients"] == 1 {
            break;
        }
        assert!(started.elapsed() < DEADLINE, "the daemon kept the non-reading client: {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let peak = vm_kib(pid, "VmHWM");
    // What it still reads is what the kernel held, then the end: far fewer than 150 answers.
    let mut answers = 0;
    let read = async {
        loop {
            let mut message = Vec::new();
            if receiver.receive_data(&mut message).await.is_err() {
                return;
            }
            answers += 1;
        }
    };
    tokio::time::timeout(DEADLINE, read).await.expect("the WebSocket was not closed");
    assert!(answers < 150, "{answers} answers were read");
    // Other clients are served all along, and the log is whole.
    let page =
        watcher.ok("session/events", json!({"sessionId": "big", "fromSeq": 2, "limit": 10})).await;
    assert_eq!(page["events"][0]["data"]["text"].as_str().map(str::len), Some(big.len()));
    // What the daemon gives back takes a moment (the allocator returns freed memory lazily).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = vm_kib(pid, "VmRSS");
    eprintln!(
        "daemon VmRSS before {before} KiB, peak (VmHWM) {peak} KiB, after {after} KiB; {answers} answers read"
    );
    assert!(peak < 200 * 1024, "peak {peak} KiB");
    assert!(after < before + 32 * 1024, "after {after} KiB (before {before} KiB)");
    served.shutdown().await;
}
