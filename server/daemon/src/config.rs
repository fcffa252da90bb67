//! What a daemon is started with: the state directory, how to reach the provider, the default
//! model, approval and invariant settings, the command sandbox. Fronts build a
//! [`DaemonConfig`] from their flags and environment; the daemon never reads flags itself.
//!
//! The provider's key comes from a source named here — handed over by the client that starts
//! the daemon ([`DaemonConfig::with_key`], over a pipe: see `client.rs`), `DEEPSEEK_API_KEY`, or
//! the key file — and is never put into any environment: commands get one built by the
//! sandbox.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use dsh_provider::{ApiKey, DeepSeek, DeepSeekConfig};

pub use dsh_provider::{API_KEY_ENV, DEFAULT_BASE_URL};
pub use dsh_sandbox::{Feature, SandboxConfig, SandboxPolicy};
pub use dsh_store::DshHome;

/// The model used when neither `--model` nor `DSH_MODEL` says otherwise.
pub const DEFAULT_MODEL: &str = "deepseek-v4-flash";

/// The file, under the state directory, that may hold the API key (mode 0600).
pub const API_KEY_FILE: &str = "deepseek-api-key";

/// How long an approval waits for an answer by default before it is denied as a timeout.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(300);

/// How the daemon reaches the provider: built on first use, so the daemon starts (and serves
/// every read method) without an API key.
pub type ProviderFactory = Box<dyn Fn() -> anyhow::Result<Arc<DeepSeek>> + Send + Sync>;

/// Daemon-wide settings.
pub struct DaemonConfig {
    /// The state directory.
    pub home: DshHome,
    /// Builds the provider client.
    pub provider: ProviderFactory,
    /// The provider base URL (reported by `daemon/status`).
    pub base_url: String,
    /// Model for sessions created without one.
    pub default_model: String,
    /// An approval nobody answers within this is denied (and logged as a timeout).
    pub approval_timeout: Duration,
    /// Rebuild every request from the log at dispatch and compare.
    pub check_invariants: bool,
    /// Run every tool call without asking (the offline demo); otherwise reads run, writes and
    /// commands ask.
    pub auto_approve: bool,
    /// A loaded session nothing uses is unloaded after this long (it reloads when named again).
    pub unload_after: Duration,
    /// While the logs of the loaded sessions add up to more than this, idle ones are unloaded,
    /// least recently used first.
    pub loaded_budget_bytes: u64,
    /// The command sandbox's policy.
    pub sandbox: SandboxConfig,
    /// The program that runs `sandbox-exec` (the `dsh` binary: `/proc/self/exe` when the
    /// daemon runs in it); without one, commands cannot be confined and the sandbox says so.
    pub sandbox_helper: Option<PathBuf>,
}

/// Idle sessions are unloaded after this long by default.
pub const DEFAULT_UNLOAD_AFTER: Duration = Duration::from_secs(10 * 60);
/// The default budget of loaded log bytes.
pub const DEFAULT_LOADED_BUDGET_BYTES: u64 = 512 * 1024 * 1024;

impl DaemonConfig {
    /// A daemon for `home` whose provider is the DeepSeek API at `base_url`, with the key from
    /// `DEEPSEEK_API_KEY` or the key file ([`api_key`]).
    pub fn new(home: DshHome, base_url: String, default_model: String) -> DaemonConfig {
        let key_home = home.root().to_path_buf();
        let provider_url = base_url.clone();
        DaemonConfig {
            home,
            provider: Box::new(move || {
                let config = DeepSeekConfig::new(provider_url.clone(), api_key(&key_home)?);
                Ok(Arc::new(DeepSeek::new(config)?))
            }),
            base_url,
            default_model,
            approval_timeout: DEFAULT_APPROVAL_TIMEOUT,
            check_invariants: false,
            auto_approve: false,
            unload_after: DEFAULT_UNLOAD_AFTER,
            loaded_budget_bytes: DEFAULT_LOADED_BUDGET_BYTES,
            sandbox: SandboxConfig::default(),
            sandbox_helper: None,
        }
    }

    /// The paths no command may see: the state directory (the key file, the logs, the
    /// daemon's socket) and the configuration directory.
    pub fn hidden_paths(&self) -> Vec<PathBuf> {
        let mut hidden = vec![self.home.root().to_path_buf()];
        hidden.extend(config_dir());
        hidden
    }

    /// A daemon whose provider uses the given key (the offline demo's mock, tests).
    pub fn with_key(mut self, key: &str) -> anyhow::Result<DaemonConfig> {
        let key = ApiKey::new(key)?;
        let base_url = self.base_url.clone();
        self.provider = Box::new(move || {
            let config = DeepSeekConfig::new(base_url.clone(), key.clone());
            Ok(Arc::new(DeepSeek::new(config)?))
        });
        Ok(self)
    }
}

/// The API key: `DEEPSEEK_API_KEY`, else `<home>/deepseek-api-key` (which must be 0600).
pub fn api_key(home: &Path) -> anyhow::Result<ApiKey> {
    if std::env::var_os(API_KEY_ENV).is_some_and(|v| !v.is_empty()) {
        return Ok(ApiKey::from_env()?);
    }
    let file = home.join(API_KEY_FILE);
    if file.exists() {
        return Ok(ApiKey::from_file(&file)?);
    }
    bail!(
        "no API key: set {API_KEY_ENV}, or write the key to {} with mode 0600 \
         (for the offline mock from `dsh mock`, use {API_KEY_ENV}=sk-test)",
        file.display()
    )
}

/// dsh's configuration directory: `$XDG_CONFIG_HOME/dsh`, else `~/.config/dsh` (hidden from
/// commands whether it exists yet or not).
pub fn config_dir() -> Option<PathBuf> {
    let absolute = |value: std::ffi::OsString| {
        let path = PathBuf::from(value);
        path.is_absolute().then_some(path)
    };
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .and_then(absolute)
        .or_else(|| std::env::var_os("HOME").and_then(absolute).map(|home| home.join(".config")))?;
    Some(base.join("dsh"))
}
