//! The configuration files as a running daemon holds them: the user's file and each workspace's,
//! each with its last good version; resolution per workspace (built in < user < workspace <
//! the daemon's flags); the endpoint of every profile, with its key; and live reload.
//!
//! Reload: a file is re-read whenever it changed (checked by its metadata on every resolution,
//! so the next request sees an edit even when no watch event came, and by a `notify` watcher
//! that reports a broken edit at once). A broken file — one that does not parse, or does not
//! resolve with the others — keeps its last good version; the error goes to `daemon/status`,
//! the daemon log and `daemon/notice` subscribers. A file that was never good fails what needs
//! it (creating a session in that workspace) with the error.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use dsh_agent::approval::ApprovalPolicy;
use dsh_agent::prompt::InstructionPolicy;
use dsh_agent::tools::WebSettings;
use dsh_agent::{ContextConfig, Endpoint};
use dsh_config::prompt_files::{self, Found};
use dsh_config::{Config, ConfigError, KeySource, Layer, Overrides, Profile};
use dsh_provider::{ApiKey, DeepSeek, DeepSeekConfig};
use dsh_session::{LlmCallConfig, ProviderKind};
use tokio::sync::broadcast;

/// The profile a call config names (logs from before profiles are DeepSeek's).
pub const LEGACY_PROFILE: &str = "deepseek";

/// What a file looked like when last read.
type Stamp = Option<(SystemTime, u64)>;

fn stamp(path: &Path) -> Stamp {
    let metadata = std::fs::metadata(path).ok()?;
    Some((metadata.modified().ok()?, metadata.len()))
}

/// One configuration file and its last good version.
#[derive(Debug)]
struct FileState {
    path: PathBuf,
    workspace: bool,
    /// `None` until first read.
    stamp: Option<Stamp>,
    good: Option<Layer>,
    /// Counts the changes of `good`: a resolution made at the same generations still holds.
    generation: u64,
    /// Why the file on disk is not the one in use.
    error: Option<ConfigError>,
}

impl FileState {
    fn new(path: PathBuf, workspace: bool) -> FileState {
        FileState { path, workspace, stamp: None, good: None, generation: 0, error: None }
    }

    /// Re-reads the file when it changed; `check` says whether a parsed version resolves.
    /// Returns the new error, if this read produced one.
    fn refresh(
        &mut self,
        check: impl FnOnce(Option<&Layer>) -> Result<(), ConfigError>,
    ) -> Option<ConfigError> {
        let now = stamp(&self.path);
        if self.stamp == Some(now) {
            return None;
        }
        let read = Layer::read(&self.path, self.workspace);
        self.apply(now, read, check)
    }

    /// Takes a version of the file read at `now` (by the caller, outside any lock).
    fn apply(
        &mut self,
        now: Stamp,
        read: Result<Option<Layer>, ConfigError>,
        check: impl FnOnce(Option<&Layer>) -> Result<(), ConfigError>,
    ) -> Option<ConfigError> {
        self.stamp = Some(now);
        match read.and_then(|layer| check(layer.as_ref()).map(|()| layer)) {
            Ok(layer) => {
                self.good = layer;
                self.generation += 1;
                self.error = None;
                None
            }
            Err(error) => {
                self.error = Some(error.clone());
                Some(error)
            }
        }
    }
}

/// A resolution and the generations (user's file, workspace's file) it was made from.
type Resolved = (u64, u64, Arc<Config>);

/// A notice for `daemon/notice` subscribers.
#[derive(Clone, Debug)]
pub struct Notice {
    /// `configError`, `configApplied`, `mcpWaiting` (a step waits for an MCP server to start)
    /// or `mcpFailed` (an MCP server failed; a restart follows).
    pub kind: &'static str,
    /// For people.
    pub message: String,
}

