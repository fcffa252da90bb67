//! The daemon's state: the live sessions it holds and the shared machinery (the configuration
//! with its provider profiles, the shutdown token, the turn tasks).
//!
//! Sessions load lazily: the first call that names a session opens its log (lock, torn-tail
//! recovery, fold) and starts its owner task. A turn runs in a task of its own, supervised: a
//! client that disconnects does not stop it, and a panic inside it marks that session failed —
//! the turn is closed in the log — while the daemon and every other session keep running.
//! `live.rs` lists the tasks and locks of one session.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use dsh_agent::approval::ApprovalPolicy;
use dsh_agent::prompt::INSTRUCTION_FILES;
use dsh_agent::tools::{ToolConfig, Toolbox, Workspace};
use dsh_agent::{
    Agent, AgentConfig, CallOverrides, Endpoint, Endpoints, TurnLimits, TurnOutcome, spawn_owner,
};
use dsh_config::Config;
use dsh_protocol::{SessionCompactResult, SessionConfig, WorkspaceTurnStarted};
use dsh_sandbox::Sandbox;
use dsh_session::{Event, EventData, LlmCallConfig, SeenFiles, SessionPin};
use dsh_store::{DshHome, LiveLog, SessionId, SyncPolicy, fork_log, now_ms, read_log};
use futures::FutureExt as _;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::error::{ApiError, ApiResult};
use crate::live::{LiveSession, QueueSlot, RunningTurn};
use crate::settings::{LEGACY_PROFILE, Settings};
use crate::startup::{DEFAULT_MODEL, DaemonConfig};
use crate::watch::{FileWatch, Interest};

/// How long a load waits for the same session's unload to finish closing its log.
const UNLOAD_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Handlers that read logs (and build answers from them) at once, across the daemon.
pub const READERS: usize = 4;

