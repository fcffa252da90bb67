//! Making sessions: creating one pinned to its profile and model (or to an ad-hoc profile for
//! a base URL), forking one at a seq or a step, and registering either with the daemon — every
//! check before anything is logged.

use super::*;

impl Daemon {
    /// Creates a session in `workspace`, pinned to the profile and model asked for (or the
    /// configured ones). An unknown profile or model, or a profile whose key is missing, is an
    /// error before anything is logged: a session that could never run a turn is not created.
    pub fn create(&self, workspace: &str, config: &SessionConfig) -> ApiResult<Arc<LiveSession>> {
        self.create_checked(workspace, config, |_, _| Ok(())).map(|(live, ())| live)
    }

    /// [`Daemon::create`], running `check` on the workspace and the options the session would be
    /// pinned to (its profile and model) once everything else about the session is known to be
    /// fine and before anything is created: refused, nothing is.
    pub fn create_checked<T>(
        &self,
        workspace: &str,
        config: &SessionConfig,
        check: impl FnOnce(&Path, &CallOverrides) -> ApiResult<T>,
    ) -> ApiResult<(Arc<LiveSession>, T)> {
        let path = Path::new(workspace);
        if !path.is_absolute() || !path.is_dir() {
            return Err(ApiError::invalid_workspace(format!(
                "workspace `{workspace}` is not an absolute path to an existing directory"
            )));
        }
        self.check_broad_workspace(path)?;
        let overrides = self.pinned_overrides(path, config, true)?;
        let checked = check(path, &overrides)?;
        let store = self.config.home.workspace(path)?;
        // The pin is in the log before anyone hears of the session: a restart before its first
        // request keeps it.
        let pin = pin_of(&overrides, config.max_steps);
        let log = store.create_pinned_session(SyncPolicy::Boundaries, Some(pin))?;
        Ok((self.register(log, overrides, config.max_steps)?, checked))
    }

    /// Refuses a workspace the tools would share with the user's secrets — `/`, `$HOME`, or
    /// one holding dsh's state or configuration directory — unless the user confirmed it in
    /// their configuration file (`allow_workspaces`). The hidden paths stay hidden either way;
    /// this is about not working there by accident.
    fn check_broad_workspace(&self, workspace: &Path) -> ApiResult<()> {
        let Ok(canonical) = std::fs::canonicalize(workspace) else { return Ok(()) };
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .filter(|home| home.is_absolute())
            .and_then(|home| std::fs::canonicalize(home).ok());
        let state = dsh_sandbox::plan::canonical_prefix(self.config.home.root());
        let config_dir =
            crate::startup::config_dir().map(|dir| dsh_sandbox::plan::canonical_prefix(&dir));
        let reason = if canonical == Path::new("/") {
            "is the whole file system".to_owned()
        } else if home.as_deref() == Some(canonical.as_path()) {
            "is your home directory".to_owned()
        } else if state.starts_with(&canonical) {
            format!("holds dsh's state directory ({})", state.display())
        } else if let Some(dir) = config_dir.filter(|dir| dir.starts_with(&canonical)) {
            format!("holds dsh's configuration directory ({})", dir.display())
        } else {
            return Ok(());
        };
        let allowed = self.settings.base_config().is_ok_and(|config| {
            config.allow_workspaces.iter().any(|allowed| {
                std::fs::canonicalize(allowed).is_ok_and(|allowed| allowed == canonical)
            })
        });
        if allowed {
            return Ok(());
        }
        Err(ApiError::workspace_not_confirmed(format!(
            "workspace {} {reason}: the agent's tools would work beside your keys and \
             configuration (they stay hidden, but a mistake there is costly). Use a project \
             directory, or confirm this one once with `dsh allow-workspace {}`",
            canonical.display(),
            canonical.display()
        )))
    }

