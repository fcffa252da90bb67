//! Resolving what a command needs from flags and the environment: the state directory, the
//! provider profile, model and base URL that beat the configuration files, the user's
//! configuration file, the command sandbox. Keys are the daemon's business (`dsh_daemon`), read
//! from where the configuration says.

use std::path::{Path, PathBuf};

use anyhow::Context;
use dsh_config::{Overrides, Source, Sourced};
use dsh_daemon::DaemonConfig;
use dsh_daemon::startup::{API_KEY_ENV, DshHome, Feature, SandboxConfig, SandboxPolicy};

use crate::args::Global;

/// The program a daemon in this process runs `sandbox-exec` with: this very binary, whatever
/// happens to the file it was started from.
pub const SANDBOX_HELPER: &str = "/proc/self/exe";

/// Resolved global settings.
#[derive(Debug)]
pub struct Settings {
    /// The state directory.
    pub home: DshHome,
    /// The default profile's base URL, when given (`--base-url`, `DEEPSEEK_BASE_URL`).
    pub base_url: Option<Sourced<String>>,
    /// The provider profile, when given (`--provider`, `DSH_PROVIDER`).
    pub provider: Option<Sourced<String>>,
    /// The model, when given (`--model`, `DSH_MODEL`).
    pub model: Option<Sourced<String>>,
    /// The user's configuration file (`$DSH_CONFIG`, else under the configuration directory).
    pub user_config: Option<PathBuf>,
    /// JSON output.
    pub json: bool,
    /// The command sandbox.
    pub sandbox: SandboxConfig,
    /// Whether any sandbox setting was given (flags or environment).
    pub sandbox_explicit: bool,
}

impl Settings {
    /// Resolves flags and environment.
    pub fn resolve(global: &Global) -> anyhow::Result<Settings> {
        let home =
            DshHome::from_env(global.home.as_deref()).context("resolving the state directory")?;
        let (sandbox, sandbox_explicit) = sandbox_config(global)?;
        Ok(Settings {
            home,
            base_url: given(&global.base_url, "--base-url", "DEEPSEEK_BASE_URL"),
            provider: given(&global.provider, "--provider", "DSH_PROVIDER"),
            model: given(&global.model, "--model", "DSH_MODEL"),
            user_config: dsh_config::user_file(dsh_daemon::startup::config_dir().as_deref()),
            json: global.json,
            sandbox,
            sandbox_explicit,
        })
    }

    /// The configuration of a daemon started from these settings (in this process, or as
    /// `dsh serve`): its commands are launched by this binary.
    pub fn daemon_config(&self) -> DaemonConfig {
        let mut config =
            DaemonConfig::new(self.home.clone(), self.user_config.clone(), self.overrides());
        config.sandbox = self.sandbox.clone();
        config.sandbox_helper = Some(PathBuf::from(SANDBOX_HELPER));
        config
    }

    /// What the flags and the environment say over the configuration files.
    pub fn overrides(&self) -> Overrides {
        Overrides {
            profile: self.provider.clone(),
            model: self.model.clone(),
            base_url: self.base_url.clone(),
        }
    }

    /// The session options these settings ask for: the profile, model and base URL, when given.
    pub fn session_config(&self) -> dsh_protocol::SessionConfig {
        dsh_protocol::SessionConfig {
            profile: self.provider.as_ref().map(|p| p.value.clone()),
            base_url: self.base_url.as_ref().map(|url| url.value.clone()),
            model: self.model.as_ref().map(|m| m.value.clone()),
            ..dsh_protocol::SessionConfig::default()
        }
    }

    /// The sandbox settings as flags, for a daemon this client starts.
    pub fn sandbox_args(&self) -> Vec<String> {
        let sandbox = &self.sandbox;
        let mut args = vec!["--sandbox".to_owned(), sandbox.policy.name().to_owned()];
        if sandbox.network {
            args.push("--sandbox-network".to_owned());
        }
        for feature in &sandbox.without {
            args.extend(["--sandbox-without".to_owned(), feature.name().to_owned()]);
        }
        for name in &sandbox.env {
            args.extend(["--sandbox-env".to_owned(), name.clone()]);
        }
        for path in &sandbox.read {
            args.extend(["--sandbox-read".to_owned(), path.display().to_string()]);
        }
        let limits = sandbox.limits;
        let text = dsh_sandbox::Limits::value_text;
        for limit in [
            format!("processes={}", limits.processes),
            format!("memory={}", text(limits.memory)),
            format!("file-size={}", text(limits.file_size)),
            format!("cpu={}", text(limits.cpu_seconds)),
        ] {
            args.extend(["--sandbox-limit".to_owned(), limit]);
        }
        args
    }
}

/// A setting from its flag, else from its environment variable (empty counts as unset).
fn given(flag: &Option<String>, flag_name: &str, variable: &str) -> Option<Sourced<String>> {
    if let Some(value) = flag {
        return Some(Sourced::new(value.clone(), Source::Flag(flag_name.to_owned())));
    }
    let value = std::env::var(variable).ok().filter(|value| !value.trim().is_empty())?;
    Some(Sourced::new(value, Source::Env(variable.to_owned())))
}

/// The sandbox settings: each from its flag, else from its environment variable
/// (`DSH_SANDBOX`, `DSH_SANDBOX_NETWORK`, `DSH_SANDBOX_WITHOUT`, `DSH_SANDBOX_ENV`,
/// `DSH_SANDBOX_READ`, `DSH_SANDBOX_LIMITS`); and whether any was given.
fn sandbox_config(global: &Global) -> anyhow::Result<(SandboxConfig, bool)> {
    let variable = |name: &str| std::env::var(name).ok().filter(|value| !value.trim().is_empty());
    let mut explicit = false;
    let mut config = SandboxConfig::default();
    if let Some(policy) = global.sandbox.clone().or_else(|| variable("DSH_SANDBOX")) {
        config.policy = policy.parse::<SandboxPolicy>()?;
        explicit = true;
    }
    let network_variable = variable("DSH_SANDBOX_NETWORK");
    if global.sandbox_network || network_variable.is_some() {
        config.network = global.sandbox_network
            || network_variable.is_some_and(|value| matches!(value.trim(), "1" | "true" | "yes"));
        explicit = true;
    }
    let list = |flags: &[String], name: &str| -> Vec<String> {
        if flags.is_empty() {
            variable(name)
                .map(|value| SandboxConfig::split_list(&value).map(str::to_owned).collect())
                .unwrap_or_default()
        } else {
            flags.to_vec()
        }
    };
    for feature in list(&global.sandbox_without, "DSH_SANDBOX_WITHOUT") {
        config.without.insert(feature.parse::<Feature>()?);
        explicit = true;
    }
    config.env = list(&global.sandbox_env, "DSH_SANDBOX_ENV");
    config.read = if global.sandbox_read.is_empty() {
        std::env::var_os("DSH_SANDBOX_READ")
            .map(|value| {
                std::env::split_paths(&value).filter(|p| !p.as_os_str().is_empty()).collect()
            })
            .unwrap_or_default()
    } else {
        global.sandbox_read.clone()
    };
    let limits = list(&global.sandbox_limit, "DSH_SANDBOX_LIMITS");
    for setting in &limits {
        config.limits.set(setting)?;
    }
    explicit |= !config.env.is_empty() || !config.read.is_empty() || !limits.is_empty();
    config.validate(&[API_KEY_ENV])?;
    Ok((config, explicit))
}

/// The current directory, or `explicit`.
pub fn workspace_dir(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    match explicit {
        Some(path) => Ok(path.to_path_buf()),
        None => std::env::current_dir().context("reading the current directory"),
    }
}
