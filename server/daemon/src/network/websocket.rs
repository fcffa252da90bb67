//! The network front's WebSocket connections, served by the socket's line transport
//! ([`serve_line_sink`]): one message each way is one line. So a WebSocket client gets what a
//! socket client gets — the outbound budget in bytes (a client that falls behind is
//! disconnected), "what the model saw" on the blocking pool with one place per connection
//! held until the answer is sent, the in-flight limit, subscriptions only its own — and counts
//! among the daemon's clients and against `--max-connections`. (jsonrpsee's own WebSocket
//! server queued up to 1,024 answers of any size for a client that did not read.)
//!
//! Answers and events are sent by the line transport's writer itself, one text message per
//! line ([`WebSocketLines`]). Requests go through an in-memory pipe of [`PIPE_BYTES`] into its
//! reader, one line per message ([`one_line`]).
//!
//! Where it differs from the socket:
//! - A message past the line limit is answered with the line transport's own error, then the
//!   connection closes. soketto skips such a message by discarding its whole length from the
//!   stream, which is right for one frame; for a message of several frames it counts the ones
//!   already read again, so the connection waits until the client sends that much more (or
//!   closes), and reading on after it could not be trusted. A frame past soketto's own limit
//!   (256 MiB) is refused from its header: the error, then the end.
//! - A client that falls behind is usually cut off in the middle of a message: it gets no last
//!   error (a byte stream gets the rest of the line ended and the error after it), only the end
//!   of the connection.

use std::sync::Arc;

use futures::io::{BufReader, BufWriter};
use http::HeaderValue;
use hyper_util::rt::TokioIo;
use jsonrpsee::Methods;
use jsonrpsee::server::{HttpBody, HttpRequest, HttpResponse};
use soketto::connection::{Error as WsError, Receiver, Sender};
use soketto::handshake::http::Server as Handshake;
use tokio::io::{AsyncWriteExt, DuplexStream};
use tokio_util::compat::{Compat, TokioAsyncReadCompatExt};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::connection::{LargePlaces, LineSink, MAX_LINE_BYTES, serve_line_sink};
use crate::daemon::Daemon;
use crate::daemon::overloaded_message;

pub(super) use soketto::handshake::http::is_upgrade_request;

/// Bytes the pipe from a WebSocket to its line transport's reader holds.
const PIPE_BYTES: usize = 64 * 1024;

type Stream = BufReader<BufWriter<Compat<TokioIo<hyper::upgrade::Upgraded>>>>;

/// What the network front needs to serve WebSocket connections itself.
#[derive(Clone)]
pub struct WebSockets {
    /// The API.
    pub(crate) methods: Methods,
    /// Its clients' count and its shutdown.
    pub(crate) daemon: Arc<Daemon>,
    /// Every connection's task, so shutdown waits for the answers they still owe.
    pub(crate) connections: TaskTracker,
    /// Connections served at once, the socket's included.
    pub(crate) max_connections: usize,
}

impl WebSockets {
    /// Answers an authorized upgrade request: `101 Switching Protocols`, the connection then
    /// served on a task of its own; a refusal when the handshake is wrong or the daemon serves
    /// as many connections as it may. `protocol`, when given, is the subprotocol the answer
    /// accepts (`Sec-WebSocket-Protocol`).
    pub(super) fn upgrade<B: Send + 'static>(
        &self,
        request: HttpRequest<B>,
        protocol: Option<String>,
    ) -> HttpResponse {
        let mut handshake = Handshake::new();
        let mut response = match handshake.receive_request(&request) {
            Ok(response) => response,
            Err(error) => return refuse(400, format!("WebSocket handshake failed: {error}\n")),
        };
        if let Some(protocol) = protocol.and_then(|protocol| HeaderValue::from_str(&protocol).ok())
        {
            response.headers_mut().insert("sec-websocket-protocol", protocol);
        }
        // Counted now, not in the task: the next request must see this connection.
        let Some(slot) = self.daemon.admit(self.max_connections) else {
            return refuse(503, format!("{}\n", overloaded_message(self.max_connections)));
        };
        let methods = self.methods.clone();
        let places = self.daemon.large_places.clone();
        let shutdown = self.daemon.shutdown.clone();
        self.connections.spawn(async move {
            match hyper::upgrade::on(request).await {
                Ok(upgraded) => {
                    let stream = BufReader::new(BufWriter::new(TokioIo::new(upgraded).compat()));
                    let mut builder = handshake.into_builder(stream);
                    // One byte past the line limit, so that the line transport refuses it.
                    builder.set_max_message_size(MAX_LINE_BYTES + 1);
                    let (sender, receiver) = builder.finish();
                    serve(methods, places, sender, receiver, shutdown).await;
                }
                Err(error) => tracing::debug!(%error, "WebSocket upgrade failed"),
            }
            drop(slot);
        });
        response.map(|()| HttpBody::default())
    }
}