/// The daemon: every live session and the shared machinery.
pub struct Daemon {
    pub(crate) config: DaemonConfig,
    /// The command sandbox: what the kernel offers, what confines commands.
    pub(crate) sandbox: Arc<Sandbox>,
    /// The configuration files, their last good versions and the provider clients.
    pub(crate) settings: Arc<Settings>,
    sessions: Mutex<HashMap<String, Arc<LiveSession>>>,
    /// Held while a session is loaded from its log.
    loading: Mutex<()>,
    /// Connected clients.
    pub(crate) clients: AtomicU64,
    /// Cancelled when the daemon shuts down: every turn's token is a child of it.
    pub(crate) shutdown: CancellationToken,
    /// The socket this daemon listens on (`serve`); its file goes the moment a shutdown is
    /// asked for, so that a client connecting then starts the next daemon instead of being
    /// queued on a listener about to close (and reset).
    pub(crate) socket: std::sync::OnceLock<PathBuf>,
    /// Every turn task, so shutdown can wait for them.
    pub(crate) tasks: TaskTracker,
    /// Permits for the handlers that read logs ([`READERS`]).
    pub(crate) readers: tokio::sync::Semaphore,
    pub(crate) started: Instant,
    /// What `daemon/status` warns about (a home others can read, …).
    warnings: Mutex<Vec<String>>,
    /// Set when a session was loaded: the loaded-log budget is checked at the next chance.
    loaded_since_check: std::sync::atomic::AtomicBool,
    /// Sessions being closed after an unload: a load waits for the close to finish.
    unloading: Mutex<std::collections::HashSet<String>>,
    /// Warnings that hold while a condition lasts (descriptors exhausted, …), by name.
    conditions: Mutex<std::collections::BTreeMap<&'static str, String>>,
    /// The files the loaded sessions depend on, watched for `workspace/changed`.
    pub(crate) watch: Arc<FileWatch>,
    /// Turns as they start, for `workspace/turnStarted`.
    pub(crate) turns: tokio::sync::broadcast::Sender<WorkspaceTurnStarted>,
    /// The provenance folds of the logs `workspace/provenance` read.
    pub(crate) provenance: crate::provenance::Cache,
    /// The MCP tool servers of the loaded sessions' workspaces.
    pub(crate) mcp: Arc<crate::mcp::McpManager>,
    /// The places for large answers, shared by every front.
    pub(crate) large_places: crate::connection::LargePlaces,
    /// The network front and the browser's logins (`dsh web`).
    pub(crate) web: crate::web::Web,
    /// Each workspace's checkpoints (rewind).
    pub(crate) checkpoints: crate::checkpoints::Checkpoints,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock only means a panic happened while it was held; the maps and options it
    // guards stay consistent for our uses, so keep going.
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Why a connection past the cap ([`Daemon::admit`]) is refused, on every front.
pub(crate) fn overloaded_message(max: usize) -> String {
    format!(
        "overloaded, retry later: the daemon serves at most {max} connections at once (dsh serve --max-connections)"
    )
}

/// One connected client, counted in `Daemon::clients` until dropped (see [`Daemon::admit`]).
pub(crate) struct ClientSlot(Arc<Daemon>);

impl Drop for ClientSlot {
    fn drop(&mut self) {
        self.0.clients.fetch_sub(1, Ordering::SeqCst);
    }
}

mod sessions;

pub use sessions::ForkAt;
use sessions::overrides_of;

/// What a turn is asked: the prompt's text (a prompt command is expanded later, when a client
/// typed it) and the images that follow it.
pub(crate) struct Ask {
    pub(crate) text: String,
    pub(crate) attachments: Vec<dsh_protocol::Attachment>,
}

impl Daemon {
    /// A daemon with no session loaded. Reads the user's configuration file (an unusable one is
    /// the error), probes what the kernel offers the command sandbox (a few milliseconds,
    /// blocking) and logs what confines commands — and what is missing.
    pub fn new(mut config: DaemonConfig) -> anyhow::Result<Arc<Daemon>> {
        let sandbox = Sandbox::new(
            config.sandbox.clone(),
            config.sandbox_helper.clone(),
            config.hidden_paths(),
        );
        let settings = Settings::new(
            config.user_config.clone(),
            config.overrides.clone(),
            std::mem::take(&mut config.keys),
            config.home.root().to_path_buf(),
        )?
        .with_hidden(sandbox.hidden_paths().to_vec());
        let status = sandbox.status();
        tracing::info!(
            policy = %status.policy,
            network = status.network,
            in_force = %status.in_force.join(", "),
            "command sandbox"
        );
        for warning in &status.warnings {
            tracing::warn!("command sandbox: {warning}");
        }
        let shutdown = CancellationToken::new();
        let mcp = crate::mcp::McpManager::new(shutdown.child_token());
        let settings = Arc::new(settings);
        let checkpoints =
            crate::checkpoints::Checkpoints::new(config.home.clone(), Arc::clone(&settings));
        Ok(Arc::new(Daemon {
            checkpoints,
            mcp,
            config,
            sandbox: Arc::new(sandbox),
            settings,
            sessions: Mutex::new(HashMap::new()),
            loading: Mutex::new(()),
            clients: AtomicU64::new(0),
            shutdown,
            socket: std::sync::OnceLock::new(),
            tasks: TaskTracker::new(),
            readers: tokio::sync::Semaphore::new(READERS),
            started: Instant::now(),
            warnings: Mutex::new(Vec::new()),
            conditions: Mutex::default(),
            watch: FileWatch::start(),
            turns: tokio::sync::broadcast::channel(64).0,
            unloading: Mutex::default(),
            loaded_since_check: std::sync::atomic::AtomicBool::new(false),
            provenance: crate::provenance::Cache::default(),
            large_places: crate::connection::LargePlaces::default(),
            web: crate::web::Web::default(),
        }))
    }

    /// The state directory.
    pub fn home(&self) -> &DshHome {
        &self.config.home
    }

    /// The configuration for sessions in `workspace`.
    pub fn config_for(&self, workspace: &Path) -> ApiResult<Arc<Config>> {
        self.settings.config(workspace).map_err(|error| ApiError::config(error.to_string()))
    }

    /// The configuration files and what is wrong with them.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The live sessions, by id.
    pub fn loaded(&self) -> Vec<Arc<LiveSession>> {
        let mut sessions: Vec<_> = lock(&self.sessions).values().cloned().collect();
        sessions.sort_by(|a, b| a.id.cmp(&b.id));
        sessions
    }

    /// The live session `id`, if it is loaded.
    pub fn loaded_session(&self, id: &str) -> Option<Arc<LiveSession>> {
        let live = lock(&self.sessions).get(id).cloned()?;
        live.touch(self.now_ms());
        Some(live)
    }

