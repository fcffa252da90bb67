//! The stream producer: a task per admitted request that paces its answer into the response
//! body (docs/mock.md, "Responses" and "Faults") — keep-alives and delays first, then the SSE
//! frames (or the whole body) with the frame faults applied, the cache persisted at the first
//! data frame and the request's effects in place before its last bytes are handed over.
//!
//! It stops early when the client goes away (outcome `aborted`) or the server shuts down
//! (`shutdown`); every wait watches both.

use std::io;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use tokio::sync::{mpsc, watch};
use tokio::time::{Duration, Instant};

use super::admission::Admitted;
use super::{Shared, Surface};
use crate::messages::{self, Flavor};
use crate::state::lock;

/// Starts the producer task and returns the streaming response.
pub(super) fn respond(shared: Arc<Shared>, seq: u64, admitted: Admitted) -> Response {
    let (sender, mut receiver) = mpsc::channel::<Result<Bytes, io::Error>>(16);
    let stream_mode = admitted.request.stream;
    let request_id = admitted.output.id.clone();
    let persist_delay = Duration::from_millis(
        admitted.fault.persist_delay_ms.unwrap_or(shared.config.cache.persist_delay_ms),
    );
    let producer = Producer {
        shutdown: shared.shutdown.clone(),
        shared,
        sender,
        seq,
        persist_delay,
        malformed: false,
        admitted,
    };
    tokio::spawn(producer.run());
    let stream = futures::stream::poll_fn(move |cx| receiver.poll_recv(cx));
    let mut response = Response::new(Body::from_stream(stream));
    let headers = response.headers_mut();
    let content_type = if stream_mode {
        HeaderValue::from_static("text/event-stream; charset=utf-8")
    } else {
        HeaderValue::from_static("application/json")
    };
    headers.insert(header::CONTENT_TYPE, content_type);
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        headers.insert("x-request-id", value);
    }
    response
}

/// Why a producer stopped early.
enum Stop {
    /// The client went away (the response body was dropped).
    Gone,
    /// The server is shutting down.
    Shutdown,
}

/// Paces one response into the body channel.
struct Producer {
    shared: Arc<Shared>,
    sender: mpsc::Sender<Result<Bytes, io::Error>>,
    shutdown: watch::Receiver<bool>,
    seq: u64,
    persist_delay: Duration,
    malformed: bool,
    admitted: Admitted,
}

/// Resolves once shutdown has been requested (or the server is gone).
async fn shutdown_requested(shutdown: &mut watch::Receiver<bool>) {
    // An error means the sender is gone, which also means shutdown.
    let _ = shutdown.wait_for(|stop| *stop).await;
}

impl Producer {
    async fn run(mut self) {
        let result =
            if self.admitted.request.stream { self.stream().await } else { self.whole().await };
        match result {
            Ok(()) => {}
            Err(Stop::Gone) => self.set_outcome("aborted"),
            Err(Stop::Shutdown) => {
                self.set_outcome("shutdown");
                let _ = self.sender.try_send(Err(io::Error::other("mock server shutting down")));
            }
        }
    }

    fn set_outcome(&self, outcome: &str) {
        let mut state = lock(&self.shared.state);
        if let Some(record) = state.record_mut(self.seq)
            && record.outcome == "in_progress"
        {
            record.outcome = outcome.to_owned();
        }
    }

