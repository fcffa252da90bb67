//! `dsh-mock`: a deterministic DeepSeek-compatible mock HTTP server.
//!
//! It serves the chat-completion API (streaming and not), the Anthropic Messages API (as
//! Anthropic's `/v1/messages` and DeepSeek's `/anthropic/v1/messages`), `/models` and
//! `/user/balance` the way
//! docs/mock.md describes, with a V4-like rendering, an approximate tokenizer, prefix-cache
//! accounting in `block` and `units` modes, scripted or directive-driven answers, injectable
//! faults, and a record of every request's exact bytes under `/_fake/requests`. Tests, `dsh mock`
//! and offline client development use it.
//!
//! It deliberately does **not** depend on any other dsh crate, never reads the wall clock into a
//! response (the `created` field comes from the config), binds only to 127.0.0.1, and does not
//! implement the `hf:` tokenizer.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! let server = dsh_mock::MockServer::start(dsh_mock::MockConfig::default()).await?;
//! let url = format!("{}/chat/completions", server.base_url());
//! // ... POST to `url` with `Authorization: Bearer sk-test` ...
//! server.shutdown().await;
//! # Ok(()) }
//! ```

mod cache;
mod error;
mod fault;
mod knobs;
mod messages;
mod render;
mod request;
mod response;
mod script;
mod server;
mod state;
mod tokenizer;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use axum::serve::ListenerExt;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use error::MockError;
pub use fault::{Fault, HttpFault};
pub use knobs::{
    CacheConfig, CacheMode, KeyConfig, MockConfig, ModelConfig, PassbackRule, PricingConfig,
    StreamConfig, StrictnessConfig, UsagePlacement,
};
pub use script::{Keepalive, Script, ScriptMatch, ScriptToolCall};
pub use state::RecordedRequest;
pub use tokenizer::{
    Marker, Segment, Token, count as count_tokens, pieces as token_pieces, tokenize,
};

use crate::state::{Rates, State, lock, parse_amount};

/// The answer a fresh mock gives to a chat-completion body, without a server: validation steps
/// 2–5 (docs/mock.md, "Validation") and the directive- or echo-driven answer ("Answers"). `Ok`
/// holds the prompt's and the completion's token counts; `Err` the rejection's HTTP status and
/// message. An entry point for the fuzz targets in `fuzz/`, not part of the mock's API.
#[doc(hidden)]
pub fn answer_chat_body(body: &[u8], config: &MockConfig) -> Result<(u64, u64), (u16, String)> {
    server::answer_without_state(body, config).map_err(|error| (error.status, error.message))
}

/// How long `shutdown` waits for connections to finish before dropping them.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// A running mock server. Dropping it requests shutdown without waiting for it.
pub struct MockServer {
    addr: SocketAddr,
    shared: Arc<server::Shared>,
    shutdown: watch::Sender<bool>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl MockServer {
    /// Binds 127.0.0.1 on an ephemeral port and serves in a background tokio task.
    pub async fn start(config: MockConfig) -> std::io::Result<MockServer> {
        MockServer::start_on(config, 0).await
    }

    /// Binds 127.0.0.1:`port` (0 = ephemeral) and serves in a background tokio task.
    pub async fn start_on(config: MockConfig, port: u16) -> std::io::Result<MockServer> {
        if config.tokenizer != "approx-v1" {
            return Err(MockError::UnsupportedTokenizer(config.tokenizer.clone()).into());
        }
        let rates = Rates {
            hit: parse_amount(&config.pricing.hit_per_million)?,
            miss: parse_amount(&config.pricing.miss_per_million)?,
            output: parse_amount(&config.pricing.output_per_million)?,
        };
        let state = State::new(&config)?;
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port)).await?;
        let addr = listener.local_addr()?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let shared = Arc::new(server::Shared {
            config,
            rates,
            state: Mutex::new(state),
            shutdown: shutdown_rx.clone(),
        });
        let app = server::router(Arc::clone(&shared));
        let mut signal = shutdown_rx;
        let task = tokio::spawn(async move {
            // Without TCP_NODELAY every small SSE frame waits for the client's delayed ACK
            // (Nagle): about 40 ms per request here, which no real provider adds.
            let listener = listener.tap_io(|tcp| {
                if let Err(error) = tcp.set_nodelay(true) {
                    tracing::debug!(%error, "setting TCP_NODELAY");
                }
            });
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    // An error means the sender is gone, which also means shutdown.
                    let _ = signal.wait_for(|stop| *stop).await;
                })
                .await
        });
        tracing::debug!(%addr, "mock server listening");
        Ok(MockServer { addr, shared, shutdown, task: Some(task) })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, without a trailing slash.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues scripted replies, as `POST /_fake/script` does: one script object or an array.
    pub fn script(&self, scripts: serde_json::Value) -> Result<(), serde_json::Error> {
        let scripts: Vec<Script> = one_or_many(scripts)?;
        lock(&self.shared.state).scripts.extend(scripts);
        Ok(())
    }

    /// Queues faults, as `POST /_fake/fault` does: one fault object or an array.
    pub fn fault(&self, faults: serde_json::Value) -> Result<(), serde_json::Error> {
        let faults: Vec<Fault> = one_or_many(faults)?;
        lock(&self.shared.state).faults.extend(faults);
        Ok(())
    }

    /// The recorded chat requests, the same data as `GET /_fake/requests`.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.state).requests.clone()
    }

    /// Stops accepting connections, ends in-flight streams (they are aborted, with no
    /// `[DONE]`), and waits for the server task, at most a few seconds.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(mut task) = self.task.take() {
            tokio::select! {
                // Cancel-safe: polling a JoinHandle by reference can be resumed.
                joined = &mut task => {
                    if let Ok(Err(error)) = joined {
                        tracing::warn!(%error, "mock server ended with an error");
                    }
                }
                // Cancel-safe: a sleep holds no state beyond its deadline.
                () = tokio::time::sleep(SHUTDOWN_GRACE) => task.abort(),
            }
        }
    }
}

fn one_or_many<T: serde::de::DeserializeOwned>(
    value: serde_json::Value,
) -> Result<Vec<T>, serde_json::Error> {
    match value {
        serde_json::Value::Array(items) => items.into_iter().map(serde_json::from_value).collect(),
        other => Ok(vec![serde_json::from_value(other)?]),
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

/// Runs the server for `dsh mock [--port N]` until Ctrl-C, after printing one line with its URL.
pub async fn serve_forever(config: MockConfig, port: u16) -> std::io::Result<()> {
    let key = config.keys.first().map_or_else(String::new, |key| key.key.clone());
    let server = MockServer::start_on(config, port).await?;
    // The one line a user of `dsh mock` needs: this is a CLI's output, not logging.
    #[allow(clippy::print_stdout)]
    {
        let url = server.base_url();
        println!("dsh mock listening on {url} (api key: {key})");
        println!(
            "  chat completions: {url}/chat/completions; Anthropic Messages: {url}/v1/messages \
             (profile base_url {url}), DeepSeek-style: {url}/anthropic/v1/messages"
        );
    }
    let result = tokio::signal::ctrl_c().await;
    server.shutdown().await;
    result
}