/// The daemon's configuration.
pub struct Settings {
    builtin: Layer,
    overrides: Overrides,
    user: Mutex<Option<FileState>>,
    workspaces: Mutex<HashMap<PathBuf, FileState>>,
    /// Keys handed over by the client that started the daemon (and, for variables it had none
    /// for, by later clients: `daemon/keys`), by variable name.
    handed: Mutex<HashMap<String, ApiKey>>,
    /// The directory of the legacy key file.
    key_home: PathBuf,
    /// Built clients, by everything that went into building them.
    clients: Mutex<HashMap<String, DeepSeek>>,
    notices: broadcast::Sender<Notice>,
    /// The last resolution per workspace, with the generations of the user's file and the
    /// workspace's it was made from: every step asks, few steps follow an edit.
    resolved: Mutex<HashMap<PathBuf, Resolved>>,
    /// The watcher of the configuration directories, once started.
    watcher: Mutex<Option<Watcher>>,
    /// Paths a workspace's configuration file is never read through (a link to them is
    /// refused like a missing-permission error): dsh's state and configuration, secrets.
    hidden: Vec<PathBuf>,
}

/// The debounced watcher and the directories it watches.
struct Watcher {
    debouncer: notify_debouncer_full::Debouncer<
        notify::RecommendedWatcher,
        notify_debouncer_full::RecommendedCache,
    >,
    dirs: std::collections::HashSet<PathBuf>,
}

