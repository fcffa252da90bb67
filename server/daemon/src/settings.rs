//! Resolving what a command needs from flags and the environment: the state directory, the
//! provider (base URL, API key), the model.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use dsh_provider::{API_KEY_ENV, ApiKey, DEFAULT_BASE_URL, DeepSeek, DeepSeekConfig};
use dsh_store::{DshHome, SessionId};

use crate::cli::Global;

/// The model used when neither `--model` nor `DSH_MODEL` says otherwise.
pub const DEFAULT_MODEL: &str = "deepseek-v4-flash";

/// The file, under the state directory, that may hold the API key (mode 0600).
pub const API_KEY_FILE: &str = "deepseek-api-key";

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

    /// The API key: `DEEPSEEK_API_KEY`, else `<home>/deepseek-api-key` (which must be 0600).
    pub fn api_key(&self) -> anyhow::Result<ApiKey> {
        if std::env::var_os(API_KEY_ENV).is_some_and(|v| !v.is_empty()) {
            return Ok(ApiKey::from_env()?);
        }
        let file = self.home.root().join(API_KEY_FILE);
        if file.exists() {
            return Ok(ApiKey::from_file(&file)?);
        }
        bail!(
            "no API key: set {API_KEY_ENV}, or write the key to {} with mode 0600 \
             (for the offline mock from `dsh mock`, use {API_KEY_ENV}=sk-test)",
            file.display()
        )
    }

    /// The DeepSeek client.
    pub fn provider(&self) -> anyhow::Result<Arc<DeepSeek>> {
        let config = DeepSeekConfig::new(self.base_url.clone(), self.api_key()?);
        Ok(Arc::new(DeepSeek::new(config)?))
    }

    /// Finds a session's log file by id across the workspaces of the home.
    pub fn session_path(&self, id: &str) -> anyhow::Result<PathBuf> {
        let id = SessionId::parse(id)?;
        Ok(self.home.find_session(&id)?)
    }
}

/// The current directory, or `explicit`.
pub fn workspace_dir(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    match explicit {
        Some(path) => Ok(path.to_path_buf()),
        None => std::env::current_dir().context("reading the current directory"),
    }
}
