//! The network front's WebSocket connections, served by the socket's line transport
//! ([`serve_lines`]): one message each way is one line. So a WebSocket client gets what a
//! socket client gets — the outbound budget in bytes (a client that falls behind is told why
//! and disconnected), "what the model saw" on the blocking pool with one place per connection,
//! the in-flight limit, subscriptions only its own — and counts among the daemon's clients and
//! against `--max-connections`. jsonrpsee's own WebSocket server queued up to 1,024 answers of
//! any size for a client that did not read.
//!
//! Between the WebSocket and the line transport are two in-memory pipes of [`PIPE_BYTES`]: a
//! client that does not read stops the sending side, the pipe fills, and the line transport's
//! budget takes it from there. What a connection holds beyond the budget: the message being
//! sent, and the line being written into the pipe.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::io::{BufReader, BufWriter};
use hyper_util::rt::TokioIo;
use jsonrpsee::Methods;
use jsonrpsee::server::{HttpBody, HttpRequest, HttpResponse};
use soketto::connection::{Error as WsError, Receiver, Sender};
use soketto::handshake::http::Server as Handshake;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, DuplexStream};
use tokio_util::compat::{Compat, TokioAsyncReadCompatExt};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::connection::{MAX_LINE_BYTES, serve_lines};
use crate::daemon::Daemon;
use crate::serve::overloaded_message;

pub use soketto::handshake::http::is_upgrade_request;

/// Bytes each pipe between a WebSocket and its line transport holds.
const PIPE_BYTES: usize = 64 * 1024;

/// How long a WebSocket is still written to once its line transport has ended (the daemon is
/// stopping, or the client fell behind and was told so): a client that does not read is not
/// waited for.
const LAST_WRITES: Duration = Duration::from_secs(2);

type Stream = BufReader<BufWriter<Compat<TokioIo<hyper::upgrade::Upgraded>>>>;

/// What the network front needs to serve WebSocket connections itself.
#[derive(Clone)]
pub struct WebSockets {
    /// The API.
    pub methods: Methods,
    /// Its clients' count and its shutdown.
    pub daemon: Arc<Daemon>,
    /// Every connection's task, so shutdown waits for the answers they still owe.
    pub connections: TaskTracker,
    /// Connections served at once, the socket's included.
    pub max_connections: usize,
}

impl WebSockets {
    /// Answers an authorized upgrade request: `101 Switching Protocols`, the connection then
    /// served on a task of its own; a refusal when the handshake is wrong or the daemon serves
    /// as many connections as it may.
    pub fn upgrade<B: Send + 'static>(&self, request: HttpRequest<B>) -> HttpResponse {
        let mut handshake = Handshake::new();
        let response = match handshake.receive_request(&request) {
            Ok(response) => response,
            Err(error) => return refuse(400, format!("WebSocket handshake failed: {error}\n")),
        };
        let clients = &self.daemon.clients;
        if clients.load(Ordering::SeqCst) >= self.max_connections as u64 {
            return refuse(503, format!("{}\n", overloaded_message(self.max_connections)));
        }
        // Counted now, not in the task: the next request must see this connection.
        clients.fetch_add(1, Ordering::SeqCst);
        let methods = self.methods.clone();
        let daemon = Arc::clone(&self.daemon);
        self.connections.spawn(async move {
            match hyper::upgrade::on(request).await {
                Ok(upgraded) => {
                    let stream = BufReader::new(BufWriter::new(TokioIo::new(upgraded).compat()));
                    let mut builder = handshake.into_builder(stream);
                    // One byte past the line limit, so that the line transport refuses it.
                    builder.set_max_message_size(MAX_LINE_BYTES + 1);
                    let (sender, receiver) = builder.finish();
                    serve(methods, sender, receiver, daemon.shutdown.clone()).await;
                }
                Err(error) => tracing::debug!(%error, "WebSocket upgrade failed"),
            }
            daemon.clients.fetch_sub(1, Ordering::SeqCst);
        });
        response.map(|()| HttpBody::default())
    }
}

