//! The HTTP transport: one streamed call, with timers, retries and cancellation. What differs by
//! format — the path, the key's header, the decoder — is asked of [`Format`].
//!
//! [`DeepSeek::stream`] spawns one task per call. The task owns the HTTP response and pushes
//! normalized [`StreamEvent`]s into a small bounded channel that [`EventStream::next`] reads.
//! That shape makes cancellation structural: the task runs under a child of the caller's
//! [`CancellationToken`], and [`EventStream`] holds a drop guard of that child, so cancelling
//! the token *or* dropping the stream ends the task, and ending the task drops the response,
//! which closes the connection.
//!
//! Retry rule: an attempt that failed with a retryable error **before yielding any delta** is
//! retried (after a [`StreamEvent::Retry`]) with the very same `Bytes`; once a delta has gone
//! out, a failure ends the call, because the loop cannot take back what it already logged.

use std::sync::Arc;
use std::time::Duration;

use dsh_session::{ChunkDelta, Usage};
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout_at};
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::ApiKey;
use crate::body::WireBytes;
use crate::decoded::Decoded;
use crate::error::TimeoutKind;
use crate::format::Format;
use crate::sse::{SseDecoder, SseEvent};
use crate::{DeepSeekConfig, ProviderError, RetryPolicy};

/// One normalized item of a streamed call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamEvent {
    /// Text, reasoning, a tool call's start or an argument fragment, in arrival order.
    Delta(ChunkDelta),
    /// A retryable failure happened before this attempt yielded any delta; the same body is
    /// sent again after `delay`. The loop logs it as `llm/retry`.
    Retry {
        /// 1-based number of the attempt that failed.
        attempt: u32,
        /// Backoff before the next attempt.
        delay: Duration,
        /// What failed, for people.
        error: String,
    },
    /// The stream finished (`data: [DONE]`); always the last event of a successful call.
    Finish {
        /// `stop`, `tool_calls` or `length`.
        finish_reason: String,
        /// Token usage of the call.
        usage: Usage,
    },
}

/// How many events may wait between the network task and the reader.
const CHANNEL_CAPACITY: usize = 64;

/// The most of an error body read for its message.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// The client of one endpoint, in the format its kind names (DeepSeek's first, hence the
/// name): an HTTP client plus its configuration.
#[derive(Clone, Debug)]
pub struct DeepSeek {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: reqwest::Client,
    url: reqwest::Url,
    format: Format,
    config: DeepSeekConfig,
}

