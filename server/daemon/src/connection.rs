//! Newline-delimited JSON-RPC over any byte stream (the Unix socket, stdio, an in-process
//! pipe), or one message per line over a WebSocket ([`LineSink`]): the answering step of the
//! line transport.
//!
//! `jsonrpsee` has no line transport, so this is a small loop around
//! [`jsonrpsee::Methods::raw_json_request`]: each frame goes through the admission step
//! (`admission.rs`: parse, size, batch, notification → a request or an error); each admitted
//! request runs in a task of its own (a long `session/prompt` does not hold up the next line);
//! responses and subscription notifications go through one writer task, so lines never
//! interleave. What this step refuses, per connection: a request past [`MAX_IN_FLIGHT`]
//! unanswered ones, and a subscription past [`MAX_SUBSCRIPTIONS`] ("overloaded, retry").
//! Subscriptions belong to the connection that made them: another connection's
//! `session/unsubscribe` gets `false`.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use dsh_protocol::code::{OVERLOADED, SHUTTING_DOWN, STORE};
use dsh_protocol::jsonrpc::{ErrorObject, INVALID_REQUEST, Id, Response, raw};
use dsh_protocol::method::{SUBSCRIBE, UNSUBSCRIBE};
use futures::StreamExt;
use jsonrpsee::Methods;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::bytes::BytesMut;
use tokio_util::codec::{Decoder, FramedRead, LinesCodec, LinesCodecError};
use tokio_util::sync::CancellationToken;

use crate::admission::{Admission, BadLine, Call, admit};

/// The longest request line accepted.
pub const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;
/// Requests one connection may have unanswered at once.
pub const MAX_IN_FLIGHT: usize = 64;
/// Subscriptions one connection may hold at once.
pub const MAX_SUBSCRIPTIONS: usize = 64;
/// Outgoing lines buffered per connection; past it, senders wait (a subscription that waits too
/// long lags, and catches up from the log later).
const OUTGOING_BUFFER: usize = 1024;
/// Bytes of answers and events one connection may have waiting to be written. A client that
/// falls further behind than this is disconnected with a last error line saying why: one client
/// that does not read can cost the daemon this much memory, not gigabytes. A single line larger
/// than the budget still goes out when nothing else waits. A large answer ([`LargePlaces`]) is
/// not counted at all: it is one at a time per connection until written, so it costs at most
/// its own size once, besides the budget.
pub const OUTBOUND_BUDGET_BYTES: usize = 16 * 1024 * 1024;
/// Notifications a subscription may buffer inside jsonrpsee before it waits.
const SUBSCRIPTION_BUFFER: usize = 1024;
/// How many large answers are computed at once in the process, on every front; the others wait
/// their turn.
const LARGE_AT_ONCE: usize = 2;

/// The daemon's places for large answers: the methods the table marks
/// [`dsh_protocol::method::Answer::Large`] — "what
/// the model saw" of a long conversation is a hundred megabytes of JSON — run and are
/// serialized on the blocking pool, one per connection (until it is written) and
/// [`LARGE_AT_ONCE`] in the process at a time: writing such an answer takes a third of a
/// second, and two at once on the runtime's workers held them all, stalling every other call of
/// every client. One per connection keeps a client that queues many from holding every place.
/// One value per daemon, shared by every front (the line transport and HTTP).
#[derive(Clone, Debug)]
pub struct LargePlaces(Arc<Semaphore>);

impl Default for LargePlaces {
    fn default() -> Self {
        LargePlaces(Arc::new(Semaphore::new(LARGE_AT_ONCE)))
    }
}

impl LargePlaces {
    /// Waits for a place (`None` never happens: the semaphore is never closed).
    pub(crate) async fn take(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        Arc::clone(&self.0).acquire_owned().await.ok()
    }
}

/// Whether the method named `name` answers apart (`Large` in the method table).
pub(crate) fn is_large(name: &str) -> bool {
    dsh_protocol::method::answer_of(name) == dsh_protocol::method::Answer::Large
}
/// How long a closed connection waits for the answers to the requests it already sent.
const ANSWER_GRACE: std::time::Duration = std::time::Duration::from_secs(3600);
/// The same wait when the daemon is shutting down (turns are being cancelled).
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

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
            Err(LinesCodecError::MaxLineLengthExceeded) => {
                Ok(Some(Err(BadLine::TooLong { limit: MAX_LINE_BYTES })))
            }
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

