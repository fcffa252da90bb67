//! The daemon's state: the live sessions it holds, each with its owner task, its loop instance,
//! its running turn and its pending approvals.
//!
//! Sessions load lazily: the first call that names a session opens its log (lock, torn-tail
//! recovery, fold) and starts its owner task. A turn runs in a task of its own, supervised: a
//! client that disconnects does not stop it, and a panic inside it marks that session failed —
//! the turn is closed in the log — while the daemon and every other session keep running.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dsh_agent::approval::{ApprovalPolicy, Approver, BoxFuture};
use dsh_agent::tools::{ToolConfig, Toolbox, Workspace};
use dsh_agent::{Agent, AgentConfig, CallOverrides, SessionHandle, close_open_turn, spawn_owner};
use dsh_protocol::SessionConfig;
use dsh_provider::DeepSeek;
use dsh_session::{ApprovalRequest, ApprovalVerdict, Event, EventData, StopReason};
use dsh_store::{DshHome, LiveLog, SessionId, StoreError, SyncPolicy, fork_log, now_ms, read_log};
use futures::FutureExt as _;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::error::{ApiError, ApiResult};

/// Prompts that may wait behind a running turn, per session, before the daemon answers
/// "overloaded" instead of queueing more.
const MAX_QUEUED_PROMPTS: usize = 16;

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
}

/// The daemon: every live session and the shared machinery.
pub struct Daemon {
    pub(crate) config: DaemonConfig,
    provider: Mutex<Option<Arc<DeepSeek>>>,
    sessions: Mutex<HashMap<String, Arc<LiveSession>>>,
    /// Held while a session is loaded from its log.
    loading: Mutex<()>,
    /// Connected clients.
    pub(crate) clients: AtomicU64,
    /// Cancelled when the daemon shuts down: every turn's token is a child of it.
    pub(crate) shutdown: CancellationToken,
    /// Every turn task, so shutdown can wait for them.
    pub(crate) tasks: TaskTracker,
    pub(crate) started: Instant,
}