    fn line_end(&self) -> &'static str {
        if self.admitted.fault.crlf { "\r\n" } else { "\n" }
    }

    /// Waits `ms` milliseconds unless the server stops or the client leaves first.
    async fn pause(&mut self, ms: u64) -> Result<(), Stop> {
        if ms == 0 {
            return Ok(());
        }
        tokio::select! {
            // Cancel-safe: a sleep holds no state beyond its deadline.
            () = tokio::time::sleep(Duration::from_millis(ms)) => Ok(()),
            // Cancel-safe: `wait_for` only observes the watch channel.
            () = shutdown_requested(&mut self.shutdown) => Err(Stop::Shutdown),
            // Cancel-safe: `closed` only observes the channel.
            () = self.sender.closed() => Err(Stop::Gone),
        }
    }

    /// Sends one item to the body unless the server stops first.
    async fn send(&mut self, bytes: Bytes) -> Result<(), Stop> {
        tokio::select! {
            // Not cancel-safe (the item is lost if cancelled), which is fine: cancelling means
            // the response is being abandoned anyway.
            sent = self.sender.send(Ok(bytes)) => sent.map_err(|_| Stop::Gone),
            // Cancel-safe: `wait_for` only observes the watch channel.
            () = shutdown_requested(&mut self.shutdown) => Err(Stop::Shutdown),
        }
    }

    /// Writes `text`, in tiny pieces that split characters and lines under `split_utf8`.
    async fn write(&mut self, text: String) -> Result<(), Stop> {
        if !self.admitted.fault.split_utf8 {
            return self.send(Bytes::from(text)).await;
        }
        let bytes = Bytes::from(text);
        let mut start = 0;
        for (index, byte) in bytes.iter().enumerate() {
            // Cut right after the lead byte of every multi-byte character, every 7 bytes, and
            // between the two line ends that close a frame.
            let cut = *byte >= 0xC0 || (index + 1) % 7 == 0 || index + 2 == bytes.len();
            if cut && index + 1 < bytes.len() {
                self.send(bytes.slice(start..index + 1)).await?;
                tokio::task::yield_now().await;
                start = index + 1;
            }
        }
        if start < bytes.len() {
            self.send(bytes.slice(start..)).await?;
        }
        // A short pause makes the pieces leave in separate writes.
        self.pause(1).await
    }

    async fn keepalive_comment(&mut self) -> Result<(), Stop> {
        let end = self.line_end();
        let text = if self.admitted.request.stream {
            format!(": keep-alive{end}{end}")
        } else {
            end.to_owned()
        };
        self.write(text).await
    }

    /// Keep-alive lines every `every_ms` for `for_ms`.
    async fn keepalive_for(&mut self, every_ms: u64, for_ms: u64) -> Result<(), Stop> {
        let every_ms = every_ms.max(1);
        let mut elapsed = 0;
        while elapsed < for_ms {
            self.keepalive_comment().await?;
            let step = every_ms.min(for_ms - elapsed);
            self.pause(step).await?;
            elapsed += step;
        }
        Ok(())
    }

    /// The queue phase, scripted keep-alives and delay before inference starts.
    async fn before_first_frame(&mut self) -> Result<(), Stop> {
        if let Some(for_ms) = self.admitted.fault.queue_keepalive_ms {
            let every = self
                .admitted
                .fault
                .keepalive_every_ms
                .unwrap_or(self.shared.config.stream.queue_keepalive_interval_ms);
            self.keepalive_for(every, for_ms).await?;
        }
        let keepalive = self.admitted.plan.keepalive;
        for _ in 0..keepalive.count {
            self.pause(keepalive.interval_ms).await?;
            self.keepalive_comment().await?;
        }
        self.pause(self.admitted.plan.delay_ms).await
    }

    fn persist_input(&self) {
        let config = &self.shared.config.cache;
        let mut state = lock(&self.shared.state);
        if self.admitted.surface == Surface::Messages(Flavor::Anthropic) {
            state.cache.persist_breakpoints(
                &self.admitted.namespace,
                &self.admitted.prompt,
                &self.admitted.breakpoints,
                Instant::now(),
                self.persist_delay,
            );
            return;
        }
        state.cache.persist_input(
            config,
            &self.admitted.namespace,
            &self.admitted.prompt,
            Instant::now(),
            self.persist_delay,
        );
    }

    /// Success: output units, balance, outcome. Runs before the last bytes are handed over so
    /// a client that has seen `[DONE]` always sees the effects.
    fn complete(&self) {
        let config = &self.shared.config.cache;
        let mut state = lock(&self.shared.state);
        // Anthropic's cache holds only what a breakpoint marked: an answer is cached when the
        // next request marks it.
        let anthropic = self.admitted.surface == Surface::Messages(Flavor::Anthropic);
        if !self.malformed && !anthropic {
            state.cache.persist_output(
                config,
                &self.admitted.namespace,
                &self.admitted.completed,
                Instant::now(),
                self.persist_delay,
            );
        }
        let key = self.admitted.guard.key.clone();
        if let Some(balance) = state.balances.get_mut(&key) {
            *balance -= self.admitted.cost;
        }
        if let Some(record) = state.record_mut(self.seq) {
            record.outcome = if self.malformed { "malformed" } else { "ok" }.to_owned();
        }
    }

    /// Aborts the connection without a proper end of body.
    async fn abort(&mut self, outcome: &str) -> Result<(), Stop> {
        self.set_outcome(outcome);
        // hyper drops its unflushed write buffer when the body fails, so first let it take every
        // queued frame and flush it (it flushes whenever the body has nothing ready).
        while self.sender.capacity() < self.sender.max_capacity() {
            self.pause(1).await?;
        }
        self.pause(10).await?;
        tokio::select! {
            // Not cancel-safe, but losing the error item only happens when stopping anyway.
            _ = self.sender.send(Err(io::Error::other(format!("mock fault: {outcome}")))) => Ok(()),
            // Cancel-safe: `wait_for` only observes the watch channel.
            () = shutdown_requested(&mut self.shutdown) => Err(Stop::Shutdown),
        }
    }

    /// Checks the frame-count faults before data frame `number` (counting from 1). Returns
    /// `true` when the stream has been ended by a fault.
    async fn frame_faults(&mut self, number: u64) -> Result<bool, Stop> {
        let fault = self.admitted.fault.clone();
        if fault.drop_after_frames.is_some_and(|after| number > after) {
            self.abort("dropped").await?;
            return Ok(true);
        }
        if fault.stall_after_frames.is_some_and(|after| number > after) {
            let every = fault.keepalive_every_ms.unwrap_or(1000);
            self.keepalive_for(every, fault.for_ms.unwrap_or(0)).await?;
            self.abort("stalled").await?;
            return Ok(true);
        }
        Ok(false)
    }

    /// The frame sequence (docs/mock.md, "Responses") with the frame-count faults applied; `[DONE]`
    /// counts as a frame.
    async fn stream(&mut self) -> Result<(), Stop> {
        self.before_first_frame().await?;
        let config = self.shared.config.stream.clone();
        let (frames, last): (Vec<Frame>, Option<Frame>) = match self.admitted.surface {
            Surface::Chat => {
                let frames = self
                    .admitted
                    .output
                    .stream_frames(&config, self.admitted.request.include_usage);
                let frames = frames.into_iter().map(|frame| (None, frame)).collect();
                (frames, Some((None, "[DONE]".to_owned())))
            }
            Surface::Messages(flavor) => {
                let mut frames: Vec<Frame> = messages::frames(
                    &self.admitted.output,
                    self.admitted.messages_usage,
                    flavor,
                    &config,
                )
                .into_iter()
                .map(|(name, json)| (Some(name), json))
                .collect();
                // `message_stop` ends the stream like `[DONE]`; a stream that ends in an
                // `error` event has no such end.
                let last = match frames.last() {
                    Some((Some("message_stop"), _)) => frames.pop(),
                    _ => None,
                };
                (frames, last)
            }
        };
        let end = self.line_end();
        let mut number = 0;
        for (name, frame) in frames {
            number += 1;
            if self.frame_faults(number).await? {
                return Ok(());
            }
            if number == 1 {
                self.persist_input();
            }
            let json = if self.admitted.fault.malformed_frame_at == Some(number) {
                self.malformed = true;
                cut_short(&frame).to_owned()
            } else {
                frame
            };
            self.write(sse_frame(name, &json, end)).await?;
            self.pause(config.inter_chunk_delay_ms).await?;
        }
        let Some((name, last)) = last else {
            // Ended by an error event: the input stays cached, nothing else happens.
            self.set_outcome("error_event");
            return Ok(());
        };
        number += 1;
        if self.frame_faults(number).await? {
            return Ok(());
        }
        self.complete();
        self.write(sse_frame(name, &last, end)).await
    }

    /// A non-streaming answer is one "frame": `drop_after_frames: 0` aborts before it, any other
    /// count sends half of it; a stall sends blank lines instead; `malformed_frame_at` cuts it.
    async fn whole(&mut self) -> Result<(), Stop> {
        self.before_first_frame().await?;
        let fault = self.admitted.fault.clone();
        let body = match self.admitted.surface {
            Surface::Chat => self.admitted.output.completion_body(),
            Surface::Messages(flavor) => {
                messages::message_body(&self.admitted.output, self.admitted.messages_usage, flavor)
            }
        };
        if fault.drop_after_frames == Some(0) {
            return self.abort("dropped").await;
        }
        if fault.stall_after_frames.is_some() {
            self.keepalive_for(fault.keepalive_every_ms.unwrap_or(1000), fault.for_ms.unwrap_or(0))
                .await?;
            return self.abort("stalled").await;
        }
        self.persist_input();
        if fault.drop_after_frames.is_some() {
            self.write(cut_short(&body).to_owned()).await?;
            return self.abort("dropped").await;
        }
        let body = if fault.malformed_frame_at.is_some() {
            self.malformed = true;
            cut_short(&body).to_owned()
        } else {
            body
        };
        self.complete();
        self.write(body).await
    }
}

/// A frame to send: its event name (Messages only) and its data.
type Frame = (Option<&'static str>, String);

/// One SSE frame: `event: NAME` (Messages) and `data: JSON`, then a blank line.
fn sse_frame(name: Option<&str>, json: &str, end: &str) -> String {
    match name {
        Some(name) => format!("event: {name}{end}data: {json}{end}{end}"),
        None => format!("data: {json}{end}{end}"),
    }
}

/// The first half of `json`, on a character boundary.
fn cut_short(json: &str) -> &str {
    let mut cut = json.len() / 2;
    while !json.is_char_boundary(cut) {
        cut -= 1;
    }
    &json[..cut]
}