/// The subscriptions one connection holds, by id as JSON text.
type Subscriptions = Arc<Mutex<HashSet<String>>>;

/// One line for the writer, with the bytes it counts against the budget and what it holds until
/// it is written.
struct Line {
    text: String,
    counted: usize,
    /// A large answer's place on its connection (see [`LargePlaces`]), given back once the
    /// line is written or dropped.
    _place: Option<tokio::sync::OwnedSemaphorePermit>,
}

/// The sending side of a connection's writer, bounded in lines (senders wait) and in bytes (the
/// connection is dropped).
#[derive(Clone)]
struct Outgoing {
    lines: mpsc::Sender<Line>,
    /// Bytes queued and not written yet.
    queued: Arc<AtomicUsize>,
    /// Fired when the client fell behind by more than the budget.
    overflow: CancellationToken,
}

/// The client fell behind: the connection is being dropped.
struct Overflowed;

impl Outgoing {
    /// Queues one line, or drops the connection when that would put more than the budget in
    /// waiting.
    async fn send(&self, text: String) -> Result<(), Overflowed> {
        let counted = text.len();
        self.queue(Line { text, counted, _place: None }).await
    }

    /// Queues a large answer with its connection's place, which it keeps until it is written:
    /// the connection's next large answer is not computed before, so at most one waits. It is
    /// therefore not counted against the budget — a 15 or a 100 MB answer being written must
    /// not make the next event look like a client that fell behind.
    async fn send_large(
        &self,
        text: String,
        place: tokio::sync::OwnedSemaphorePermit,
    ) -> Result<(), Overflowed> {
        self.queue(Line { text, counted: 0, _place: Some(place) }).await
    }

    async fn queue(&self, line: Line) -> Result<(), Overflowed> {
        if self.overflow.is_cancelled() {
            return Err(Overflowed);
        }
        let counted = line.counted;
        let waiting = self.queued.fetch_add(counted, Ordering::SeqCst);
        if waiting > 0 && waiting + counted > OUTBOUND_BUDGET_BYTES {
            self.queued.fetch_sub(counted, Ordering::SeqCst);
            self.overflow.cancel();
            return Err(Overflowed);
        }
        if self.lines.send(line).await.is_err() {
            self.queued.fetch_sub(counted, Ordering::SeqCst);
            return Err(Overflowed);
        }
        Ok(())
    }

    /// Resolves when the writer is gone.
    async fn closed(&self) {
        self.lines.closed().await;
    }
}

/// Where a connection's lines go, one whole line at a time: a byte stream ([`ByteLines`]), or a
/// WebSocket (one message per line).
pub(crate) trait LineSink: Send + 'static {
    /// Writes one line (without its end) and flushes it.
    fn write_line(&mut self, line: String) -> impl Future<Output = std::io::Result<()>> + Send;
    /// The last line to a client that fell behind, after a line cut short when `cut_mid_line`.
    /// A byte stream ends the cut line first; a sink that cannot resume after a cut says
    /// nothing.
    fn last_line(
        &mut self,
        line: String,
        cut_mid_line: bool,
    ) -> impl Future<Output = std::io::Result<()>> + Send;
    /// Ends the stream (a byte stream's shutdown, a WebSocket's close).
    fn close(&mut self) -> impl Future<Output = std::io::Result<()>> + Send;
}

/// Lines over a byte stream: each ends with a newline.
pub(crate) struct ByteLines<W>(pub W);

impl<W: AsyncWrite + Unpin + Send + 'static> LineSink for ByteLines<W> {
    async fn write_line(&mut self, mut line: String) -> std::io::Result<()> {
        line.push('\n');
        self.0.write_all(line.as_bytes()).await?;
        self.0.flush().await
    }

    async fn last_line(&mut self, mut line: String, cut_mid_line: bool) -> std::io::Result<()> {
        if cut_mid_line {
            line.insert(0, '\n');
        }
        self.write_line(line).await
    }

    async fn close(&mut self) -> std::io::Result<()> {
        self.0.shutdown().await
    }
}