    /// Milliseconds since the daemon started.
    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Unloads idle sessions: those no call, subscription or turn holds (nothing but the daemon's
    /// map refers to them) that were not used for `unload_after`, and — while the loaded
    /// sessions weigh more than `loaded_budget_bytes` together (their logs and the request
    /// bodies they hold, `LiveSession::weight`) — the least recently used idle ones. Each is
    /// closed (synced, unlocked) before this returns; a call naming it later loads it again.
    pub async fn unload_idle(&self) -> usize {
        let now = self.now_ms();
        let idle_for = self.config.unload_after.as_millis() as u64;
        let unloaded: Vec<Arc<LiveSession>> = {
            let mut sessions = lock(&self.sessions);
            // Only the map holds it (one strong reference), and nothing waits in it.
            let weights: Vec<(&Arc<LiveSession>, u64)> =
                sessions.values().map(|live| (live, live.weight())).collect();
            let mut loaded_bytes: u64 = weights.iter().map(|(_, weight)| weight).sum();
            let mut idle: Vec<(u64, u64, String)> = weights
                .into_iter()
                .filter(|(live, _)| Arc::strong_count(live) == 1 && !live.is_busy())
                .map(|(live, weight)| (live.last_used(), weight, live.id.clone()))
                .collect();
            idle.sort();
            let mut chosen = Vec::new();
            for (last_used, size, id) in idle {
                let stale = now.saturating_sub(last_used) >= idle_for;
                if stale || loaded_bytes > self.config.loaded_budget_bytes {
                    loaded_bytes = loaded_bytes.saturating_sub(size);
                    if let Some(live) = sessions.remove(&id) {
                        chosen.push(live);
                    }
                }
            }
            let mut unloading = lock(&self.unloading);
            unloading.extend(chosen.iter().map(|live| live.id.clone()));
            chosen
        };
        let count = unloaded.len();
        for live in unloaded {
            live.handle.close().await;
            lock(&self.unloading).remove(&live.id);
            tracing::debug!(session = %live.id, "unloaded an idle session");
        }
        count
    }

    /// Counts a new client unless `max` are connected already (the socket's and the
    /// WebSockets' alike); the count goes down when the returned slot is dropped.
    pub(crate) fn admit(self: &Arc<Self>, max: usize) -> Option<ClientSlot> {
        let max = u64::try_from(max).unwrap_or(u64::MAX);
        self.clients
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |open| {
                (open < max).then_some(open + 1)
            })
            .ok()
            .map(|_| ClientSlot(Arc::clone(self)))
    }

    /// Whether any turn is running.
    pub fn any_turn_running(&self) -> bool {
        lock(&self.sessions).values().any(|s| s.is_running())
    }

