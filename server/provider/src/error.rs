//! The one error type of the provider boundary, and which of its cases a retry can help.

use std::time::Duration;

/// What can go wrong while talking to a provider.
///
/// `Display` is a user-facing sentence. No variant ever holds the configured API key: error bodies
/// come from the server (which at most echoes a masked `****abcd`), and transport errors name the
/// URL, never the headers.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// The server answered with a non-success HTTP status before streaming.
    #[error("the provider answered HTTP {status}: {message}")]
    Http {
        /// The HTTP status code.
        status: u16,
        /// The server's error message (from its error JSON when it sent one).
        message: String,
    },
    /// A timer ran out.
    #[error("the provider timed out: {kind} ({}s)", .after.as_secs_f64())]
    Timeout {
        /// Which timer fired.
        kind: TimeoutKind,
        /// Its configured length.
        after: Duration,
    },
    /// The response could not be decoded (a malformed SSE frame or JSON chunk).
    #[error("the provider sent a malformed response: {0}")]
    Decode(String),
    /// The stream ended before `data: [DONE]`.
    #[error("the provider's stream was cut off before it finished: {0}")]
    StreamCut(String),
    /// The request could not be sent (connection refused, DNS, TLS, reset before a response).
    #[error("could not reach the provider: {0}")]
    Connect(String),
    /// The server reported an error inside the stream (Anthropic's `error` event).
    #[error("the provider reported an error mid-stream: {error_type}: {message}")]
    StreamError {
        /// The error's type (`overloaded_error`, `api_error`, `invalid_request_error`, …).
        error_type: String,
        /// The server's message.
        message: String,
    },
    /// The model finished with an error-class finish reason.
    #[error("the provider stopped the response: finish reason `{reason}`")]
    FinishError {
        /// `insufficient_system_resource`, `content_filter` or (Anthropic) `refusal`.
        reason: String,
    },
    /// The caller cancelled the request.
    #[error("the request was cancelled")]
    Cancelled,
    /// The adapter is misconfigured (missing key, bad base URL, unreadable key file).
    #[error("provider configuration error: {0}")]
    Config(String),
}

/// Which of the two stream timers fired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeoutKind {
    /// No data frame arrived for `data_timeout` (keep-alive comments do not count).
    NoData,
    /// The whole attempt took longer than `overall_timeout`.
    Overall,
}

impl std::fmt::Display for TimeoutKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TimeoutKind::NoData => "no data received",
            TimeoutKind::Overall => "the response took too long",
        })
    }
}

impl ProviderError {
    /// The same error with every text it carries passed through `scrub` (the client removes the
    /// key from whatever a server or proxy echoed, inside a stream too).
    pub(crate) fn scrubbed(self, scrub: impl Fn(String) -> String) -> ProviderError {
        match self {
            ProviderError::Http { status, message } => {
                ProviderError::Http { status, message: scrub(message) }
            }
            ProviderError::Decode(text) => ProviderError::Decode(scrub(text)),
            ProviderError::StreamCut(text) => ProviderError::StreamCut(scrub(text)),
            ProviderError::Connect(text) => ProviderError::Connect(scrub(text)),
            ProviderError::StreamError { error_type, message } => ProviderError::StreamError {
                error_type: scrub(error_type),
                message: scrub(message),
            },
            ProviderError::FinishError { reason } => {
                ProviderError::FinishError { reason: scrub(reason) }
            }
            ProviderError::Config(text) => ProviderError::Config(scrub(text)),
            error @ (ProviderError::Timeout { .. } | ProviderError::Cancelled) => error,
        }
    }

    /// Whether a fresh attempt of the same request may succeed.
    ///
    /// This is the error's class only: the client additionally never retries an attempt that
    /// already yielded deltas.
    pub fn is_retryable(&self) -> bool {
        match self {
            ProviderError::Http { status, .. } => {
                matches!(status, 429 | 500 | 502 | 503 | 504 | 529)
            }
            // What the same error would have been as a status before streaming began.
            ProviderError::StreamError { error_type, .. } => matches!(
                error_type.as_str(),
                "overloaded_error" | "api_error" | "rate_limit_error" | "timeout_error"
            ),
            ProviderError::Timeout { .. }
            | ProviderError::StreamCut(_)
            | ProviderError::Connect(_) => true,
            ProviderError::FinishError { reason } => reason == "insufficient_system_resource",
            ProviderError::Decode(_) | ProviderError::Cancelled | ProviderError::Config(_) => false,
        }
    }
}