/// Serves `methods` over one connection until the peer closes it or `shutdown` fires.
pub async fn serve_lines<R, W>(
    methods: Methods,
    places: LargePlaces,
    reader: R,
    writer: W,
    shutdown: CancellationToken,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    serve_line_sink(methods, places, reader, ByteLines(writer), shutdown).await;
}

/// [`serve_lines`], its answers and events written to `sink`.
pub(crate) async fn serve_line_sink<R, S>(
    methods: Methods,
    places: LargePlaces,
    reader: R,
    sink: S,
    shutdown: CancellationToken,
) where
    R: AsyncRead + Unpin + Send + 'static,
    S: LineSink,
{
    let (lines, lines_out) = mpsc::channel::<Line>(OUTGOING_BUFFER);
    let outgoing = Outgoing { lines, queued: Arc::default(), overflow: CancellationToken::new() };
    // The writer stops on its own token, not the daemon's: on shutdown the answers to requests
    // in flight (prompts whose turns are being cancelled) are still written.
    let writer_stop = CancellationToken::new();
    let writer_task = tokio::spawn(write_lines(
        sink,
        lines_out,
        Arc::clone(&outgoing.queued),
        outgoing.overflow.clone(),
        writer_stop.clone(),
    ));
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let subscriptions: Subscriptions = Arc::default();
    // This connection's place among the large answers (see [`LargePlaces`]).
    let large = Arc::new(Semaphore::new(1));
    let mut frames =
        FramedRead::new(reader, Lines(LinesCodec::new_with_max_length(MAX_LINE_BYTES)));
    loop {
        // Cancel-safety: `next` on a FramedRead is cancel-safe (a partial line stays buffered);
        // `cancelled` is cancel-safe.
        let frame = tokio::select! {
            frame = frames.next() => frame,
            () = shutdown.cancelled() => break,
            () = outgoing.overflow.cancelled() => break,
        };
        let frame = match frame {
            None => break,
            Some(Ok(frame)) => frame,
            Some(Err(error)) => {
                tracing::debug!(%error, "connection read failed");
                break;
            }
        };
        let call = match admit(frame) {
            Admission::Skip => continue,
            Admission::Reject(answer) => {
                let _ = outgoing.send(answer.to_line()).await;
                continue;
            }
            Admission::Call(call) => call,
        };
        let Ok(permit) = Arc::clone(&in_flight).try_acquire_owned() else {
            let message = format!(
                "overloaded, retry later: {MAX_IN_FLIGHT} requests are already in flight on this connection"
            );
            let _ = outgoing.send(error_line(call.id, OVERLOADED, message)).await;
            continue;
        };
        if let Some(answer) = refuse_for_subscriptions(&call, &subscriptions) {
            let _ = outgoing.send(answer).await;
            continue;
        }
        let methods = methods.clone();
        let outgoing = outgoing.clone();
        let subscriptions = Arc::clone(&subscriptions);
        let large = Arc::clone(&large);
        let places = places.clone();
        tokio::spawn(async move {
            answer(methods, call, permit, &outgoing, &subscriptions, (large, places)).await;
        });
    }
    // The peer stopped sending (or the daemon is stopping). Requests already read still get
    // their answers — `echo REQUEST | dsh stdio` waits for the response — then subscriptions
    // end and the writer flushes what is queued and stops.
    // A client that fell behind gets no more answers: its connection is dropped now.
    let overflowed = outgoing.overflow.clone();
    drop(outgoing);
    let all = u32::try_from(MAX_IN_FLIGHT).unwrap_or(u32::MAX);
    let grace = if overflowed.is_cancelled() {
        std::time::Duration::ZERO
    } else if shutdown.is_cancelled() {
        SHUTDOWN_GRACE
    } else {
        ANSWER_GRACE
    };
    let _ = tokio::time::timeout(grace, in_flight.acquire_many(all)).await;
    writer_stop.cancel();
    let _ = writer_task.await;
}

