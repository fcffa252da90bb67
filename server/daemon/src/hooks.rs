//! The user's hooks as a session's loop asks for them (the agent's `HookSource`): the
//! workspace's configuration now (so an edit of the user's file applies at the next point a
//! hook could run; a broken edit keeps the last good version), each enabled hook's program
//! resolved, and the variables that may hold a provider key — every profile's `api_key_env`
//! and DeepSeek's — named for removal from its environment (the daemon's own environment holds
//! none when a client started it, but one started by hand may).

use std::path::PathBuf;
use std::sync::Arc;

use dsh_agent::hooks::{HookSet, HookSource, HookSpec};
use dsh_config::{Config, KeySource};

use crate::settings::Settings;

/// One session's hooks: its workspace's configuration.
pub(crate) struct Seam {
    pub(crate) settings: Arc<Settings>,
    pub(crate) workspace: PathBuf,
}

impl HookSource for Seam {
    fn hooks(&self) -> Arc<HookSet> {
        match self.settings.config(&self.workspace) {
            Ok(config) => Arc::new(hook_set(&config)),
            Err(error) => {
                // Never good: no session could have been created; say it and run none.
                tracing::warn!(%error, "the configuration cannot be used: no hooks run");
                Arc::new(HookSet::default())
            }
        }
    }
}

/// The hooks `config` enables, as the loop runs them.
pub(crate) fn hook_set(config: &Config) -> HookSet {
    let home = std::env::var_os("HOME").map(PathBuf::from).filter(|home| home.is_absolute());
    let hooks = config
        .hooks
        .iter()
        .filter(|hook| hook.enabled.value)
        .map(|hook| HookSpec {
            name: hook.name.clone(),
            source: hook.source.to_string(),
            event: hook.event,
            // Checked when the configuration was loaded.
            matcher: hook.matcher.as_deref().and_then(|m| dsh_config::matcher_regex(m).ok()),
            // A command that no longer resolves fails its runs, saying why.
            program: hook.program(home.as_deref()).unwrap_or_else(|_| PathBuf::from(&hook.command)),
            args: hook.args.clone(),
            timeout: hook.timeout.value,
        })
        .collect();
    let mut env_remove = vec![dsh_provider::API_KEY_ENV.to_owned()];
    for profile in config.profiles.values() {
        if let Some(KeySource::Env(variable)) = profile.key.as_ref().map(|key| &key.value)
            && !env_remove.contains(variable)
        {
            env_remove.push(variable.clone());
        }
    }
    HookSet { hooks, env_remove }
}