impl DeepSeek {
    /// Builds the client. Fails on a malformed base URL or an API key that cannot be a header.
    pub fn new(config: DeepSeekConfig) -> Result<DeepSeek, ProviderError> {
        // reqwest is built with `rustls-no-provider`: install the ring provider once per
        // process. An error only means a provider is already installed, which is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();

        let format = Format::of(config.kind);
        let base = config.base_url.trim_end_matches('/');
        let url = reqwest::Url::parse(&format!("{base}/{}", format.path())).map_err(|error| {
            ProviderError::Config(format!("invalid base URL {:?}: {error}", config.base_url))
        })?;
        let mut headers = HeaderMap::new();
        if let Some(key) = &config.api_key {
            let (name, value) = format.key_header(key.expose());
            let mut value = HeaderValue::from_str(&value).map_err(|_| {
                ProviderError::Config(
                    "the API key contains characters not allowed in a header".to_owned(),
                )
            })?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        for (name, value) in format.fixed_headers() {
            headers.insert(HeaderName::from_static(name), HeaderValue::from_static(value));
        }
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        for (name, value) in &config.headers {
            let invalid = || ProviderError::Config(format!("extra header `{name}` is not valid"));
            let name =
                reqwest::header::HeaderName::from_bytes(name.as_bytes()).map_err(|_| invalid())?;
            let mut value = HeaderValue::from_str(value).map_err(|_| invalid())?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        let client = reqwest::Client::builder()
            .default_headers(headers)
            .connect_timeout(config.connect_timeout)
            .user_agent(concat!("dsh/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|error| {
                ProviderError::Config(format!("cannot build the HTTP client: {error}"))
            })?;
        Ok(DeepSeek { inner: Arc::new(Inner { client, url, format, config }) })
    }

    /// The URL requests are posted to.
    pub fn url(&self) -> &str {
        self.inner.url.as_str()
    }

    /// Sends `body` (exactly these bytes, on every attempt) and streams normalized events.
    ///
    /// Must be called within a Tokio runtime: the call runs on a spawned task. Cancelling
    /// `cancel` or dropping the returned stream aborts the HTTP request promptly.
    pub fn stream(&self, body: impl Into<WireBytes>, cancel: CancellationToken) -> EventStream {
        let body = body.into();
        let (sender, receiver) = mpsc::channel(CHANNEL_CAPACITY);
        let task_token = cancel.child_token();
        let guard = task_token.clone().drop_guard();
        let inner = Arc::clone(&self.inner);
        tokio::spawn(async move {
            tokio::select! {
                biased;
                // Cancel-safe: `cancelled` holds no state. Winning drops the call future below,
                // and with it the HTTP response: the connection closes.
                () = task_token.cancelled() => {}
                // Not cancel-safe, deliberately: losing this branch is how the request aborts.
                () = run_call(&inner, body, &sender) => {}
            }
        });
        EventStream { receiver, cancel, _guard: guard, ended: false }
    }
}

/// The events of one call. Dropping it aborts the request.
#[derive(Debug)]
pub struct EventStream {
    receiver: mpsc::Receiver<Result<StreamEvent, ProviderError>>,
    cancel: CancellationToken,
    _guard: DropGuard,
    ended: bool,
}

impl EventStream {
    /// The next event; `None` after `Finish` or an error.
    ///
    /// Returns `Err(ProviderError::Cancelled)` as soon as the token is cancelled, even when
    /// events are still buffered. Cancel-safe: nothing is lost when this future is dropped.
    pub async fn next(&mut self) -> Option<Result<StreamEvent, ProviderError>> {
        if self.ended {
            return None;
        }
        let item = tokio::select! {
            biased;
            // Cancel-safe: `cancelled` holds no state.
            () = self.cancel.cancelled() => Some(Err(ProviderError::Cancelled)),
            // Cancel-safe: `mpsc::Receiver::recv` loses no message when dropped.
            item = self.receiver.recv() => item,
        };
        match &item {
            Some(Ok(StreamEvent::Delta(_) | StreamEvent::Retry { .. })) => {}
            Some(Ok(StreamEvent::Finish { .. }) | Err(_)) | None => self.ended = true,
        }
        item
    }
}

/// Why an attempt stopped without finishing.
enum AttemptEnd {
    /// The reader is gone; stop quietly.
    ReaderGone,
    /// The attempt failed.
    Failed { error: ProviderError, yielded: bool },
}

type Sender = mpsc::Sender<Result<StreamEvent, ProviderError>>;

/// Runs attempts until one finishes, one fails for good, or the reader goes away.
async fn run_call(inner: &Inner, body: WireBytes, sender: &Sender) {
    let policy: &RetryPolicy = &inner.config.retry;
    let mut attempt = 1;
    loop {
        let (error, yielded) = match run_attempt(inner, &body, sender).await {
            Ok(()) | Err(AttemptEnd::ReaderGone) => return,
            Err(AttemptEnd::Failed { error, yielded }) => {
                (error.scrubbed(|text| scrub(text, inner)), yielded)
            }
        };
        if yielded || !error.is_retryable() || attempt >= policy.max_attempts {
            let _ = sender.send(Err(error)).await;
            return;
        }
        let delay = policy.backoff(attempt);
        tracing::warn!(attempt, ?delay, %error, "provider attempt failed; retrying");
        let retry = StreamEvent::Retry { attempt, delay, error: error.to_string() };
        if sender.send(Ok(retry)).await.is_err() {
            return;
        }
        tokio::time::sleep(delay).await;
        attempt += 1;
    }
}

/// One HTTP request and its stream.
async fn run_attempt(inner: &Inner, body: &WireBytes, sender: &Sender) -> Result<(), AttemptEnd> {
    let config = &inner.config;
    let started = Instant::now();
    let overall_deadline = started + config.overall_timeout;
    let mut data_deadline = started + config.data_timeout;
    let failed = |error: ProviderError, yielded: bool| AttemptEnd::Failed { error, yielded };
    let timeout = |data_deadline: Instant| {
        let (kind, after) = if data_deadline < overall_deadline {
            (TimeoutKind::NoData, config.data_timeout)
        } else {
            (TimeoutKind::Overall, config.overall_timeout)
        };
        ProviderError::Timeout { kind, after }
    };

    let request = inner.client.post(inner.url.clone()).body(body.to_http()).send();
    let mut response = match timeout_at(data_deadline.min(overall_deadline), request).await {
        Err(_) => return Err(failed(timeout(data_deadline), false)),
        Ok(Err(error)) => return Err(failed(transport_error(&error, inner), false)),
        Ok(Ok(response)) => response,
    };
    let status = response.status();
    if !status.is_success() {
        let message = error_message(&mut response, overall_deadline, status, inner).await;
        return Err(failed(ProviderError::Http { status: status.as_u16(), message }, false));
    }

    let mut sse = SseDecoder::new();
    let mut chunks = inner.format.decoder();
    let mut yielded = false;
    loop {
        let bytes = match timeout_at(data_deadline.min(overall_deadline), response.chunk()).await {
            Err(_) => return Err(failed(timeout(data_deadline), yielded)),
            Ok(Err(error)) => {
                let message =
                    format!("reading the response failed: {}", error_chain(&error, inner));
                return Err(failed(ProviderError::StreamCut(message), yielded));
            }
            Ok(Ok(None)) => {
                let message = if sse.has_partial() {
                    "the connection closed in the middle of an event, before the end of the stream"
                } else {
                    "the connection closed before the end of the stream"
                };
                let message = message.to_owned();
                return Err(failed(ProviderError::StreamCut(message), yielded));
            }
            Ok(Ok(Some(bytes))) => bytes,
        };
        let events = sse.feed(&bytes).map_err(|error| failed(error, yielded))?;
        for event in events {
            let data = match event {
                // Keep-alive comments prove the connection lives, not that the model makes
                // progress: they must not reset the data timer (dsh #6959).
                SseEvent::Comment(_) => continue,
                SseEvent::Data(data) => data,
            };
            match chunks.decode(&data).map_err(|error| failed(error, yielded))? {
                Decoded::Deltas(deltas) => {
                    for delta in deltas {
                        yielded = true;
                        if sender.send(Ok(StreamEvent::Delta(delta))).await.is_err() {
                            return Err(AttemptEnd::ReaderGone);
                        }
                    }
                    // A data frame is progress. The timer restarts after the deltas were
                    // handed over, so a slow reader never counts against the server.
                    data_deadline = Instant::now() + config.data_timeout;
                }
                // A `ping` proves the connection lives, like a comment: not progress.
                Decoded::Ping => {}
                Decoded::Done(finish) => {
                    let event = StreamEvent::Finish {
                        finish_reason: finish.finish_reason,
                        usage: finish.usage,
                    };
                    return match sender.send(Ok(event)).await {
                        Ok(()) => Ok(()),
                        Err(_) => Err(AttemptEnd::ReaderGone),
                    };
                }
            }
        }
    }
}

/// Classifies a failure to get a response at all.
fn transport_error(error: &reqwest::Error, inner: &Inner) -> ProviderError {
    if error.is_connect() && error.is_timeout() {
        let after = inner.config.connect_timeout.as_secs_f64();
        return ProviderError::Connect(format!("connecting timed out after {after}s"));
    }
    ProviderError::Connect(error_chain(error, inner))
}

/// An error and its sources, one sentence, with the key scrubbed (defence in depth: reqwest
/// errors name the URL, never headers).
fn error_chain(error: &(dyn std::error::Error + 'static), inner: &Inner) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    scrub(text, inner)
}

/// The user-facing message of an error response: DeepSeek's `error.message` when the body is
/// its error JSON, else the start of the body, else the status's reason phrase.
async fn error_message(
    response: &mut reqwest::Response,
    deadline: Instant,
    status: reqwest::StatusCode,
    inner: &Inner,
) -> String {
    let mut body = Vec::new();
    while body.len() < MAX_ERROR_BODY {
        match timeout_at(deadline, response.chunk()).await {
            Ok(Ok(Some(bytes))) => body.extend_from_slice(&bytes),
            _ => break,
        }
    }
    #[derive(serde::Deserialize)]
    struct ErrorBody {
        error: ErrorDetail,
    }
    #[derive(serde::Deserialize)]
    struct ErrorDetail {
        message: String,
    }
    let message = match serde_json::from_slice::<ErrorBody>(&body) {
        Ok(parsed) => parsed.error.message,
        Err(_) => {
            let text = String::from_utf8_lossy(&body);
            let text = text.trim();
            if text.is_empty() {
                status.canonical_reason().unwrap_or("no message").to_owned()
            } else {
                text.chars().take(500).collect()
            }
        }
    };
    scrub(message, inner)
}

/// Replaces any occurrence of the configured key (the server echoes only a masked form, but a
/// proxy might not).
fn scrub(text: String, inner: &Inner) -> String {
    let Some(key) = inner.config.api_key.as_ref().map(ApiKey::expose) else { return text };
    // A key too short to be real would mangle ordinary words; real keys are long.
    if key.len() >= 8 && text.contains(key) { text.replace(key, "****") } else { text }
}