/// Subscriptions belong to the connection that made them (jsonrpsee's raw calls share one
/// connection id): another connection cannot end them, and each connection holds a bounded
/// number. The answer to send instead of running `call`, if any.
fn refuse_for_subscriptions(call: &Call, subscriptions: &Subscriptions) -> Option<String> {
    if UNSUBSCRIBE.contains(&call.method.as_str()) {
        let owned =
            call.unsubscribe.as_ref().is_some_and(|target| lock(subscriptions).contains(target));
        return (!owned).then(|| Response::result(call.id.clone(), raw(&false)).to_line());
    }
    if SUBSCRIBE.contains(&call.method.as_str()) && lock(subscriptions).len() >= MAX_SUBSCRIPTIONS {
        let message = format!(
            "overloaded, retry later: {MAX_SUBSCRIPTIONS} subscriptions are open on this connection"
        );
        return Some(error_line(call.id.clone(), OVERLOADED, message));
    }
    None
}

/// Runs one admitted request: its answer (then the request no longer counts as in flight),
/// then — for a subscription — its notifications until it is unsubscribed or the connection
/// closes.
async fn answer(
    methods: Methods,
    call: Call,
    in_flight: tokio::sync::OwnedSemaphorePermit,
    outgoing: &Outgoing,
    subscriptions: &Subscriptions,
    large: (Arc<Semaphore>, LargePlaces),
) {
    let (answered, place) = if is_large(&call.method) {
        match answer_apart(&methods, &call, large, outgoing).await {
            Ok((answer, place)) => (Ok(answer), Some(place)),
            Err(error) => (Err(error), None),
        }
    } else {
        (methods.raw_json_request(&call.line, SUBSCRIPTION_BUFFER).await.map_err(invalid), None)
    };
    let (response, mut notifications) = match answered {
        Ok(answer) => answer,
        Err((code, message)) => {
            let _ = outgoing.send(error_line(call.id, code, message)).await;
            return;
        }
    };
    // Only a (un)subscription's answer is read back, for its subscription id: "what the model
    // saw" of a long session is a hundred megabytes, which parsing again cost a third of its
    // time.
    let subscribing = SUBSCRIBE.contains(&call.method.as_str());
    if (subscribing || UNSUBSCRIBE.contains(&call.method.as_str()))
        && let Ok(Response { result: Some(result), .. }) =
            serde_json::from_str::<Response>(response.get())
    {
        if subscribing {
            lock(subscriptions).insert(result.get().to_owned());
        } else if let Some(target) = &call.unsubscribe {
            lock(subscriptions).remove(target);
        }
    }
    // The answer's own buffer becomes the line: no copy.
    let line = String::from(Box::<str>::from(response));
    let _ = match place {
        Some(place) => outgoing.send_large(line, place).await,
        None => outgoing.send(line).await,
    };
    drop(in_flight);
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
}

/// A response and its notifications, as [`Methods::raw_json_request`] gives them.
type Answer = (Box<serde_json::value::RawValue>, mpsc::Receiver<Box<serde_json::value::RawValue>>);

/// [`Methods::raw_json_request`] on the blocking pool, once the connection's place and one of
/// the process's [`LARGE_AT_ONCE`] are free (see [`LargePlaces`]). The handler's own awaits
/// are driven from there; the runtime's workers stay free for everyone else. The places go with
/// the work, even if this future is dropped first: the process's is given back when the answer
/// is computed; the connection's comes back with the answer, to be held until it is written
/// ([`Outgoing::send_large`]). A request still waiting for its places when the connection's
/// writer is gone (a write to the client failed, or the daemon stopped waiting for it) is
/// dropped: nobody would read its answer. A client that closed its end is noticed only at the
/// first write that fails.
async fn answer_apart(
    methods: &Methods,
    call: &Call,
    (large, places): (Arc<Semaphore>, LargePlaces),
    outgoing: &Outgoing,
) -> Result<(Answer, tokio::sync::OwnedSemaphorePermit), (i32, String)> {
    let gone = || (SHUTTING_DOWN, "the connection closed before the answer".to_owned());
    let places = async {
        // Neither semaphore is ever closed.
        let connection_place = large.acquire_owned().await.ok()?;
        let place = places.take().await?;
        Some((connection_place, place))
    };
    // Cancel-safety: waiting for a semaphore is cancel-safe (the place is not taken), and so is
    // `closed`. Biased: the writer's end frees the place of the line it drops, so both can be
    // ready at once; the end wins.
    let (connection_place, place) = tokio::select! {
        biased;
        () = outgoing.closed() => return Err(gone()),
        places = places => places.ok_or_else(gone)?,
    };
    let (methods, line) = (methods.clone(), call.line.clone());
    let answered = on_blocking_pool(&call.method, place, async move {
        (methods.raw_json_request(&line, SUBSCRIPTION_BUFFER).await, connection_place)
    });
    let (answer, connection_place) = answered.await?;
    Ok((answer.map_err(invalid)?, connection_place))
}