/// An HTTP refusal with a plain-text reason.
pub(super) fn refuse(status: u16, message: impl Into<String>) -> HttpResponse {
    let mut response = HttpResponse::new(HttpBody::from(message.into()));
    *response.status_mut() =
        http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::FORBIDDEN);
    response
}

/// Serves one WebSocket until the client closes it, the line transport ends it, or the daemon
/// stops.
async fn serve(
    methods: Methods,
    sender: Sender<Stream>,
    receiver: Receiver<Stream>,
    shutdown: CancellationToken,
) {
    let (requests, lines_in) = tokio::io::duplex(PIPE_BYTES);
    let (lines_out, answers) = tokio::io::duplex(PIPE_BYTES);
    let ended = CancellationToken::new();
    let serving = async {
        serve_lines(methods, lines_in, lines_out, shutdown).await;
        ended.cancel();
    };
    let answering = async { tokio::join!(serving, send_lines(answers, sender, &ended)) };
    tokio::pin!(answering);
    // Cancel-safety: whichever ends first, the other is either awaited to its end or dropped
    // with the connection (a client that stopped reading and sending both).
    tokio::select! {
        _ = &mut answering => {}
        () = receive_lines(receiver, requests) => {
            // The client is done sending: the line transport answers what it read, then ends.
            answering.await;
        }
    }
}

/// Each message the client sends, as one line into `lines`, until the client closes the
/// connection or it fails.
async fn receive_lines(mut receiver: Receiver<Stream>, mut lines: DuplexStream) {
    let mut message = Vec::new();
    loop {
        message.clear();
        match receiver.receive_data(&mut message).await {
            Ok(_) => {
                // In JSON a line break is only ever whitespace between tokens (inside a string
                // it must be escaped): a message written over several lines stays one line.
                for byte in &mut message {
                    if matches!(*byte, b'\n' | b'\r') {
                        *byte = b' ';
                    }
                }
                message.push(b'\n');
                if lines.write_all(&message).await.is_err() {
                    return;
                }
            }
            // Discarded by the WebSocket layer: the line transport still answers it, with its
            // own "line too long" error, from a line as long as the limit plus one.
            Err(WsError::MessageTooLarge { .. }) => {
                if write_overlong_line(&mut lines).await.is_err() {
                    return;
                }
            }
            Err(error) => {
                tracing::debug!(%error, "WebSocket read ended");
                return;
            }
        }
        // A large message does not leave its size behind.
        message.shrink_to(PIPE_BYTES);
    }
}

async fn write_overlong_line(lines: &mut DuplexStream) -> std::io::Result<()> {
    let spaces = [b' '; 4096];
    let mut left = MAX_LINE_BYTES + 1;
    while left > 0 {
        let now = left.min(spaces.len());
        lines.write_all(&spaces[..now]).await?;
        left -= now;
    }
    lines.write_all(b"\n").await
}

/// Each line the line transport writes, as one text message, until it ends; then a close.
/// Once it has ended, what is left gets [`LAST_WRITES`].
async fn send_lines(answers: DuplexStream, mut sender: Sender<Stream>, ended: &CancellationToken) {
    let mut answers = tokio::io::BufReader::with_capacity(PIPE_BYTES, answers);
    let give_up = async {
        ended.cancelled().await;
        tokio::time::sleep(LAST_WRITES).await;
    };
    tokio::pin!(give_up);
    loop {
        let mut line = Vec::new();
        // Cancel-safety: both branches only wait; a line cut short by the deadline is dropped
        // with the connection.
        let read = tokio::select! {
            read = answers.read_until(b'\n', &mut line) => read,
            () = &mut give_up => return,
        };
        if !matches!(read, Ok(read) if read > 0) {
            break;
        }
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        // The line transport writes JSON: always UTF-8.
        let Ok(text) = String::from_utf8(line) else { break };
        let sent = async {
            sender.send_text_owned(text).await?;
            sender.flush().await
        };
        // Cancel-safety: a message cut short by the deadline ends the connection.
        let sent = tokio::select! {
            sent = sent => sent,
            () = &mut give_up => return,
        };
        if sent.is_err() {
            return;
        }
    }
    let _ = tokio::time::timeout(LAST_WRITES, sender.close()).await;
}