    /// The session `id`, loading it from its log if needed (blocking: call it off the runtime).
    pub fn session(&self, id: &str) -> ApiResult<Arc<LiveSession>> {
        if let Some(live) = self.loaded_session(id) {
            return Ok(live);
        }
        // Being unloaded right now: its log is still locked until the close finishes.
        let waited = Instant::now();
        while lock(&self.unloading).contains(id) && waited.elapsed() < UNLOAD_WAIT {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // One load at a time: two callers naming the same session at once would both try to
        // open (and lock) its log, and the second would be refused as if another process held it.
        let _loading = lock(&self.loading);
        if let Some(live) = self.loaded_session(id) {
            return Ok(live);
        }
        let session_id = SessionId::parse(id)?;
        let path = self.config.home.find_session(&session_id)?;
        let log = LiveLog::open(&path, SyncPolicy::Boundaries)?;
        // Loaded as it was created: pinned as its `session/meta` says.
        let pin = match log.session().events().first().map(|event| &event.data) {
            Some(EventData::SessionMeta(meta)) => meta.pin.clone().unwrap_or_default(),
            _ => SessionPin::default(),
        };
        let live = self.register(log, overrides_of(&pin), pin.max_steps)?;
        live.touch(self.now_ms());
        self.loaded_since_check.store(true, std::sync::atomic::Ordering::SeqCst);
        Ok(live)
    }

    /// After a load: unloads idle sessions now if the loaded logs passed the budget (rather than
    /// at the unloader's next round), so touching many sessions in a row stays within it.
    pub async fn enforce_budget(&self) {
        if self.loaded_since_check.swap(false, std::sync::atomic::Ordering::SeqCst) {
            self.unload_idle().await;
        }
    }

    /// Where to read session `id`'s events from: the loaded session (loading it if needed), or
    /// — when another process holds its log (a `dsh stdio --in-process` daemon, say) — the log
    /// file. Blocking: call it off the runtime.
    pub fn session_or_file(&self, id: &str) -> ApiResult<Result<Arc<LiveSession>, PathBuf>> {
        match self.session(id) {
            Ok(live) => Ok(Ok(live)),
            Err(error) if error.code == dsh_protocol::code::SESSION_UNAVAILABLE => {
                let path = self.session_path(id)?;
                match LiveLog::open(&path, SyncPolicy::Boundaries) {
                    Err(dsh_store::StoreError::Locked { .. }) => Ok(Err(path)),
                    // Not locked (any more): load it after all.
                    _ => self.session(id).map(Ok),
                }
            }
            Err(error) => Err(error),
        }
    }

    /// Path of session `id`'s log (without loading it).
    pub fn session_path(&self, id: &str) -> ApiResult<PathBuf> {
        if let Some(live) = self.loaded_session(id) {
            return Ok(live.path.clone());
        }
        let session_id = SessionId::parse(id)?;
        Ok(self.config.home.find_session(&session_id)?)
    }

    /// The events of session `id`, read from its log file (never from memory).
    pub fn read_events(&self, id: &str) -> ApiResult<Vec<Event>> {
        let path = self.session_path(id)?;
        Ok(read_log(&path)?.events)
    }

    /// Refuses any new work once the daemon is stopping, and sessions that failed.
    fn check_usable(&self, live: &LiveSession) -> ApiResult<()> {
        live.check_not_failed()?;
        if self.shutdown.is_cancelled() {
            return Err(ApiError::shutting_down());
        }
        Ok(())
    }

    /// Runs a turn of `live` for `text` within `limits` (its answer held to `output`, when
    /// given), waiting behind a running turn when `queue` is set. Resolves when the turn ends.
    pub async fn prompt(
        self: &Arc<Self>,
        live: Arc<LiveSession>,
        text: String,
        queue: bool,
        limits: TurnLimits,
        output: Option<dsh_agent::OutputSchema>,
    ) -> ApiResult<TurnOutcome> {
        self.prompt_with_images(live, text, Vec::new(), queue, limits, output).await
    }

    /// [`Daemon::prompt`] with images after the text (`session/prompt`'s `attachments`):
    /// checked against the session's model and stored before anything is logged.
    pub async fn prompt_with_images(
        self: &Arc<Self>,
        live: Arc<LiveSession>,
        text: String,
        attachments: Vec<dsh_protocol::Attachment>,
        queue: bool,
        limits: TurnLimits,
        output: Option<dsh_agent::OutputSchema>,
    ) -> ApiResult<TurnOutcome> {
        let turn = crate::subagents::TurnRun::top_level(self.shutdown.child_token());
        let ask = Ask { text, attachments };
        self.prompt_as(live, ask, queue, limits, output, turn).await
    }

    /// [`Daemon::prompt_with_images`], the turn cancelled with `run.cancel` and its approvals
    /// asked as `run` says (a child's through its parent's clients).
    pub(crate) async fn prompt_as(
        self: &Arc<Self>,
        live: Arc<LiveSession>,
        ask: Ask,
        queue: bool,
        limits: TurnLimits,
        output: Option<dsh_agent::OutputSchema>,
        run: crate::subagents::TurnRun,
    ) -> ApiResult<TurnOutcome> {
        self.check_usable(&live)?;
        let Ask { text, attachments } = ask;
        // A prompt command is expanded (or refused) before anything is logged — only in what a
        // client sent: a child's prompt is the model's text, never a command of the user's.
        let (text, command) = match run.typed {
            true => crate::commands::expand(&self.settings, live.toolbox.workspace().root(), text)?,
            false => (text, None),
        };
        // Resolve the endpoint now so a missing key or profile is reported before anything is
        // logged.
        let call = self.pinned_call(&live).await?;
        let endpoint = live.endpoints.endpoint(&call).map_err(ApiError::provider)?;
        let images = self.take_attachments(&live, &call, attachments).await?;
        // A cost budget needs the price of what the turn runs on, in the budget's currency.
        if limits.max_cost.is_some()
            && endpoint.price.as_ref().is_none_or(|price| price.currency != "USD")
        {
            return Err(ApiError::config(format!(
                "limits.maxCost: model {} of profile {} has no price in USD in the \
                 configuration, so the turn's cost would be unknown (give the model a `price` \
                 in your configuration file, docs/config.md)",
                call.model,
                call.profile.as_deref().unwrap_or(LEGACY_PROFILE)
            )));
        }
        let endpoints: dsh_agent::SharedEndpoints = live.endpoints.clone();
        let slot = if queue {
            let _queued = QueueSlot::take(&live)?;
            Arc::clone(&live.agent).lock_owned().await
        } else {
            Arc::clone(&live.agent).try_lock_owned().map_err(|_| ApiError::busy(&live.id))?
        };
        // The wait may have been long: the turn before may have failed the session, or the
        // daemon may be stopping.
        self.check_usable(&live)?;
        let root = live.toolbox.workspace().root().to_path_buf();
        self.watch_workspace(&root).await;
        let cancel = run.cancel.clone();
        let running = RunningTurn::start(&live, cancel.clone());
        // A child's crashed children are closed, and where this session stands among parents.
        let seam = crate::subagents::Seam::for_session(self, &live, run.approver.clone()).await;
        self.announce_turn(&live, &root).await;
        let (done, outcome) = oneshot::channel();
        let task_live = Arc::clone(&live);
        let daemon = Arc::clone(self);
        let root_for_checkpoints = root.clone();
        // The turn runs in a task of its own: a client that goes away does not stop it. The task
        // holds the loop slot until everything — a panic's cleanup included — is logged, so a
        // queued prompt never starts before the session's state is settled.
        // What the agent reads and writes during the turn is its own and watched at once.
        let follower = self.follow_files(&live, &root).await;
        self.tasks.spawn(async move {
            let mut slot = slot;
            let _running = running;
            let live = task_live;
            let agent = slot.get_or_insert_with(|| {
                let approver = run.approver.clone().unwrap_or_else(|| live.approver());
                let mut agent = Agent::new(
                    endpoints,
                    Arc::clone(&live.toolbox),
                    approver,
                    live.agent_config.clone(),
                    &live.workspace,
                );
                agent.set_external_tools(live.mcp_tools.clone());
                let workspace = daemon.checkpoints.workspace(&root_for_checkpoints);
                agent.set_checkpoints(Arc::new(crate::checkpoints::Seam(
                    workspace,
                    live.id.clone(),
                )));
                agent.share_wire_cache(Arc::clone(&live.loop_wire));
                agent.set_hooks(Arc::new(crate::hooks::Seam {
                    settings: Arc::clone(&daemon.settings),
                    workspace: live.workspace.clone(),
                }));
                let objects = daemon.checkpoints.workspace(&root_for_checkpoints);
                agent.set_image_objects(Arc::new(crate::images::Objects(objects)));
                agent
            });
            // Each turn asks as its own run says: a child's session prompted later by a client
            // asks that client, not the parent that started it.
            agent.set_approver(run.approver.clone().unwrap_or_else(|| live.approver()));
            agent.set_subagents(seam);
            agent.attach_images(images);
            let turn = async {
                // Debug builds only: lets tests prove that a panicking turn fails its session
                // and nothing else (see `tests/api/lifecycle.rs`).
                #[cfg(debug_assertions)]
                if std::env::var("DSH_DEBUG_PANIC_ON_PROMPT").is_ok_and(|trigger| trigger == text) {
                    panic!("DSH_DEBUG_PANIC_ON_PROMPT matched the prompt");
                }
                agent.set_prompt_command(command);
                agent.run_turn_shaped(&live.handle, &text, &cancel, &limits, output).await
            };
            let result = match AssertUnwindSafe(turn).catch_unwind().await {
                Ok(result) => result.map_err(|error| {
                    if matches!(
                        error,
                        dsh_agent::AgentError::Store(_)
                            | dsh_agent::AgentError::Invariant { .. }
                            | dsh_agent::AgentError::Internal(_)
                    ) {
                        live.set_failed(error.to_string());
                    }
                    ApiError::from_agent(error)
                }),
                Err(_) => {
                    let reason = "the turn task panicked";
                    tracing::error!(session = %live.id, "{reason}; the session is marked failed");
                    // The loop instance may be mid-way through anything: drop it.
                    *slot = None;
                    live.mark_failed(reason).await;
                    Err(ApiError::unavailable(format!("session {} failed: {reason}", live.id)))
                }
            };
            if let Some(follower) = follower {
                follower.abort();
            }
            daemon.watch_workspace(&root).await;
            let _ = done.send(result);
        });
        outcome.await.unwrap_or_else(|_| {
            Err(ApiError::unavailable(format!("session {}: the turn ended abnormally", live.id)))
        })
    }

    /// Compacts `live` now (`session/compact`, `dsh compact`): the older surface nodes become a
    /// summary made by the session's model. Refused while a turn runs; `session/cancel` and
    /// shutdown cancel the summarize call, which leaves the surface untouched.
    pub async fn compact(
        self: &Arc<Self>,
        live: Arc<LiveSession>,
    ) -> ApiResult<SessionCompactResult> {
        use dsh_agent::{CompactOutcome, ContextConfig, compact_now};
        self.check_usable(&live)?;
        let call = self.pinned_call(&live).await?;
        let Endpoint { client, wire, context, .. } =
            live.endpoints.endpoint(&call).map_err(ApiError::provider)?;
        // Holding the loop slot keeps turns out while the surface is rewritten.
        let slot =
            Arc::clone(&live.agent).try_lock_owned().map_err(|_| ApiError::busy(&live.id))?;
        let context = context.unwrap_or_else(|| ContextConfig::for_model(&call.model));
        let call = LlmCallConfig { wire, ..call };
        let cancel = self.shutdown.child_token();
        let running = RunningTurn::start(&live, cancel.clone());
        // Like a turn, the compaction runs to its end in a tracked task, whatever the caller does.
        let handle = live.handle.clone();
        let hooks = crate::hooks::Seam {
            settings: Arc::clone(&self.settings),
            workspace: live.workspace.clone(),
        };
        let workspace = live.workspace.clone();
        let task = self.tasks.spawn(async move {
            let _slot = slot;
            let _running = running;
            dsh_agent::pre_compact_hooks(&hooks, &handle, &workspace, "manual", &cancel).await?;
            compact_now(&client, &handle, &context, &call, &cancel).await
        });
        let outcome = task.await.map_err(|_| ApiError::store("the compaction task failed"))?;
        let (compacted, seq, message) = match outcome.map_err(ApiError::from_agent)? {
            CompactOutcome::Compacted { start_seq, replace_seq, nodes, tokens_before, .. } => (
                true,
                Some(replace_seq),
                format!(
                    "compacted {nodes} surface nodes into a summary (compact/start at seq \
                     {start_seq}, surface/replace at seq {replace_seq}); the last request had \
                     {tokens_before} prompt tokens"
                ),
            ),
            CompactOutcome::Failed { start_seq, error, cancelled } => (
                false,
                None,
                format!(
                    "compaction {} (compact/start at seq {start_seq}): {error}; the surface is \
                     untouched",
                    if cancelled { "cancelled" } else { "failed" }
                ),
            ),
            CompactOutcome::Unchanged { reason } => (false, None, reason),
            CompactOutcome::Trimmed { seqs, .. } => {
                (true, seqs.last().copied(), format!("trimmed {} tool results", seqs.len()))
            }
        };
        Ok(SessionCompactResult { compacted, seq, message })
    }

    /// The call config the next request of `live` starts from: its logged header's (or, before
    /// the first request, the session's defaults) with the explicit options on top.
    async fn pinned_call(&self, live: &LiveSession) -> ApiResult<LlmCallConfig> {
        let header =
            live.handle.query(|s| s.header().cloned()).await.map_err(ApiError::from_agent)?;
        let config = &live.agent_config;
        let base = header.map_or_else(|| config.default_call.clone(), |h| h.config);
        Ok(config.overrides.apply(base))
    }

    /// Adds warnings for `daemon/status`.
    pub fn add_warnings(&self, warnings: impl IntoIterator<Item = String>) {
        lock(&self.warnings).extend(warnings);
    }

    /// Sets (or, with `None`, clears) a warning that holds while a condition lasts.
    pub fn set_condition(&self, name: &'static str, warning: Option<String>) {
        let mut conditions = lock(&self.conditions);
        match warning {
            Some(warning) => conditions.insert(name, warning),
            None => conditions.remove(name),
        };
    }

    /// What `daemon/status` warns about.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = lock(&self.warnings).clone();
        warnings.extend(lock(&self.conditions).values().cloned());
        warnings.extend(self.watch.degraded());
        warnings
    }