/// How long file events settle before the files are read again.
const DEBOUNCE: std::time::Duration = std::time::Duration::from_millis(200);

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings").field("overrides", &self.overrides).finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Settings {
    /// Settings from the user's file (`None`: built-in defaults only) and the daemon's flags.
    /// A user file that cannot be used is an error here: the daemon does not start on it.
    pub fn new(
        user_file: Option<PathBuf>,
        overrides: Overrides,
        handed: HashMap<String, ApiKey>,
        key_home: PathBuf,
    ) -> Result<Settings, ConfigError> {
        let settings = Settings {
            builtin: dsh_config::builtin(),
            overrides,
            user: Mutex::new(user_file.map(|path| FileState::new(path, false))),
            workspaces: Mutex::new(HashMap::new()),
            handed: Mutex::new(handed),
            key_home,
            clients: Mutex::new(HashMap::new()),
            notices: broadcast::channel(64).0,
            watcher: Mutex::new(None),
            resolved: Mutex::new(HashMap::new()),
            hidden: Vec::new(),
        };
        if let Some(error) = settings.refresh_user() {
            return Err(error);
        }
        // The built-in layer with the user's file and the flags must resolve on their own.
        settings.resolve_layers(None)?;
        Ok(settings)
    }

    /// Starts watching the configuration directories (the user's, and each workspace's
    /// `.dsh` as workspaces are used): an edit is read again at once, and a broken one reported.
    /// Without a watcher (the system's watch limit reached) the next request still reads an
    /// edited file, by its metadata.
    pub fn watch(settings: &Arc<Settings>) {
        let weak = Arc::downgrade(settings);
        let handler = move |result: notify_debouncer_full::DebounceEventResult| {
            if result.is_ok()
                && let Some(settings) = weak.upgrade()
            {
                settings.refresh_all();
            }
        };
        match notify_debouncer_full::new_debouncer(DEBOUNCE, None, handler) {
            Ok(debouncer) => {
                *lock(&settings.watcher) =
                    Some(Watcher { debouncer, dirs: std::collections::HashSet::new() });
                let user_dir = lock(&settings.user)
                    .as_ref()
                    .and_then(|file| file.path.parent().map(Path::to_path_buf));
                if let Some(dir) = user_dir {
                    settings.watch_dir(&dir);
                }
            }
            Err(error) => {
                tracing::warn!(
                    "configuration files are not watched ({error}); edits apply at the next request"
                );
            }
        }
    }

    /// Adds a directory to the watch, once; a directory that does not exist is skipped.
    fn watch_dir(&self, dir: &Path) {
        let mut watcher = lock(&self.watcher);
        let Some(watcher) = watcher.as_mut() else { return };
        if watcher.dirs.contains(dir) || !dir.is_dir() {
            return;
        }
        match watcher.debouncer.watch(dir, notify::RecursiveMode::NonRecursive) {
            Ok(()) => {
                watcher.dirs.insert(dir.to_path_buf());
            }
            Err(error) => tracing::warn!(
                "not watching {} ({error}); its configuration applies at the next request",
                dir.display()
            ),
        }
    }

    /// The configuration without any workspace's file: built in, the user's file, the flags.
    pub fn base_config(&self) -> Result<Config, ConfigError> {
        if let Some(error) = self.refresh_user() {
            self.report(&error);
        }
        self.resolve_layers(None)
    }

    /// The configuration files in use.
    pub fn files(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = lock(&self.user).iter().map(|f| f.path.clone()).collect();
        files.extend(lock(&self.workspaces).values().map(|f| f.path.clone()));
        files
    }

    /// The errors of files whose last good version is in use (or that have none).
    pub fn errors(&self) -> Vec<String> {
        let user = lock(&self.user).iter().filter_map(|f| f.error.clone()).collect::<Vec<_>>();
        let workspaces = lock(&self.workspaces);
        let mut errors: Vec<String> = user.iter().map(ToString::to_string).collect();
        let mut workspace_errors: Vec<String> =
            workspaces.values().filter_map(|f| f.error.as_ref()).map(ToString::to_string).collect();
        workspace_errors.sort();
        errors.extend(workspace_errors);
        errors
    }

    /// Notices for `daemon/notice` subscribers.
    pub fn subscribe(&self) -> broadcast::Receiver<Notice> {
        self.notices.subscribe()
    }

    /// Tells `daemon/notice` subscribers something they should see now.
    pub fn notice(&self, kind: &'static str, message: String) {
        let _ = self.notices.send(Notice { kind, message });
    }

    fn report(&self, error: &ConfigError) {
        tracing::warn!("configuration: {error}; the last good configuration stays in use");
        let message = format!("{error} (the last good configuration stays in use)");
        let _ = self.notices.send(Notice { kind: "configError", message });
    }

    fn refresh_user(&self) -> Option<ConfigError> {
        let builtin = &self.builtin;
        let overrides = &self.overrides;
        let mut user = lock(&self.user);
        let file = user.as_mut()?;
        file.refresh(|layer| {
            let layers: Vec<&Layer> = std::iter::once(builtin).chain(layer).collect();
            dsh_config::resolve(&layers, overrides).and_then(|config| check_hooks(&config))
        })
    }

    /// The same, never reading a workspace's configuration through a link into `hidden`.
    pub fn with_hidden(mut self, hidden: Vec<PathBuf>) -> Settings {
        self.hidden = hidden;
        self
    }

    /// Reads a workspace's configuration file beneath the workspace's handle: a link out of
    /// the workspace or into a hidden path is refused, a FIFO or device is not waited on.
    fn read_workspace_file(
        &self,
        workspace: &Path,
        path: &Path,
    ) -> Result<Option<Layer>, ConfigError> {
        use dsh_sandbox::beneath::{Beneath, BeneathError};
        let refused =
            |message: String| ConfigError { location: path.display().to_string(), message };
        let relative = path.strip_prefix(workspace).unwrap_or(path);
        let read = Beneath::open(workspace, self.hidden.clone())
            .map_err(BeneathError::Io)
            .and_then(|beneath| beneath.read(relative, dsh_config::MAX_FILE_BYTES));
        match read {
            Ok(bytes) => match String::from_utf8(bytes) {
                Ok(text) => Layer::parse(&text, Some(path), true).map(Some),
                Err(_) => Err(refused("cannot read: not UTF-8 text".to_owned())),
            },
            Err(BeneathError::NotFound) => Ok(None),
            Err(error) => Err(refused(format!("cannot read: {error}"))),
        }
    }

    /// Re-reads every file that changed (the watcher calls it); reports new errors.
    pub fn refresh_all(&self) {
        if let Some(error) = self.refresh_user() {
            self.report(&error);
        }
        let roots: Vec<PathBuf> = lock(&self.workspaces).keys().cloned().collect();
        for root in roots {
            // Errors are reported as they are found; a workspace whose file was never good
            // has nothing to keep.
            let _ = self.config(&root);
        }
    }

    /// The user's dsh directory: the one holding the user's configuration file (by default
    /// `$XDG_CONFIG_HOME/dsh`), where the global `AGENTS.md`, skills and commands live.
    pub fn user_dir(&self) -> Option<PathBuf> {
        lock(&self.user).as_ref().and_then(|file| file.path.parent().map(Path::to_path_buf))
    }

    /// The skills found now for `workspace` (`docs/skills.md`): the user's, then the
    /// workspace's, read beneath its root (never through a hidden path).
    pub fn skills(&self, workspace: &Path) -> Found<prompt_files::Skill> {
        let beneath = dsh_sandbox::beneath::Beneath::open(workspace, self.hidden.clone()).ok();
        prompt_files::find_skills(self.user_dir().as_deref(), beneath.as_ref())
    }

    /// The prompt commands found now for `workspace`, in the same places' order.
    pub fn commands(&self, workspace: &Path) -> Found<prompt_files::Command> {
        let beneath = dsh_sandbox::beneath::Beneath::open(workspace, self.hidden.clone()).ok();
        prompt_files::find_commands(self.user_dir().as_deref(), beneath.as_ref())
    }

    /// The layers below a workspace's file, resolved with `workspace` on top.
    fn resolve_layers(&self, workspace: Option<&Layer>) -> Result<Config, ConfigError> {
        let user = lock(&self.user);
        let user_layer = user.as_ref().and_then(|f| f.good.as_ref());
        let layers: Vec<&Layer> =
            std::iter::once(&self.builtin).chain(user_layer).chain(workspace).collect();
        dsh_config::resolve(&layers, &self.overrides)
    }

    /// The configuration for sessions in `workspace`, from the files as they are now (or
    /// their last good versions).
    pub fn config(&self, workspace: &Path) -> Result<Arc<Config>, ConfigError> {
        if let Some(error) = self.refresh_user() {
            self.report(&error);
        }
        if let Some(dir) = dsh_config::workspace_file(workspace).parent() {
            self.watch_dir(dir);
        }
        // A workspace's file is one a command can replace (by a FIFO, a huge file): it is read
        // with no lock held, so a slow or refused read never stalls other workspaces.
        let path = dsh_config::workspace_file(workspace);
        let now = stamp(&path);
        let stale =
            lock(&self.workspaces).get(workspace).is_none_or(|file| file.stamp != Some(now));
        let read = stale.then(|| self.read_workspace_file(workspace, &path));
        let (layer, workspace_generation) = {
            // Lock order: workspaces, then user (inside `resolve_layers`).
            let mut workspaces = lock(&self.workspaces);
            let file = workspaces
                .entry(workspace.to_path_buf())
                .or_insert_with(|| FileState::new(path.clone(), true));
            // Applied only if the file is still as read: of two reads racing, the older one
            // never lands after the newer.
            let error = match read {
                Some(read) if file.stamp != Some(now) && stamp(&path) == now => {
                    file.apply(now, read, |layer| {
                        self.resolve_layers(layer).and_then(|config| check_hooks(&config))
                    })
                }
                _ => None,
            };
            if let Some(error) = error {
                self.report(&error);
            }
            match &file.error {
                // Never good (no version read well, not even "no file"): what needs it fails
                // with the error. Otherwise the last good version — possibly no file at all —
                // stays in use.
                Some(error) if file.generation == 0 => return Err(error.clone()),
                _ => (file.good.clone(), file.generation),
            }
        };
        let user_generation = lock(&self.user).as_ref().map_or(0, |file| file.generation);
        if let Some((user, workspace, config)) = lock(&self.resolved).get(workspace)
            && (*user, *workspace) == (user_generation, workspace_generation)
        {
            return Ok(Arc::clone(config));
        }
        let config = Arc::new(self.resolve_layers(layer.as_ref())?);
        lock(&self.resolved).insert(
            workspace.to_path_buf(),
            (user_generation, workspace_generation, Arc::clone(&config)),
        );
        Ok(config)
    }

    /// Where new sessions on the default profile send their requests when they name no base URL
    /// (`dsh serve --base-url`): pinned per session, never a profile's.
    pub fn default_base_url(&self) -> Option<&str> {
        self.overrides.base_url.as_ref().map(|url| url.value.as_str())
    }

    /// Takes the keys a client hands over for the variables this daemon has no key for (neither
    /// handed over nor in its environment); a key it has is kept. Returns the variables taken and
    /// kept, or what is wrong with one (its name, never its value).
    pub fn hand_keys(
        &self,
        keys: std::collections::BTreeMap<String, String>,
    ) -> Result<(Vec<String>, Vec<String>), String> {
        const MAX_KEYS: usize = 32;
        if keys.len() > MAX_KEYS {
            return Err(format!("at most {MAX_KEYS} keys at once"));
        }
        let mut checked = Vec::new();
        for (variable, value) in keys {
            let valid_name = !variable.is_empty()
                && variable.len() <= 128
                && !variable.starts_with(|c: char| c.is_ascii_digit())
                && variable.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid_name {
                return Err(format!("`{variable}` is not an environment variable's name"));
            }
            let key = ApiKey::new(value)
                .map_err(|error| format!("the key of {variable} cannot be used: {error}"))?;
            checked.push((variable, key));
        }
        let (mut taken, mut kept) = (Vec::new(), Vec::new());
        let mut handed = lock(&self.handed);
        for (variable, key) in checked {
            let in_environment =
                std::env::var(&variable).is_ok_and(|value| !value.trim().is_empty());
            if in_environment || handed.contains_key(&variable) {
                kept.push(variable);
            } else {
                handed.insert(variable.clone(), key);
                taken.push(variable);
            }
        }
        Ok((taken, kept))
    }

    /// The key of a profile, from where its configuration says it is.
    fn key(&self, profile: &Profile) -> Result<Option<ApiKey>, String> {
        let name = &profile.name;
        match profile.key.as_ref().map(|key| &key.value) {
            None => Ok(None),
            Some(KeySource::Env(variable)) => {
                if let Some(key) = lock(&self.handed).get(variable) {
                    return Ok(Some(key.clone()));
                }
                if let Some(value) = std::env::var(variable).ok().filter(|v| !v.trim().is_empty()) {
                    return ApiKey::new(value).map(Some).map_err(|e| e.to_string());
                }
                let legacy = dsh_store::DshHome::new(&self.key_home).legacy_key_file();
                if profile.kind.value == ProviderKind::Deepseek && legacy.exists() {
                    return ApiKey::from_file(&legacy).map(Some).map_err(|e| e.to_string());
                }
                let hint = if profile.kind.value == ProviderKind::Deepseek {
                    format!(
                        ", or write the key to {} with mode 0600 (for the offline mock from `dsh \
                         mock`, use {variable}=sk-test)",
                        legacy.display()
                    )
                } else {
                    String::new()
                };
                Err(format!("no API key for profile `{name}`: set {variable}{hint}"))
            }
            Some(KeySource::File(path)) => ApiKey::from_file(path)
                .map(Some)
                .map_err(|error| format!("profile `{name}`: {error}")),
        }
    }

    /// The endpoint of `call`'s profile and model for a session in `workspace`.
    pub fn endpoint(&self, workspace: &Path, call: &LlmCallConfig) -> Result<Endpoint, String> {
        let config = self.config(workspace).map_err(|e| format!("configuration: {e}"))?;
        let name = call.profile.as_deref().unwrap_or(LEGACY_PROFILE);
        let profile = config.profile(name).map_err(|_| {
            format!(
                "the session is pinned to provider profile `{name}`, which the configuration \
                 no longer has (configured: {})",
                config.profiles.keys().cloned().collect::<Vec<_>>().join(", ")
            )
        })?;
        let profile = profile.as_ref();
        let key = self.key(profile)?;
        let client = self.client(profile, key)?;
        let context = config.context.auto.value.then(|| {
            let window = config.context.window.as_ref().map(|w| w.value).or_else(|| {
                profile.model_settings(&call.model)?.context_window.as_ref().map(|w| w.value)
            });
            let mut context = match window {
                Some(window) => ContextConfig::with_window(window),
                None => ContextConfig::for_model(&call.model),
            };
            context.trim_at = config.context.trim_at.value;
            context.compact_at = config.context.compact_at.value;
            context
        });
        Ok(Endpoint {
            label: format!("profile {name}, {}", client.url()),
            client,
            wire: profile.wire(),
            context,
            approvals: Some(approval_policy(&config)),
            user_approvals: self.resolve_layers(None).ok().as_ref().map(approval_policy),
            instruction_files: Some(config.instructions.files.value.clone()),
            instruction_policy: Some(match config.instructions.on_edit.value.as_str() {
                "rewrite" => InstructionPolicy::Rewrite,
                _ => InstructionPolicy::Append,
            }),
            web: Some(web_settings(&config)),
            user_dir: self.user_dir(),
            skills: self.skills(workspace).items,
            // As the usage view prices a step (`views::price_of`).
            price: profile.price(&call.model).cloned(),
            images: profile.images(&call.model),
            max_images: profile.max_images(&call.model),
        })
    }

    /// A client for `profile`, reused while nothing that built it changed.
    fn client(&self, profile: &Profile, key: Option<ApiKey>) -> Result<DeepSeek, String> {
        let mut config = DeepSeekConfig::without_key(profile.base_url.value.clone());
        config.api_key = key;
        config.kind = profile.kind.value;
        config.connect_timeout = profile.connect_timeout.value;
        config.data_timeout = profile.data_timeout.value;
        config.overall_timeout = profile.overall_timeout.value;
        config.headers = profile
            .headers
            .iter()
            .map(|(name, value)| (name.clone(), value.value.clone()))
            .collect();
        // What built the client (the key as a digest); it never leaves this map.
        let fingerprint = format!(
            "{}\u{0}{}\u{0}{:?}\u{0}{:?}\u{0}{:?}\u{0}{:?}\u{0}{:?}",
            config.kind,
            config.base_url,
            config.api_key.as_ref().map(ApiKey::digest),
            config.headers,
            config.connect_timeout,
            config.data_timeout,
            config.overall_timeout,
        );
        let mut clients = lock(&self.clients);
        if let Some(client) = clients.get(&fingerprint) {
            return Ok(client.clone());
        }
        let client = DeepSeek::new(config)
            .map_err(|error| format!("profile `{}`: {error}", profile.name))?;
        clients.insert(fingerprint, client.clone());
        Ok(client)
    }
}

