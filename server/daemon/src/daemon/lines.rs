//! Newline-delimited JSON-RPC over any byte stream (the Unix socket, stdio).
//!
//! `jsonrpsee` has no line transport, so this is a small loop around
//! [`jsonrpsee::Methods::raw_json_request`]: one request per line; each request runs in a task
//! of its own (a long `session/prompt` does not hold up the next line); responses and
//! subscription notifications go through one writer task, so lines never interleave.
//!
//! What the loop refuses, each with a JSON-RPC error and without closing the connection: a line
//! that is not UTF-8 or not JSON (-32700), a line over [`MAX_LINE_BYTES`] (-32600), a batch
//! (-32600), a notification — a request without an id — (-32600, answered with id null), and a
//! request past [`MAX_IN_FLIGHT`] unanswered ones on this connection ("overloaded, retry").

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use jsonrpsee::Methods;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::bytes::BytesMut;
use tokio_util::codec::{Decoder, FramedRead, LinesCodec, LinesCodecError};
use tokio_util::sync::CancellationToken;

use super::error::{INVALID_REQUEST, PARSE_ERROR};

/// The longest request line accepted.
pub const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;
/// Requests one connection may have unanswered at once.
pub const MAX_IN_FLIGHT: usize = 64;
/// Subscriptions one connection may hold at once.
pub const MAX_SUBSCRIPTIONS: usize = 64;
/// Outgoing lines buffered per connection; a client that does not read stalls its own
/// subscriptions (which then catch up from the log), never the daemon.
const OUTGOING_BUFFER: usize = 1024;
/// Notifications a subscription may buffer inside jsonrpsee before it waits.
const SUBSCRIPTION_BUFFER: usize = 1024;

/// A line the codec could not hand out as text.
enum BadLine {
    /// Over [`MAX_LINE_BYTES`] (its bytes are skipped up to the next newline).
    TooLong,
    /// Not UTF-8 (the line is consumed).
    NotUtf8,
}

/// [`LinesCodec`], except that a bad line is an item, not a decoder error: `FramedRead` ends
/// its stream after a decoder error, which would close the connection.
struct Lines(LinesCodec);

impl Lines {
    fn map(
        decoded: Result<Option<String>, LinesCodecError>,
    ) -> Result<Option<Result<String, BadLine>>, std::io::Error> {
        match decoded {
            Ok(line) => Ok(line.map(Ok)),
            // The codec now discards up to the next newline, then reads lines again.
            Err(LinesCodecError::MaxLineLengthExceeded) => Ok(Some(Err(BadLine::TooLong))),
            // The only I/O error a decoder sees: the line's bytes are not UTF-8.
            Err(LinesCodecError::Io(error)) if error.kind() == std::io::ErrorKind::InvalidData => {
                Ok(Some(Err(BadLine::NotUtf8)))
            }
            Err(LinesCodecError::Io(error)) => Err(error),
        }
    }
}

