//! Resolving what a command needs from flags and the environment: the state directory, the
//! provider's base URL, the model. The API key is the daemon's business (`dsh_daemon::config`).

use std::path::{Path, PathBuf};

use anyhow::Context;
use dsh_daemon::DaemonConfig;
use dsh_daemon::config::{DEFAULT_BASE_URL, DEFAULT_MODEL, DshHome};

use crate::args::Global;

/// Resolved global settings.
#[derive(Debug)]
pub struct Settings {
    /// The state directory.
    pub home: DshHome,
    /// Provider base URL.
    pub base_url: String,
    /// Whether the base URL was given (`--base-url` or `DEEPSEEK_BASE_URL`).
    pub base_url_explicit: bool,
    /// Model id.
    pub model: String,
    /// Whether `--model` (or `DSH_MODEL`) was given explicitly.
    pub model_explicit: bool,
    /// JSON output.
    pub json: bool,
}

impl Settings {
    /// Resolves flags and environment.
    pub fn resolve(global: &Global) -> anyhow::Result<Settings> {
        let home =
            DshHome::from_env(global.home.as_deref()).context("resolving the state directory")?;
        let given = global
            .base_url
            .clone()
            .or_else(|| std::env::var("DEEPSEEK_BASE_URL").ok().filter(|v| !v.is_empty()));
        let base_url_explicit = given.is_some();
        let base_url = given.unwrap_or_else(|| DEFAULT_BASE_URL.to_owned());
        let env_model = std::env::var("DSH_MODEL").ok().filter(|v| !v.is_empty());
        let model_explicit = global.model.is_some() || env_model.is_some();
        let model = global.model.clone().or(env_model).unwrap_or_else(|| DEFAULT_MODEL.to_owned());
        Ok(Settings { home, base_url, base_url_explicit, model, model_explicit, json: global.json })
    }

    /// The configuration of a daemon started from these settings.
    pub fn daemon_config(&self) -> DaemonConfig {
        DaemonConfig::new(self.home.clone(), self.base_url.clone(), self.model.clone())
    }
}

/// The current directory, or `explicit`.
pub fn workspace_dir(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    match explicit {
        Some(path) => Ok(path.to_path_buf()),
        None => std::env::current_dir().context("reading the current directory"),
    }
}