/// One session held in memory.
pub struct LiveSession {
    /// The id.
    pub id: String,
    /// Its owner task.
    pub handle: SessionHandle,
    /// Its log file.
    pub path: PathBuf,
    /// Its workspace root.
    pub workspace: PathBuf,
    /// The loop instance, built at the first prompt (the provider may not be configured
    /// before); locked for the duration of a turn, so queued prompts wait on it.
    agent: Arc<tokio::sync::Mutex<Option<Agent>>>,
    agent_config: AgentConfig,
    toolbox: Arc<Toolbox>,
    /// The running turn (or compaction): its generation and cancellation token.
    running: Mutex<Option<(u64, CancellationToken)>>,
    /// Turns started so far; tells a finished turn's cleanup from the next turn's start.
    generation: AtomicU64,
    /// Prompts waiting for the running turn.
    queued: AtomicUsize,
    approvals: Arc<Approvals>,
    failed: Mutex<Option<String>>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock only means a panic happened while it was held; the data (maps and
    // options) stays consistent for our uses, so keep going.
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Daemon {
    /// A daemon with no session loaded.
    pub fn new(config: DaemonConfig) -> Arc<Daemon> {
        Arc::new(Daemon {
            config,
            provider: Mutex::new(None),
            sessions: Mutex::new(HashMap::new()),
            loading: Mutex::new(()),
            clients: AtomicU64::new(0),
            shutdown: CancellationToken::new(),
            tasks: TaskTracker::new(),
            started: Instant::now(),
        })
    }

    /// The state directory.
    pub fn home(&self) -> &DshHome {
        &self.config.home
    }

    fn provider(&self) -> ApiResult<Arc<DeepSeek>> {
        let mut slot = lock(&self.provider);
        if let Some(provider) = slot.as_ref() {
            return Ok(Arc::clone(provider));
        }
        let provider =
            (self.config.provider)().map_err(|e| ApiError::provider(format!("{e:#}")))?;
        *slot = Some(Arc::clone(&provider));
        Ok(provider)
    }

    /// The live sessions, for status.
    pub fn loaded(&self) -> Vec<Arc<LiveSession>> {
        let mut sessions: Vec<_> = lock(&self.sessions).values().cloned().collect();
        sessions.sort_by(|a, b| a.id.cmp(&b.id));
        sessions
    }

    /// Whether any turn is running.
    pub fn any_turn_running(&self) -> bool {
        lock(&self.sessions).values().any(|s| s.is_running())
    }

    /// The session `id`, loading it from its log if needed.
    pub fn session(&self, id: &str) -> ApiResult<Arc<LiveSession>> {
        if let Some(live) = lock(&self.sessions).get(id) {
            return Ok(Arc::clone(live));
        }
        // One load at a time: two callers naming the same session at once would both try to
        // open (and lock) its log, and the second would be refused as if another process held it.
        let _loading = lock(&self.loading);
        if let Some(live) = lock(&self.sessions).get(id) {
            return Ok(Arc::clone(live));
        }
        let session_id = SessionId::parse(id)?;
        let path = self.config.home.find_session(&session_id)?;
        let log = LiveLog::open(&path, SyncPolicy::Boundaries)?;
        self.register(log, CallOverrides::default(), None)
    }

    /// Path of session `id`'s log (without loading it).
    pub fn session_path(&self, id: &str) -> ApiResult<PathBuf> {
        if let Some(live) = lock(&self.sessions).get(id) {
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

    /// Creates a session in `workspace`.
    pub fn create(&self, workspace: &str, config: &SessionConfig) -> ApiResult<Arc<LiveSession>> {
        let path = Path::new(workspace);
        if !path.is_absolute() || !path.is_dir() {
            return Err(ApiError::invalid_workspace(format!(
                "workspace `{workspace}` is not an absolute path to an existing directory"
            )));
        }
        let store = self.config.home.workspace(path)?;
        let log = store.create_new_session(SyncPolicy::Boundaries)?;
        self.register(log, overrides(config), config.max_steps)
    }

    /// Forks session `parent` at `at_seq` into a new live session.
    pub fn fork(
        &self,
        parent: &str,
        at_seq: Option<u64>,
        config: &SessionConfig,
    ) -> ApiResult<Arc<LiveSession>> {
        let parent_path = self.session_path(parent)?;
        let id = SessionId::generate(now_ms(), &mut fastrand::Rng::new());
        let log = fork_log(&parent_path, at_seq, &id, now_ms(), SyncPolicy::Boundaries)?;
        self.register(log, overrides(config), config.max_steps)
    }

    fn register(
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
        let tools = Workspace::new(&workspace).map_err(|error| {
            ApiError::invalid_workspace(format!("workspace {}: {error}", workspace.display()))
        })?;
        let approvals = Arc::new(Approvals::new(self.config.approval_timeout));
        let mut config = AgentConfig::new(&self.config.default_model);
        config.overrides = overrides;
        config.check_invariants |= self.config.check_invariants;
        config.approvals = ApprovalPolicy::default();
        if let Some(max_steps) = max_steps {
            config.max_steps = max_steps;
        }
        let live = Arc::new(LiveSession {
            id: id.clone(),
            handle: spawn_owner(log),
            path,
            workspace,
            agent: Arc::new(tokio::sync::Mutex::new(None)),
            agent_config: config,
            toolbox: Arc::new(Toolbox::new(tools, ToolConfig::default())),
            running: Mutex::new(None),
            generation: AtomicU64::new(0),
            queued: AtomicUsize::new(0),
            approvals,
            failed: Mutex::new(None),
        });
        let mut sessions = lock(&self.sessions);
        // Two callers may have loaded the same session at once; the log's lock lets only one
        // open succeed, so the first registration is the one that stays.
        let entry = sessions.entry(id).or_insert(live);
        Ok(Arc::clone(entry))
    }

    /// Runs a turn of `live` for `text`, waiting behind a running turn when `queue` is set.
    /// Resolves when the turn ends.
    pub async fn prompt(
        self: &Arc<Self>,
        live: Arc<LiveSession>,
        text: String,
        queue: bool,
    ) -> ApiResult<dsh_agent::TurnOutcome> {
        live.check_usable(self)?;
        // Build the provider now so a missing key is reported before anything is logged.
        let provider = self.provider()?;
        let slot = if queue {
            let _queued = QueueSlot::take(&live)?;
            Arc::clone(&live.agent).lock_owned().await
        } else {
            Arc::clone(&live.agent).try_lock_owned().map_err(|_| ApiError::busy(&live.id))?
        };
        // The wait may have been long: the turn before may have failed the session, or the
        // daemon may be stopping.
        live.check_usable(self)?;
        let cancel = self.shutdown.child_token();
        let running = RunningTurn::start(&live, cancel.clone());
        let (done, outcome) = oneshot::channel();
        let task_live = Arc::clone(&live);
        // The turn runs in a task of its own: a client that goes away does not stop it. The task
        // holds the loop's slot until everything — a panic's cleanup included — is logged, so a
        // queued prompt never starts before the session's state is settled.
        self.tasks.spawn(async move {
            let mut slot = slot;
            let _running = running;
            let live = task_live;
            let agent = slot.get_or_insert_with(|| {
                Agent::new(
                    provider,
                    Arc::clone(&live.toolbox),
                    Arc::clone(&live.approvals) as Arc<dyn Approver>,
                    live.agent_config.clone(),
                    &live.workspace,
                )
            });
            let turn = async {
                // Debug builds only: lets tests prove that a panicking turn fails its session
                // and nothing else (see `tests/daemon`).
                #[cfg(debug_assertions)]
                if std::env::var("DSH_DEBUG_PANIC_ON_PROMPT").is_ok_and(|trigger| trigger == text) {
                    panic!("DSH_DEBUG_PANIC_ON_PROMPT matched the prompt");
                }
                agent.run_turn(&live.handle, &text, &cancel).await
            };
            let result = match AssertUnwindSafe(turn).catch_unwind().await {
                Ok(result) => result.map_err(|error| {
                    if matches!(
                        error,
                        dsh_agent::AgentError::Store(_) | dsh_agent::AgentError::Invariant { .. }
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
    ) -> ApiResult<dsh_protocol::SessionCompactResult> {
        use dsh_agent::{CompactOutcome, ContextConfig, compact_now};
        live.check_usable(self)?;
        let provider = self.provider()?;
        // Holding the loop's slot keeps turns out while the surface is rewritten.
        let slot =
            Arc::clone(&live.agent).try_lock_owned().map_err(|_| ApiError::busy(&live.id))?;
        let header_model = live
            .handle
            .query(|s| s.header().map(|h| h.config.model.clone()))
            .await
            .map_err(ApiError::from_agent)?;
        let config = &live.agent_config;
        let model = config
            .overrides
            .model
            .clone()
            .or(header_model)
            .unwrap_or_else(|| config.default_call.model.clone());
        let context =
            config.context.resolve(&model).unwrap_or_else(|| ContextConfig::for_model(&model));
        let cancel = self.shutdown.child_token();
        let running = RunningTurn::start(&live, cancel.clone());
        // Like a turn, the compaction runs to its end in a tracked task, whatever the caller does.
        let handle = live.handle.clone();
        let task = self.tasks.spawn(async move {
            let _slot = slot;
            let _running = running;
            compact_now(&provider, &handle, &context, &model, &cancel).await
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
        Ok(dsh_protocol::SessionCompactResult { compacted, seq, message })
    }

    /// Drops every session from memory (their owner tasks close the logs).
    pub fn unload_all(&self) {
        lock(&self.sessions).clear();
    }
}

fn overrides(config: &SessionConfig) -> CallOverrides {
    CallOverrides {
        model: config.model.clone(),
        max_tokens: config.max_tokens,
        thinking: config.thinking,
        reasoning_effort: config.reasoning_effort.clone(),
        temperature: config.temperature,
    }
}

impl LiveSession {
    /// Whether a turn is running.
    pub fn is_running(&self) -> bool {
        lock(&self.running).is_some()
    }

    /// Cancels the running turn; false when none runs.
    pub fn cancel(&self) -> bool {
        match lock(&self.running).as_ref() {
            Some((_, token)) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// Refuses a session that failed, or any work once the daemon is stopping.
    fn check_usable(&self, daemon: &Daemon) -> ApiResult<()> {
        if let Some(reason) = self.failed() {
            return Err(ApiError::unavailable(format!("session {} failed: {reason}", self.id)));
        }
        if daemon.shutdown.is_cancelled() {
            return Err(ApiError::shutting_down());
        }
        Ok(())
    }

    /// Why the session failed, if it did.
    pub fn failed(&self) -> Option<String> {
        lock(&self.failed).clone()
    }

    fn set_failed(&self, reason: String) {
        lock(&self.failed).get_or_insert(reason);
    }

    async fn mark_failed(&self, reason: &str) {
        self.set_failed(reason.to_owned());
        // Close the turn in the log so it stays well-formed, and say why.
        let message = format!("internal error: {reason}; the session accepts no more turns");
        if let Err(error) = close_open_turn(&self.handle, StopReason::Error, &message).await {
            tracing::error!(session = %self.id, %error, "closing the failed turn");
        }
    }

    /// Answers a pending approval; false when no request with that id waits.
    pub async fn respond(&self, approval_id: &str, verdict: ApprovalVerdict) -> bool {
        if self.approvals.respond(approval_id, verdict) {
            return true;
        }
        // The loop logs `approval/request` (subscribers see it at once) before it asks the
        // approver, so a quick answer can arrive before anyone waits for it: when the log has
        // the request and no decision yet, keep the answer for the approver.
        let id = approval_id.to_owned();
        let awaiting =
            self.handle.query(move |s| awaiting_decision(s.events(), &id)).await.unwrap_or(false);
        awaiting && self.approvals.respond_early(approval_id, verdict)
    }
}

/// Whether the log has an `approval/request` with this id and no decision for it yet.
fn awaiting_decision(events: &[Event], approval_id: &str) -> bool {
    events.iter().fold(false, |awaiting, event| match &event.data {
        EventData::ApprovalRequest(request) if request.approval_id == approval_id => true,
        EventData::ApprovalDecision(decision) if decision.approval_id == approval_id => false,
        _ => awaiting,
    })
}

/// Marks a session's turn as running for as long as it lives; clearing on drop only what it set,
/// so a finished turn never clears the next one's token.
struct RunningTurn {
    live: Arc<LiveSession>,
    generation: u64,
}

impl RunningTurn {
    fn start(live: &Arc<LiveSession>, cancel: CancellationToken) -> RunningTurn {
        let generation = live.generation.fetch_add(1, Ordering::SeqCst) + 1;
        *lock(&live.running) = Some((generation, cancel));
        RunningTurn { live: Arc::clone(live), generation }
    }
}

impl Drop for RunningTurn {
    fn drop(&mut self) {
        let mut running = lock(&self.live.running);
        if running.as_ref().is_some_and(|(generation, _)| *generation == self.generation) {
            *running = None;
        }
    }
}

/// One place in a session's prompt queue, given back on drop — also when the waiting call is
/// dropped because its client went away.
struct QueueSlot<'a> {
    live: &'a LiveSession,
}

impl<'a> QueueSlot<'a> {
    fn take(live: &'a LiveSession) -> ApiResult<QueueSlot<'a>> {
        if live.queued.fetch_add(1, Ordering::SeqCst) >= MAX_QUEUED_PROMPTS {
            live.queued.fetch_sub(1, Ordering::SeqCst);
            return Err(ApiError::overloaded("too many prompts are queued for this session"));
        }
        Ok(QueueSlot { live })
    }
}

impl Drop for QueueSlot<'_> {
    fn drop(&mut self) {
        self.live.queued.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Pending approvals of one session, answered by `approval/respond`.
struct Approvals {
    pending: Mutex<PendingApprovals>,
    timeout: Duration,
}

#[derive(Default)]
struct PendingApprovals {
    /// Requests an approver waits on.
    waiting: HashMap<String, oneshot::Sender<ApprovalVerdict>>,
    /// Answers that arrived before the approver started waiting.
    early: HashMap<String, ApprovalVerdict>,
}

impl Approvals {
    fn new(timeout: Duration) -> Self {
        Approvals { pending: Mutex::new(PendingApprovals::default()), timeout }
    }

    fn respond(&self, approval_id: &str, verdict: ApprovalVerdict) -> bool {
        match lock(&self.pending).waiting.remove(approval_id) {
            Some(sender) => sender.send(verdict).is_ok(),
            None => false,
        }
    }

    /// Answers a request that is logged but may not be waited on yet.
    fn respond_early(&self, approval_id: &str, verdict: ApprovalVerdict) -> bool {
        let mut pending = lock(&self.pending);
        match pending.waiting.remove(approval_id) {
            Some(sender) => sender.send(verdict).is_ok(),
            None => {
                pending.early.insert(approval_id.to_owned(), verdict);
                true
            }
        }
    }
}

impl Approver for Approvals {
    fn decide<'a>(
        &'a self,
        request: &'a ApprovalRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ApprovalVerdict> {
        Box::pin(async move {
            let (sender, answer) = oneshot::channel();
            {
                let mut pending = lock(&self.pending);
                if let Some(verdict) = pending.early.remove(&request.approval_id) {
                    return verdict;
                }
                pending.waiting.insert(request.approval_id.clone(), sender);
            }
            // The `approval/request` event is already in the log: subscribers show it and
            // answer with `approval/respond`.
            let verdict = tokio::select! {
                // Cancel-safe: a oneshot receiver can be polled again or dropped.
                answer = answer => answer.unwrap_or(ApprovalVerdict::Deny),
                () = tokio::time::sleep(self.timeout) => ApprovalVerdict::Timeout,
                () = cancel.cancelled() => ApprovalVerdict::Deny,
            };
            lock(&self.pending).waiting.remove(&request.approval_id);
            verdict
        })
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        ApiError::from_store(error)
    }
}