impl Decoder for Lines {
    type Item = Result<String, BadLine>;
    type Error = std::io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Self::Item>, Self::Error> {
        Self::map(self.0.decode(buf))
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<Self::Item>, Self::Error> {
        Self::map(self.0.decode_eof(buf))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The subscription id named by `session/unsubscribe` params (`[id]` or `{"subscription": id}`),
/// as its JSON text.
fn subscription_param(params: Option<&Value>) -> Option<String> {
    let id = match params? {
        Value::Array(items) => items.first()?,
        Value::Object(fields) => fields.get("subscription")?,
        _ => return None,
    };
    Some(id.to_string())
}

fn error_line(id: &Value, code: i32, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}

/// Serves `methods` over one connection until the peer closes it or `shutdown` fires.
pub async fn serve_lines<R, W>(methods: Methods, reader: R, writer: W, shutdown: CancellationToken)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (outgoing, lines_out) = mpsc::channel::<String>(OUTGOING_BUFFER);
    // The writer stops on its own token, not the daemon's: on shutdown the answers to requests
    // in flight (prompts whose turns are being cancelled) are still written.
    let writer_stop = CancellationToken::new();
    let writer_task = tokio::spawn(write_lines(writer, lines_out, writer_stop.clone()));
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let subscriptions: Arc<Mutex<HashSet<String>>> = Arc::default();
    let mut lines = FramedRead::new(reader, Lines(LinesCodec::new_with_max_length(MAX_LINE_BYTES)));
    loop {
        // Cancel-safety: `next` on a FramedRead is cancel-safe (a partial line stays buffered);
        // `cancelled` is cancel-safe.
        let frame = tokio::select! {
            frame = lines.next() => frame,
            () = shutdown.cancelled() => break,
        };
        let line = match frame {
            None => break,
            Some(Ok(Ok(line))) => line,
            Some(Ok(Err(BadLine::TooLong))) => {
                let message = format!("request line exceeds {MAX_LINE_BYTES} bytes");
                let _ = outgoing.send(error_line(&Value::Null, INVALID_REQUEST, &message)).await;
                continue;
            }
            Some(Ok(Err(BadLine::NotUtf8))) => {
                let message = "parse error: the line is not valid UTF-8";
                let _ = outgoing.send(error_line(&Value::Null, PARSE_ERROR, message)).await;
                continue;
            }
            Some(Err(error)) => {
                tracing::debug!(%error, "connection read failed");
                break;
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        let request: Value = match serde_json::from_str(&line) {
            Ok(value) => value,
            Err(error) => {
                let message = format!("parse error: {error}");
                let _ = outgoing.send(error_line(&Value::Null, PARSE_ERROR, &message)).await;
                continue;
            }
        };
        let Some(object) = request.as_object() else {
            let message = if request.is_array() {
                "batch requests are not supported: send one request per line"
            } else {
                "a request must be a JSON object"
            };
            let _ = outgoing.send(error_line(&Value::Null, INVALID_REQUEST, message)).await;
            continue;
        };
        let Some(id) = object.get("id").cloned() else {
            let message = "notifications are not supported: every request needs an id";
            let _ = outgoing.send(error_line(&Value::Null, INVALID_REQUEST, message)).await;
            continue;
        };
        let Ok(permit) = Arc::clone(&in_flight).try_acquire_owned() else {
            let message = format!(
                "overloaded, retry later: {MAX_IN_FLIGHT} requests are already in flight on this connection"
            );
            let _ = outgoing.send(error_line(&id, dsh_protocol::code::OVERLOADED, &message)).await;
            continue;
        };
        // Subscriptions belong to the connection that made them (jsonrpsee's raw calls share one
        // connection id): another connection cannot end them, and each connection holds a
        // bounded number.
        let method = object.get("method").and_then(Value::as_str).unwrap_or_default().to_owned();
        let target = subscription_param(object.get("params"));
        if method == dsh_protocol::method::SESSION_UNSUBSCRIBE {
            let owned = target.as_ref().is_some_and(|target| lock(&subscriptions).contains(target));
            if !owned {
                let answer = json!({"jsonrpc": "2.0", "id": id, "result": false}).to_string();
                let _ = outgoing.send(answer).await;
                continue;
            }
        }
        if method == dsh_protocol::method::SESSION_SUBSCRIBE
            && lock(&subscriptions).len() >= MAX_SUBSCRIPTIONS
        {
            let message = format!(
                "overloaded, retry later: {MAX_SUBSCRIPTIONS} subscriptions are open on this connection"
            );
            let _ = outgoing.send(error_line(&id, dsh_protocol::code::OVERLOADED, &message)).await;
            continue;
        }
        let methods = methods.clone();
        let outgoing = outgoing.clone();
        let subscriptions = Arc::clone(&subscriptions);
        tokio::spawn(async move {
            let (response, mut notifications) =
                match methods.raw_json_request(&line, SUBSCRIPTION_BUFFER).await {
                    Ok(answer) => answer,
                    Err(error) => {
                        let message = format!("invalid request: {error}");
                        let _ = outgoing.send(error_line(&id, INVALID_REQUEST, &message)).await;
                        return;
                    }
                };
            let answer: Value = serde_json::from_str(response.get()).unwrap_or_default();
            if let Some(result) = answer.get("result") {
                if method == dsh_protocol::method::SESSION_SUBSCRIBE {
                    lock(&subscriptions).insert(result.to_string());
                } else if method == dsh_protocol::method::SESSION_UNSUBSCRIBE
                    && let Some(target) = &target
                {
                    lock(&subscriptions).remove(target);
                }
            }
            let _ = outgoing.send(response.get().to_owned()).await;
            drop(permit);
            // A subscription keeps sending until it is unsubscribed or this connection closes.
            loop {
                // Cancel-safety: both `recv` and `closed` are cancel-safe.
                tokio::select! {
                    notification = notifications.recv() => match notification {
                        Some(notification) => {
                            if outgoing.send(notification.get().to_owned()).await.is_err() {
                                break;
                            }
                        }
                        None => break,
                    },
                    () = outgoing.closed() => break,
                }
            }
        });
    }
    // The peer stopped sending (or the daemon is stopping). Requests already read still get
    // their answers — `echo REQUEST | dsh stdio` waits for the response — then subscriptions
    // end and the writer flushes what is queued and stops.
    drop(outgoing);
    let all = u32::try_from(MAX_IN_FLIGHT).unwrap_or(u32::MAX);
    let grace = if shutdown.is_cancelled() { SHUTDOWN_GRACE } else { ANSWER_GRACE };
    let _ = tokio::time::timeout(grace, in_flight.acquire_many(all)).await;
    writer_stop.cancel();
    let _ = writer_task.await;
}

/// How long a closed connection waits for the answers to the requests it already sent.
const ANSWER_GRACE: std::time::Duration = std::time::Duration::from_secs(3600);
/// The same wait when the daemon is shutting down (turns are being cancelled).
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

async fn write_lines<W: AsyncWrite + Unpin>(
    mut writer: W,
    mut lines: mpsc::Receiver<String>,
    connection: CancellationToken,
) {
    loop {
        // Cancel-safety: `recv` is cancel-safe; `cancelled` is cancel-safe.
        let line = tokio::select! {
            line = lines.recv() => line,
            () = connection.cancelled() => {
                // Flush what is already queued, then stop: dropping the receiver ends every
                // subscription forwarder of this connection.
                while let Ok(line) = lines.try_recv() {
                    if write_line(&mut writer, line).await.is_err() {
                        break;
                    }
                }
                return;
            }
        };
        let Some(line) = line else { return };
        if write_line(&mut writer, line).await.is_err() {
            return;
        }
    }
}

async fn write_line<W: AsyncWrite + Unpin>(
    writer: &mut W,
    mut line: String,
) -> std::io::Result<()> {
    line.push('\n');
    writer.write_all(line.as_bytes()).await?;
    writer.flush().await
}