/// What `web_fetch` is held to under a configuration (`[web]`).
fn web_settings(config: &Config) -> WebSettings {
    let web = &config.web;
    WebSettings {
        allow_offline: web.allow.value,
        allow_hosts: web.allow_hosts.value.clone(),
        timeout: Duration::from_secs(web.timeout_secs.value),
        max_bytes: web.max_bytes.value,
        ..WebSettings::default()
    }
}

/// The approval policy a configuration gives: classes (`read`, `write`, `command`) and tools.
/// A file is taken only if every hook it leaves enabled names a program this user can run
/// (docs/hooks.md): a guard that cannot run is an error at load, never a silent pass.
fn check_hooks(config: &Config) -> Result<(), ConfigError> {
    let home = std::env::var_os("HOME").map(PathBuf::from).filter(|home| home.is_absolute());
    config.check_hook_commands(home.as_deref())
}

fn approval_policy(config: &Config) -> ApprovalPolicy {
    let mut policy = ApprovalPolicy::default();
    for (name, approval) in &config.approvals {
        let value = approval.value;
        match name.as_str() {
            "read" => policy.read = value,
            "write" => policy.write = value,
            "command" => policy.command = value,
            "web" => policy.web = value,
            "mcp" => policy.mcp = Some(value),
            tool => {
                policy.per_tool.insert(tool.to_owned(), value);
            }
        }
    }
    policy
}