/// Serves one WebSocket until the client closes it, the line transport ends it, or the daemon
/// stops.
async fn serve(
    methods: Methods,
    places: LargePlaces,
    sender: Sender<Stream>,
    receiver: Receiver<Stream>,
    shutdown: CancellationToken,
) {
    let (requests, lines) = tokio::io::duplex(PIPE_BYTES);
    let sink = WebSocketLines { sender, cut: false };
    let serving = serve_line_sink(methods, places, lines, sink, shutdown);
    tokio::pin!(serving);
    // Cancel-safety: when the line transport ends first, the reading side is dropped with the
    // connection; when the client is done sending, the line transport answers what it read.
    tokio::select! {
        () = &mut serving => {}
        () = receive_lines(receiver, requests) => serving.await,
    }
}

/// The line transport's lines as WebSocket text messages.
struct WebSocketLines {
    sender: Sender<Stream>,
    /// A message was cut short: the stream is mid-frame, nothing more may be written to it.
    cut: bool,
}

fn io_error(error: WsError) -> std::io::Error {
    match error {
        WsError::Io(error) => error,
        error => std::io::Error::other(error),
    }
}

impl LineSink for WebSocketLines {
    async fn write_line(&mut self, line: String) -> std::io::Result<()> {
        self.sender.send_text_owned(line).await.map_err(io_error)?;
        self.sender.flush().await.map_err(io_error)
    }

    async fn last_line(&mut self, line: String, cut_mid_line: bool) -> std::io::Result<()> {
        // A message cut short leaves the client's frame half read: nothing more can follow,
        // not even a close frame (its bytes would be read as the rest of the message).
        if cut_mid_line {
            self.cut = true;
            return Ok(());
        }
        self.write_line(line).await
    }

    async fn close(&mut self) -> std::io::Result<()> {
        if self.cut {
            return Ok(());
        }
        self.sender.close().await.map_err(io_error)
    }
}

/// Each message the client sends, as one line into `lines`, until the client closes the
/// connection, it fails, or a message is past the line limit.
async fn receive_lines(mut receiver: Receiver<Stream>, mut lines: DuplexStream) {
    let mut message = Vec::new();
    loop {
        message.clear();
        match receiver.receive_data(&mut message).await {
            Ok(_) => {
                one_line(&mut message);
                message.push(b'\n');
                if lines.write_all(&message).await.is_err() {
                    return;
                }
            }
            // Refused by the WebSocket layer (a frame or a whole message): the line transport
            // still answers it, with its own "line too long" error, from a line as long as the
            // limit plus one.
            Err(
                WsError::MessageTooLarge { .. }
                | WsError::Codec(soketto::base::Error::PayloadTooLarge { .. }),
            ) => {
                let _ = write_overlong_line(&mut lines).await;
                return;
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

/// Makes one message one line. Outside strings a line break is whitespace: a space does as
/// well. Inside a string a raw line break is invalid JSON (it must be escaped): it becomes
/// another control character, so the request is still refused, not read as something else.
fn one_line(message: &mut [u8]) {
    let mut in_string = false;
    let mut escaped = false;
    for byte in message {
        match *byte {
            b'\n' | b'\r' if in_string => *byte = 0x01,
            b'\n' | b'\r' => *byte = b' ',
            b'\\' if in_string && !escaped => {
                escaped = true;
                continue;
            }
            b'"' if !escaped => in_string = !in_string,
            _ => {}
        }
        escaped = false;
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

#[cfg(test)]
mod tests;

/// An HTTP refusal with a plain-text reason (an upgrade refused here, a request refused by the
/// network front's check of token and Origin).
pub(super) fn refuse(status: u16, message: impl Into<String>) -> HttpResponse {
    let mut response = HttpResponse::new(HttpBody::from(message.into()));
    *response.status_mut() =
        http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::FORBIDDEN);
    response
}