    /// Tells daemon subscribers that a turn of `live` starts (`workspace/turnStarted`). The turn
    /// holds the loop slot and has logged nothing yet, so its events begin at the log's length.
    async fn announce_turn(&self, live: &LiveSession, root: &Path) {
        let Ok(from_seq) = live.handle.query(|s| s.next_seq()).await else { return };
        let workspace = root.display().to_string();
        let started = WorkspaceTurnStarted { workspace, session_id: live.id.clone(), from_seq };
        // No subscriber is no error.
        let _ = self.turns.send(started);
    }

    /// A task that tells the file watch what `live`'s agent reads and writes, as it is logged.
    async fn follow_files(
        &self,
        live: &LiveSession,
        root: &Path,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let next = live.handle.query(|s| s.next_seq()).await.ok()?;
        let (stored, mut receiver) = live.handle.subscribe(next).await.ok()?;
        let watch = Arc::clone(&self.watch);
        let root = root.to_path_buf();
        Some(tokio::spawn(async move {
            let saw = |event: &Event| {
                if let EventData::ToolResult(result) = &event.data {
                    for file in result.seen.iter().flatten() {
                        watch.saw(&root, &file.path, file.sha256.clone());
                    }
                }
            };
            stored.iter().for_each(saw);
            loop {
                match receiver.recv().await {
                    Ok(event) => saw(&event),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        }))
    }

    /// Watches what the loaded sessions of `root` (a canonical workspace root) depend on: its
    /// instruction files, its configuration file, and every file their agents read or wrote.
    pub(crate) async fn watch_workspace(&self, root: &Path) {
        let sessions: Vec<Arc<LiveSession>> = lock(&self.sessions)
            .values()
            .filter(|live| live.toolbox.workspace().root() == root)
            .cloned()
            .collect();
        let mut files: HashMap<PathBuf, Interest> = HashMap::new();
        let interest = |relative: &str| Interest {
            workspace: root.to_path_buf(),
            relative: relative.to_owned(),
            known: Vec::new(),
        };
        for live in sessions {
            let seen = live
                .handle
                .query(|s| {
                    let mut fold = SeenFiles::default();
                    fold.advance(s.events());
                    fold.files().clone()
                })
                .await;
            for (relative, sha256) in seen.into_iter().flatten() {
                files
                    .entry(root.join(&relative))
                    .or_insert_with(|| interest(&relative))
                    .known
                    .push(sha256);
            }
        }
        let instruction_files = match self.config_for(root) {
            Ok(config) => config.instructions.files.value.clone(),
            Err(_) => INSTRUCTION_FILES.iter().map(|name| (*name).to_owned()).collect(),
        };
        for name in instruction_files.iter().map(String::as_str).chain([".dsh/config.toml"]) {
            files.entry(root.join(name)).or_insert_with(|| interest(name));
        }
        self.watch.set_workspace(root, files);
    }

    /// Opens the checkpoints of every workspace that has some, in the background: a rewind a
    /// crash interrupted completes (said in the daemon's log and status), and each store is
    /// collected within its budget. A checkpoint or rewind of a workspace waits for its turn.
    pub fn start_checkpoints(self: &Arc<Self>) {
        let daemon = Arc::clone(self);
        tokio::task::spawn_blocking(move || daemon.checkpoints.open_all());
    }

    /// Asks the daemon to stop (as `daemon/shutdown`, a signal or the idle timer do).
    pub fn request_shutdown(&self) {
        if let Some(socket) = self.socket.get() {
            let _ = std::fs::remove_file(socket);
        }
        self.shutdown.cancel();
    }

    /// Drops every session from memory (their owner tasks close the logs).
    pub(crate) fn unload_all(&self) {
        lock(&self.sessions).clear();
    }
}
