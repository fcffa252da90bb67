//! The endpoint a client calls and how: [`DeepSeekConfig`] (base URL, API kind, extra headers,
//! timers), its secret ([`ApiKey`], never printed) and the [`RetryPolicy`].

use std::path::Path;
use std::time::Duration;

use dsh_session::ProviderKind;

use crate::ProviderError;

/// The environment variable [`ApiKey::from_env`] reads.
pub const API_KEY_ENV: &str = "DEEPSEEK_API_KEY";

/// An API key. It never prints: `Debug` and `Display` show a redacted form such as `sk-…****`.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key (surrounding whitespace is trimmed).
    pub fn new(key: impl Into<String>) -> Result<ApiKey, ProviderError> {
        let key = key.into().trim().to_owned();
        if key.is_empty() {
            return Err(ProviderError::Config("the API key is empty".to_owned()));
        }
        Ok(ApiKey(key))
    }

    /// Reads the key from `DEEPSEEK_API_KEY`.
    pub fn from_env() -> Result<ApiKey, ProviderError> {
        match std::env::var(API_KEY_ENV) {
            Ok(value) => ApiKey::new(value)
                .map_err(|_| ProviderError::Config(format!("{API_KEY_ENV} is set but empty"))),
            Err(_) => Err(ProviderError::Config(format!("{API_KEY_ENV} is not set"))),
        }
    }

    /// Reads the key from a file, which must not be readable by group or others (mode `0600`
    /// or stricter), as for an SSH key.
    pub fn from_file(path: &Path) -> Result<ApiKey, ProviderError> {
        let shown = path.display();
        let metadata = std::fs::metadata(path).map_err(|error| {
            ProviderError::Config(format!("cannot read key file {shown}: {error}"))
        })?;
        check_private(path, &metadata)?;
        let text = std::fs::read_to_string(path).map_err(|error| {
            ProviderError::Config(format!("cannot read key file {shown}: {error}"))
        })?;
        ApiKey::new(text).map_err(|_| ProviderError::Config(format!("key file {shown} is empty")))
    }

    /// A digest of the key (sha256, hex): tells keys apart without holding them.
    pub fn digest(&self) -> String {
        crate::sha256_hex(self.0.as_bytes())
    }

    /// The secret, for the `Authorization` header and for scrubbing error text.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

#[cfg(unix)]
fn check_private(path: &Path, metadata: &std::fs::Metadata) -> Result<(), ProviderError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = metadata.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(ProviderError::Config(format!(
            "key file {} is readable by group or others (mode {mode:04o}); run `chmod 600 {}`",
            path.display(),
            path.display()
        )));
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_path: &Path, _metadata: &std::fs::Metadata) -> Result<(), ProviderError> {
    Ok(())
}

impl std::fmt::Display for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Only the well-known, non-secret `sk-` prefix is ever shown.
        if self.0.starts_with("sk-") { f.write_str("sk-…****") } else { f.write_str("…****") }
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiKey({self})")
    }
}

/// Bounded exponential backoff with jitter.
///
/// Attempt `n` (1-based) that failed waits `min(base · 2^(n-1), max)`, jittered down to a value
/// in `[d/2, d]` so that clients that failed together do not retry together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total attempts, the first included (1 means no retries).
    pub max_attempts: u32,
    /// The backoff after the first failure.
    pub base_delay: Duration,
    /// The cap on any backoff.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 4,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
        }
    }
}

impl RetryPolicy {
    /// The backoff after attempt `failed_attempt` (1-based) failed, jittered with `jitter` in
    /// `[0, 1]` (0 gives half the nominal delay, 1 the full delay).
    pub fn backoff_with(&self, failed_attempt: u32, jitter: f64) -> Duration {
        let exponent = failed_attempt.saturating_sub(1).min(31);
        let nominal = self.base_delay.saturating_mul(1u32 << exponent).min(self.max_delay);
        let jitter = jitter.clamp(0.0, 1.0);
        nominal.mul_f64(0.5 + 0.5 * jitter)
    }

    /// The backoff after attempt `failed_attempt` failed, with random jitter.
    pub fn backoff(&self, failed_attempt: u32) -> Duration {
        self.backoff_with(failed_attempt, fastrand::f64())
    }
}

/// Everything the chat-completions transport needs (DeepSeek's API and other OpenAI-compatible
/// servers alike: the body, written by [`crate::wire_body`], is where they differ).
#[derive(Clone, Debug)]
pub struct DeepSeekConfig {
    /// `https://api.deepseek.com` or a compatible server; `/chat/completions` (or, for
    /// Anthropic Messages, `/v1/messages`) is appended.
    pub base_url: String,
    /// The secret; `None` sends no `Authorization` header (a local server).
    pub api_key: Option<ApiKey>,
    /// The longest wait for the next SSE *data* frame (keep-alive comments do not count, so a
    /// request queued longer than this fails).
    pub data_timeout: Duration,
    /// The longest one attempt may take, from sending the request to `[DONE]`.
    pub overall_timeout: Duration,
    /// The longest wait for a TCP (and TLS) connection.
    pub connect_timeout: Duration,
    /// Retries of failed attempts that yielded nothing yet.
    pub retry: RetryPolicy,
    /// Extra request headers (name, value), from the provider profile. Values are treated as
    /// secrets: never logged, never in an error message.
    pub headers: Vec<(String, String)>,
    /// The API the server speaks: chat completions (`deepseek`, `openai-compatible`: the path
    /// `/chat/completions`, `Authorization: Bearer`) or Anthropic Messages (`anthropic`: the path
    /// `/v1/messages`, `x-api-key`, `anthropic-version: 2023-06-01` unless a header overrides
    /// it).
    pub kind: ProviderKind,
}

/// DeepSeek's public endpoint.
pub const DEFAULT_BASE_URL: &str = "https://api.deepseek.com";

impl DeepSeekConfig {
    /// A config that sends no key (a local server), with the default timers and retries.
    pub fn without_key(base_url: impl Into<String>) -> DeepSeekConfig {
        DeepSeekConfig {
            base_url: base_url.into(),
            api_key: None,
            data_timeout: Duration::from_secs(300),
            overall_timeout: Duration::from_secs(30 * 60),
            connect_timeout: Duration::from_secs(10),
            retry: RetryPolicy::default(),
            headers: Vec::new(),
            kind: ProviderKind::Deepseek,
        }
    }

    /// A config with default timers (data 300 s, overall 30 min, connect 10 s) and retries,
    /// that sends `api_key` with every request.
    pub fn new(base_url: impl Into<String>, api_key: ApiKey) -> DeepSeekConfig {
        DeepSeekConfig { api_key: Some(api_key), ..DeepSeekConfig::without_key(base_url) }
    }
}

#[cfg(test)]
mod tests;