/// Drives `work` — a large answer's handler and the serialization of its answer —
/// to its end on the blocking pool, holding `places` until then, even if the returned future is
/// dropped first. Both fronts answer such methods through it. An error when the task could not
/// finish: the runtime is shutting down, or the handler panicked.
pub(crate) async fn on_blocking_pool<T: Send + 'static>(
    method: &str,
    places: impl Send + 'static,
    work: impl Future<Output = T> + Send + 'static,
) -> Result<T, (i32, String)> {
    let runtime = tokio::runtime::Handle::current();
    let done = tokio::task::spawn_blocking(move || {
        let _places = places;
        runtime.block_on(work)
    });
    match done.await {
        Ok(done) => Ok(done),
        Err(error) if error.is_cancelled() => {
            Err((SHUTTING_DOWN, "the daemon is shutting down".to_owned()))
        }
        Err(_) => Err((STORE, format!("the {method} handler panicked"))),
    }
}

/// The answer to a line `jsonrpsee` could not read as a request.
fn invalid(error: serde_json::Error) -> (i32, String) {
    (INVALID_REQUEST, format!("invalid request: {error}"))
}

fn error_line(id: Id, code: i32, message: String) -> String {
    Response::error(id, ErrorObject::new(code, message)).to_line()
}

/// How long the last line to a client that fell behind may take to write, and the end of a
/// connection (its stream shut down, its WebSocket closed).
const LAST_WORD: std::time::Duration = std::time::Duration::from_secs(1);

async fn write_lines<S: LineSink>(
    mut sink: S,
    mut lines: mpsc::Receiver<Line>,
    queued: Arc<AtomicUsize>,
    overflow: CancellationToken,
    connection: CancellationToken,
) {
    loop {
        // Cancel-safety: `recv` is cancel-safe; `cancelled` is cancel-safe.
        let line = tokio::select! {
            line = lines.recv() => line,
            () = overflow.cancelled() => return last_word(&mut sink, &mut lines, &queued, false).await,
            () = connection.cancelled() => {
                // Flush what is already queued, then stop: dropping the receiver ends every
                // subscription forwarder of this connection.
                while let Ok(line) = lines.try_recv() {
                    if sink.write_line(line.text).await.is_err() {
                        return;
                    }
                }
                break;
            }
        };
        let Some(Line { text, counted, _place }) = line else { break };
        // A client that does not read blocks this write: the overflow must still end it.
        // Cancel-safety: a write cut short leaves a partial line, which `last_word` ends (or,
        // when the sink cannot, says nothing after).
        let written = tokio::select! {
            written = sink.write_line(text) => written,
            () = overflow.cancelled() => return last_word(&mut sink, &mut lines, &queued, true).await,
        };
        queued.fetch_sub(counted, Ordering::SeqCst);
        if written.is_err() {
            return;
        }
    }
    let _ = tokio::time::timeout(LAST_WORD, sink.close()).await;
}

/// The end of a connection whose client fell behind: drop what waits (that is the memory to
/// give back), say why in one last line, and close. The client may not read even that: the
/// last word has a deadline.
async fn last_word<S: LineSink>(
    sink: &mut S,
    lines: &mut mpsc::Receiver<Line>,
    queued: &AtomicUsize,
    cut_mid_line: bool,
) {
    lines.close();
    while lines.try_recv().is_ok() {}
    let waiting = queued.load(Ordering::SeqCst);
    let message = format!(
        "disconnected: this connection fell behind by more than {} MiB of unread answers and events ({waiting} bytes were waiting); read what the daemon sends, and ask for smaller pages",
        OUTBOUND_BUDGET_BYTES / (1024 * 1024),
    );
    tracing::warn!(waiting, "a client fell behind by more than the outbound budget: disconnected");
    let last = error_line(Id::Null, OVERLOADED, message);
    let _ = tokio::time::timeout(LAST_WORD, sink.last_line(last, cut_mid_line)).await;
    let _ = tokio::time::timeout(LAST_WORD, sink.close()).await;
}

#[cfg(test)]
mod tests;