    /// Forks session `parent` at `at_seq` into a new live session; a profile or model in
    /// `config` moves the fork there (its first request logs the change).
    pub fn fork(
        &self,
        parent: &str,
        at: ForkAt,
        config: &SessionConfig,
    ) -> ApiResult<Arc<LiveSession>> {
        let parent_path = self.session_path(parent)?;
        let parent_log = read_log(&parent_path)?;
        let at_seq = match at {
            ForkAt::End => None,
            ForkAt::Seq(seq) => Some(seq),
            ForkAt::Step(step) => Some(
                parent_log
                    .events
                    .iter()
                    .find(|event| matches!(&event.data, EventData::StepStart(s) if s.step == step))
                    .ok_or_else(|| {
                        ApiError::out_of_range(format!("session {parent} has no step {step}"))
                    })?
                    .seq,
            ),
        };
        let (workspace, parent_pin) = match parent_log.events.first().map(|e| &e.data) {
            Some(EventData::SessionMeta(meta)) => {
                (PathBuf::from(&meta.workspace), meta.pin.clone().unwrap_or_default())
            }
            _ => {
                return Err(ApiError::store(format!(
                    "{} has no session/meta",
                    parent_path.display()
                )));
            }
        };
        let moves = config.profile.is_some() || config.model.is_some() || config.base_url.is_some();
        let asked = if moves {
            let mut config = config.clone();
            let url_only = config.profile.is_none() && config.model.is_none();
            if config.base_url.is_some() && url_only {
                // A fork moved to another URL only keeps its parent's profile and model, and the
                // options it did not ask to change.
                config.profile = parent_pin.profile.clone();
                config.model = parent_pin.model.clone();
            }
            let mut asked = self.pinned_overrides(&workspace, &config, false)?;
            if config.base_url.is_some() && url_only {
                asked.max_tokens = config.max_tokens;
                asked.thinking = config.thinking;
            }
            asked
        } else {
            overrides(config)
        };
        // The fork keeps its parent's pin, with what this fork asks for on top.
        let mut overrides = overrides_of(&parent_pin);
        overrides.merge(asked);
        if moves {
            // A conversation that carries images is not moved to a model that does not read
            // them: its first request could only be refused, or sent without them.
            let before_fork =
                parent_log.events.iter().filter(|event| at_seq.is_none_or(|at| event.seq < at));
            let surface = dsh_session::Session::from_events(before_fork.cloned());
            let count = dsh_session::image_count(&surface.messages());
            if count > 0 {
                self.check_reads_images(&workspace, &overrides, |model| {
                    format!(
                        "session {parent} carries {count} image{} where it would fork, and {model} \
                         does not read images: nothing was created. Compact it first (`dsh \
                         compact {parent}`: the summary describes the images it replaces; the \
                         latest turns keep theirs), or fork it before its first image (`dsh fork \
                         {parent} --step N`)",
                        if count == 1 { "" } else { "s" }
                    )
                })?;
            }
        }
        let max_steps = config.max_steps.or(parent_pin.max_steps);
        let pin = pin_of(&overrides, max_steps);
        let id = SessionId::generate(now_ms(), &mut fastrand::Rng::new());
        let log = fork_log(&parent_path, at_seq, &id, now_ms(), SyncPolicy::Boundaries, Some(pin))?;
        self.register(log, overrides, max_steps)
    }

    /// The call options of a session pinned to the profile and model `config` asks for (the
    /// configured defaults where it says nothing, when `defaults`), checked against the
    /// configuration of `workspace` and the profile's key.
    fn pinned_overrides(
        &self,
        workspace: &Path,
        config: &SessionConfig,
        defaults: bool,
    ) -> ApiResult<CallOverrides> {
        let configured = self.config_for(workspace)?;
        // A new session on the default profile (named or not) of a daemon given a base URL goes
        // there, pinned.
        let on_default = config.profile.as_ref().is_none_or(|p| *p == configured.profile.value);
        let default_url =
            (defaults && on_default).then(|| self.settings.default_base_url()).flatten();
        let ad_hoc = match config.base_url.as_deref().or(default_url) {
            Some(url) => Some(
                configured
                    .ad_hoc_profile(config.profile.as_deref(), url)
                    .map_err(|error| ApiError::config(error.to_string()))?,
            ),
            None => None,
        };
        let asked_profile = ad_hoc.as_deref().or(config.profile.as_deref());
        let (profile, model) = configured
            .pick(asked_profile, config.model.as_deref())
            .map_err(|error| ApiError::config(error.to_string()))?;
        let mut overrides = overrides(config);
        overrides.profile = Some(profile.name.clone());
        overrides.model = Some(model.clone());
        let settings = profile.model_settings(&model);
        if defaults || asked_profile.is_some() {
            if overrides.max_tokens.is_none() {
                overrides.max_tokens = settings
                    .and_then(|s| s.max_output.as_ref())
                    .map(|max| max.value.min(DEFAULT_MAX_TOKENS));
            }
            if overrides.thinking.is_none() {
                overrides.thinking = Some(
                    settings
                        .and_then(|s| s.thinking.as_ref())
                        .map_or(profile.kind.value == dsh_session::ProviderKind::Deepseek, |t| {
                            t.value
                        }),
                );
            }
        }
        let call = CallOverrides::apply(&overrides, AgentConfig::new(&model).default_call);
        self.settings.endpoint(workspace, &call).map_err(ApiError::provider)?;
        Ok(overrides)
    }

    /// Refuses (`imagesUnsupported`) a session pinned to `pinned` when its model does not read
    /// images, in the words `refusal` gives for the model (`model M of profile P`).
    pub(crate) fn check_reads_images(
        &self,
        workspace: &Path,
        pinned: &CallOverrides,
        refusal: impl FnOnce(&str) -> String,
    ) -> ApiResult<()> {
        let profile = pinned.profile.as_deref().unwrap_or(crate::settings::LEGACY_PROFILE);
        let model = pinned.model.as_deref().unwrap_or_default();
        // A configuration that cannot be read is its own error (not "does not read images").
        let config = self.config_for(workspace)?;
        let reads = config.profile(profile).is_ok_and(|p| p.images(model));
        if reads {
            return Ok(());
        }
        Err(ApiError::new(
            dsh_protocol::code::IMAGES_UNSUPPORTED,
            refusal(&format!("model {model} of profile {profile}")),
        ))
    }

