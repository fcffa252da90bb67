//! What a daemon is started with: the state directory, its configuration (the user's file and
//! the flags that beat it: see `settings.rs` and `dsh-config`), approval and invariant settings,
//! the command sandbox. Fronts build a [`DaemonConfig`] from their flags and environment; the
//! daemon never reads flags itself.
//!
//! Provider keys come from the sources the configuration names — handed over by the client that
//! starts the daemon ([`DaemonConfig::with_key`], over a pipe: see `client.rs`), the variable
//! itself, or a key file — and are never put into any environment: commands get one built by
//! the sandbox.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use dsh_config::{Overrides, Source, Sourced};
use dsh_provider::ApiKey;

pub use dsh_provider::{API_KEY_ENV, DEFAULT_BASE_URL};
pub use dsh_sandbox::{Feature, SandboxConfig, SandboxPolicy};
pub use dsh_store::DshHome;

/// The model of new sessions when nothing configures another (the built-in DeepSeek profile's).
pub const DEFAULT_MODEL: &str = "deepseek-v4-flash";

/// How long an approval waits for an answer by default before it is denied as a timeout.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(300);

/// Daemon-wide settings.
pub struct DaemonConfig {
    /// The state directory.
    pub home: DshHome,
    /// The user's configuration file (`None`: the built-in defaults only, as in the demo).
    pub user_config: Option<PathBuf>,
    /// What the daemon's flags say; they beat every file.
    pub overrides: Overrides,
    /// Provider keys handed over by the client that started the daemon, by variable name.
    pub keys: HashMap<String, ApiKey>,
    /// An approval nobody answers within this is denied (and logged as a timeout).
    pub approval_timeout: Duration,
    /// Rebuild every request from the log at dispatch and compare.
    pub check_invariants: bool,
    /// Run every tool call without asking (the offline demo); otherwise the configured
    /// approval policy (by default reads run, writes and commands ask).
    pub auto_approve: bool,
    /// A loaded session nothing uses is unloaded after this long (it reloads when named again).
    pub unload_after: Duration,
    /// While the loaded sessions weigh more than this together (their logs and the request
    /// bodies they hold), idle ones are unloaded, least recently used first.
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
    /// A daemon for `home` with the user's configuration file (`user_config`) under `overrides`.
    pub fn new(home: DshHome, user_config: Option<PathBuf>, overrides: Overrides) -> DaemonConfig {
        DaemonConfig {
            home,
            user_config,
            overrides,
            keys: HashMap::new(),
            approval_timeout: DEFAULT_APPROVAL_TIMEOUT,
            check_invariants: false,
            auto_approve: false,
            unload_after: DEFAULT_UNLOAD_AFTER,
            loaded_budget_bytes: DEFAULT_LOADED_BUDGET_BYTES,
            sandbox: SandboxConfig::default(),
            sandbox_helper: None,
        }
    }

    /// A daemon on the built-in configuration only, its DeepSeek profile at `base_url` (the
    /// offline demo's mock, tests).
    pub fn builtin(home: DshHome, base_url: String) -> DaemonConfig {
        let overrides = Overrides {
            base_url: Some(Sourced::new(base_url, Source::Flag("--base-url".to_owned()))),
            ..Overrides::default()
        };
        DaemonConfig::new(home, None, overrides)
    }

    /// The paths no command may see: the state directory (the key file, the logs, the
    /// daemon's socket), the configuration directory and the user's configuration file.
    pub fn hidden_paths(&self) -> Vec<PathBuf> {
        let mut hidden = vec![self.home.root().to_path_buf()];
        hidden.extend(config_dir());
        hidden.extend(self.user_config.iter().cloned());
        hidden
    }

    /// The same daemon with `key` handed over for `DEEPSEEK_API_KEY` (the demo, tests).
    pub fn with_key(self, key: &str) -> anyhow::Result<DaemonConfig> {
        self.with_keys([(API_KEY_ENV.to_owned(), key.to_owned())])
    }

    /// The same daemon with keys handed over, by the variable a profile names.
    pub fn with_keys(
        mut self,
        keys: impl IntoIterator<Item = (String, String)>,
    ) -> anyhow::Result<DaemonConfig> {
        for (variable, key) in keys {
            self.keys.insert(variable, ApiKey::new(key)?);
        }
        Ok(self)
    }
}

/// The variables that may hold provider keys: every `api_key_env` of the built-in and the
/// user's configuration (a workspace's file cannot name one). A user file that does not parse
/// adds none (the daemon reports it when it starts).
pub fn key_variables(user_config: Option<&Path>) -> Vec<String> {
    let mut layers = vec![dsh_config::builtin()];
    if let Some(Ok(Some(layer))) = user_config.map(|path| dsh_config::Layer::read(path, false)) {
        layers.push(layer);
    }
    let mut variables = vec![API_KEY_ENV.to_owned()];
    let layer_refs: Vec<&dsh_config::Layer> = layers.iter().collect();
    if let Ok(config) = dsh_config::resolve(&layer_refs, &Overrides::default()) {
        for profile in config.profiles.values() {
            if let Some(Sourced { value: dsh_config::KeySource::Env(variable), .. }) = &profile.key
                && !variables.contains(variable)
            {
                variables.push(variable.clone());
            }
        }
    }
    variables
}

/// The keys among `variables` that this process's environment holds.
pub fn keys_in_environment(variables: &[String]) -> Vec<(String, String)> {
    variables
        .iter()
        .filter_map(|name| {
            let value = std::env::var(name).ok().filter(|value| !value.trim().is_empty())?;
            Some((name.clone(), value))
        })
        .collect()
}

/// Keys as a client hands them to the daemon it starts, on a pipe: one `NAME=VALUE` line each.
pub fn handover_text(keys: &[(String, String)]) -> String {
    keys.iter().map(|(name, value)| format!("{name}={}\n", value.trim())).collect()
}

/// Reads a handover: `NAME=VALUE` lines (a lone line without `=` is a DeepSeek key, as older
/// clients sent it).
pub fn parse_handover(text: &str) -> anyhow::Result<Vec<(String, String)>> {
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    if let [single] = lines.as_slice()
        && !single.contains('=')
    {
        return Ok(vec![(API_KEY_ENV.to_owned(), (*single).to_owned())]);
    }
    lines
        .iter()
        .map(|line| match line.split_once('=') {
            Some((name, value)) if !name.is_empty() && !value.is_empty() => {
                Ok((name.to_owned(), value.to_owned()))
            }
            // Never echo the line: it may be a key.
            _ => Err(anyhow::anyhow!("the key handover holds a line that is not NAME=VALUE")),
        })
        .collect()
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