    /// Registers a new log pinned to `pin` (a sub-agent's, which keeps its parent's pin).
    pub(crate) fn register_pinned(
        &self,
        log: LiveLog,
        pin: &SessionPin,
    ) -> ApiResult<Arc<LiveSession>> {
        self.register(log, overrides_of(pin), pin.max_steps)
    }

    pub(super) fn register(
        &self,
        log: LiveLog,
        overrides: CallOverrides,
        max_steps: Option<u32>,
    ) -> ApiResult<Arc<LiveSession>> {
        let id = log.session_id().to_owned();
        let path = log.path().to_path_buf();
        let workspace = match log.session().events().first().map(|e| &e.data) {
            Some(EventData::SessionMeta(meta)) => PathBuf::from(&meta.workspace),
            _ => return Err(ApiError::store(format!("{} has no session/meta", path.display()))),
        };
        self.check_broad_workspace(&workspace)?;
        let tools = Workspace::with_hidden(&workspace, self.sandbox.hidden_paths().to_vec())
            .map_err(|error| {
                ApiError::invalid_workspace(format!("workspace {}: {error}", workspace.display()))
            })?;
        let command_sandbox = self.sandbox.session(tools.root()).map_err(|error| {
            ApiError::store(format!("creating the session's temporary directory: {error}"))
        })?;
        let mut config = AgentConfig::new(DEFAULT_MODEL);
        config.default_call = overrides.apply(config.default_call);
        config.overrides = overrides;
        config.check_invariants |= self.config.check_invariants;
        config.approvals = if self.config.auto_approve {
            ApprovalPolicy::allow_all()
        } else {
            // Each step takes the workspace's configured policy from its endpoint.
            ApprovalPolicy::default()
        };
        if let Some(max_steps) = max_steps {
            config.max_steps = max_steps;
        }
        let endpoints = Arc::new(SessionEndpoints {
            settings: Arc::clone(&self.settings),
            workspace: workspace.clone(),
            auto_approve: self.config.auto_approve,
        });
        let mcp_tools = self.mcp.tools_for(&workspace, Arc::clone(&self.settings), Some(&id));
        let live = Arc::new(LiveSession::new(
            id.clone(),
            spawn_owner(log),
            path,
            workspace,
            config,
            endpoints,
            Toolbox::new(tools, ToolConfig::default()).with_sandbox(command_sandbox),
            mcp_tools,
            self.config.approval_timeout,
        ));
        // Used now: a session just created or loaded is not idle (its servers would stop with
        // an unload before its first caller got to it).
        live.touch(self.now_ms());
        let mut sessions = lock(&self.sessions);
        // Two callers may have loaded the same session at once; the log's lock lets only one
        // open succeed, so the first registration is the one that stays.
        let entry = sessions.entry(id).or_insert(live);
        Ok(Arc::clone(entry))
    }
}

/// What a session is pinned to, as its `session/meta` keeps it.
fn pin_of(overrides: &CallOverrides, max_steps: Option<u32>) -> SessionPin {
    SessionPin {
        profile: overrides.profile.clone(),
        model: overrides.model.clone(),
        max_tokens: overrides.max_tokens,
        thinking: overrides.thinking,
        reasoning_effort: overrides.reasoning_effort.clone(),
        temperature: overrides.temperature,
        max_steps,
    }
}

/// The call options a logged pin sets (the inverse of [`pin_of`]).
pub(super) fn overrides_of(pin: &SessionPin) -> CallOverrides {
    CallOverrides {
        model: pin.model.clone(),
        max_tokens: pin.max_tokens,
        thinking: pin.thinking,
        reasoning_effort: pin.reasoning_effort.clone(),
        temperature: pin.temperature,
        profile: pin.profile.clone(),
    }
}

fn overrides(config: &SessionConfig) -> CallOverrides {
    CallOverrides {
        model: config.model.clone(),
        max_tokens: config.max_tokens,
        thinking: config.thinking,
        reasoning_effort: config.reasoning_effort.clone(),
        temperature: config.temperature,
        profile: config.profile.clone(),
    }
}

/// The output limit of new sessions (below a model's own maximum).
const DEFAULT_MAX_TOKENS: u32 = 8192;

/// The endpoints of one session: its workspace's configuration, asked at every step.
struct SessionEndpoints {
    settings: Arc<Settings>,
    workspace: PathBuf,
    auto_approve: bool,
}

impl Endpoints for SessionEndpoints {
    fn endpoint(&self, call: &LlmCallConfig) -> Result<Endpoint, String> {
        let mut endpoint = self.settings.endpoint(&self.workspace, call)?;
        if self.auto_approve {
            endpoint.approvals = None;
            endpoint.user_approvals = None;
        }
        Ok(endpoint)
    }
}

/// Where a fork is cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForkAt {
    /// After the parent's last event: the whole log.
    End,
    /// Before the event with this seq.
    Seq(u64),
    /// At the boundary of this step: before its `step/start`.
    Step(u64),
}
