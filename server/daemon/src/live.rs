//! One session held in memory, and its turn state in one place.
//!
//! # Tasks and locks of a live session
//! - **The owner task** (`dsh_agent::spawn_owner`): the only writer of the session's log. Every
//!   append, query and subscription is a command to it; it fans events out through a bounded
//!   broadcast. It is not a lock: commands queue on its channel.
//! - **The turn task** (spawned by [`crate::daemon::Daemon::prompt`], tracked by the daemon's
//!   `TaskTracker`): runs one turn (or one manual compaction) to its end, whatever the client
//!   that asked does.
//! - **The loop slot** (`agent`, a `tokio::sync::Mutex<Option<Agent>>`): held by the turn task
//!   for the whole turn, across every await of it — that is its purpose: a queued prompt waits
//!   on it, a `reject` prompt tries it and answers "busy". An async mutex, because it is held
//!   across awaits; nothing else is ever locked while it is awaited.
//! - **The turn state** (`state`, a `std::sync::Mutex<TurnState>`): the running turn (its
//!   generation and cancel token), the queued-prompt count, the failure, and the approvals that
//!   wait for an answer. A plain mutex (as in mini-redis's `Db`): every critical section is a
//!   few field reads and writes, never an await, so it is never held across one (clippy's
//!   `await_holding_lock` is denied) and a blocking lock costs less than an async one.
//! - **The two wire memos** (`wire_memo`, the view's; `loop_wire`, the loop's; each a
//!   `std::sync::Mutex<WireCache>`) and **the usage fold** (`usage`): held only on blocking
//!   threads or around one synchronous call, never across an await. The loop locks `loop_wire`
//!   alone, around one body; `session/request` locks `wire_memo`, then `loop_wire` briefly to
//!   copy it (always in that order); the unloader only tries them (`try_lock`, under the daemon's
//!   map of sessions), so it never waits on a long serialization.
//!
//! One lock for all of it means the questions that used to span several atomics ("is this
//! still my turn?", "may one more prompt queue?") are answered under one guard, with no
//! interleaving to reason about.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use dsh_agent::approval::{Approver, BoxFuture};
use dsh_agent::tools::Toolbox;
use dsh_agent::{Agent, AgentConfig, SessionHandle, close_open_turn};
use dsh_session::{ApprovalRequest, ApprovalVerdict, StopReason};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::error::{ApiError, ApiResult};

/// Prompts that may wait behind a running turn, per session, before the daemon answers
/// "overloaded" instead of queueing more.
pub const MAX_QUEUED_PROMPTS: usize = 16;

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
    /// The loop slot: the loop instance, built at the first prompt (the provider may not be
    /// configured before); locked for the duration of a turn (see the module doc).
    pub(crate) agent: Arc<tokio::sync::Mutex<Option<Agent>>>,
    pub(crate) agent_config: AgentConfig,
    /// Where its requests go, asked at every step (the configuration as it is then).
    pub(crate) endpoints: Arc<dyn dsh_agent::Endpoints>,
    /// The wire body `session/request` serialized last, so the next one that extends it (the
    /// same step again, a later step) serializes only what is new.
    pub(crate) wire_memo: Arc<Mutex<dsh_provider::WireCache>>,
    /// The loop's own memo (its last request's body), which `session/request` copies when its
    /// own does not extend the step asked for: the step the loop just sent is then at hand.
    pub(crate) loop_wire: Arc<Mutex<dsh_provider::WireCache>>,
    /// Whether a background preparation of `wire_memo` is under way (one at a time).
    pub(crate) priming: Arc<std::sync::atomic::AtomicBool>,
    /// The usage view, advanced over the events logged since `session/usage` last asked:
    /// editors ask after every step, and a fold of a long log each time held the owner task
    /// (and the turn's appends) for milliseconds. It holds a row per step and its own copy of
    /// the request header (not counted by the loaded-sessions budget: see `weight`).
    pub(crate) usage: Mutex<dsh_session::UsageFold>,
    pub(crate) toolbox: Arc<Toolbox>,
    /// The MCP tools of its workspace (their servers run while a session of it is loaded).
    pub(crate) mcp_tools: Arc<crate::mcp::WorkspaceTools>,
    state: Arc<Mutex<TurnState>>,
    approval_timeout: Duration,
    /// When a call last named this session (ms since the daemon started): idle sessions are
    /// unloaded, least recently used first.
    last_used: std::sync::atomic::AtomicU64,
}

/// Everything about a session's turns that changes while it is loaded (see the module doc).
#[derive(Default)]
struct TurnState {
    /// The running turn (or compaction).
    running: Option<Running>,
    /// Turns started so far: tells a finished turn's cleanup from the next turn's start.
    generation: u64,
    /// Prompts waiting for the loop slot.
    queued: usize,
    /// Set when the session failed; it accepts no more turns.
    failed: Option<String>,
    /// Approval requests a tool call waits on, by approval id.
    approvals: HashMap<String, oneshot::Sender<ApprovalVerdict>>,
}

struct Running {
    generation: u64,
    cancel: CancellationToken,
}

fn lock(state: &Mutex<TurnState>) -> MutexGuard<'_, TurnState> {
    // A poisoned lock only means a panic happened while it was held; every critical section
    // leaves the fields consistent, so keep going.
    state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl LiveSession {
    /// A live session over a started owner.
    // Each argument is one of the session's parts; a struct would only rename them.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        id: String,
        handle: SessionHandle,
        path: PathBuf,
        workspace: PathBuf,
        agent_config: AgentConfig,
        endpoints: Arc<dyn dsh_agent::Endpoints>,
        toolbox: Toolbox,
        mcp_tools: Arc<crate::mcp::WorkspaceTools>,
        approval_timeout: Duration,
    ) -> LiveSession {
        LiveSession {
            id,
            handle,
            path,
            workspace,
            agent: Arc::new(tokio::sync::Mutex::new(None)),
            agent_config,
            endpoints,
            wire_memo: Arc::default(),
            loop_wire: Arc::default(),
            priming: Arc::default(),
            usage: Mutex::default(),
            toolbox: Arc::new(toolbox),
            mcp_tools,
            state: Arc::default(),
            approval_timeout,
            last_used: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Records a use at `now_ms` (ms since the daemon started).
    pub(crate) fn touch(&self, now_ms: u64) {
        self.last_used.fetch_max(now_ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// When it was last used (ms since the daemon started).
    pub(crate) fn last_used(&self) -> u64 {
        self.last_used.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// What it weighs against the loaded-sessions budget, in bytes: its log (the events in
    /// memory are about as large) and the request bodies its two memos hold — the loop's last
    /// and the one "what the model saw" serialized last, tens of megabytes each for a long
    /// conversation. A body the two share is counted twice, and a memo in use right now (being
    /// filled, behind its lock) is not counted at all until the next look.
    pub(crate) fn weight(&self) -> u64 {
        let log = std::fs::metadata(&self.path).map_or(0, |meta| meta.len());
        let held = |memo: &Mutex<dsh_provider::WireCache>| match memo.try_lock() {
            Ok(memo) => memo.memoized_bytes() as u64,
            Err(std::sync::TryLockError::Poisoned(memo)) => {
                memo.into_inner().memoized_bytes() as u64
            }
            Err(std::sync::TryLockError::WouldBlock) => 0,
        };
        log + held(&self.wire_memo) + held(&self.loop_wire)
    }

    /// Whether it must stay loaded: a turn runs, prompts wait, approvals wait, or it failed (a
    /// reload would forget the failure and accept turns again).
    pub(crate) fn is_busy(&self) -> bool {
        let state = lock(&self.state);
        state.running.is_some()
            || state.queued > 0
            || !state.approvals.is_empty()
            || state.failed.is_some()
    }

    /// The approver the session's loop asks: it routes each question to the clients, which
    /// answer with `approval/respond` ([`LiveSession::respond`]).
    pub(crate) fn approver(&self) -> Arc<dyn Approver> {
        Arc::new(SessionApprover { state: Arc::clone(&self.state), timeout: self.approval_timeout })
    }

    /// Whether a turn is running.
    pub fn is_running(&self) -> bool {
        lock(&self.state).running.is_some()
    }

    /// Cancels the running turn; false when none runs.
    pub fn cancel(&self) -> bool {
        match &lock(&self.state).running {
            Some(running) => {
                running.cancel.cancel();
                true
            }
            None => false,
        }
    }

    /// Why the session failed, if it did.
    pub fn failed(&self) -> Option<String> {
        lock(&self.state).failed.clone()
    }

    /// Refuses a session that failed.
    pub(crate) fn check_not_failed(&self) -> ApiResult<()> {
        match self.failed() {
            Some(reason) => {
                Err(ApiError::unavailable(format!("session {} failed: {reason}", self.id)))
            }
            None => Ok(()),
        }
    }

    /// Marks the session failed (the first reason stays).
    pub(crate) fn set_failed(&self, reason: String) {
        lock(&self.state).failed.get_or_insert(reason);
    }

    /// Marks the session failed and closes its open turn in the log, saying why.
    pub(crate) async fn mark_failed(&self, reason: &str) {
        self.set_failed(reason.to_owned());
        let message = format!("internal error: {reason}; the session accepts no more turns");
        if let Err(error) = close_open_turn(&self.handle, StopReason::Error, &message).await {
            tracing::error!(session = %self.id, %error, "closing the failed turn");
        }
    }

    /// Answers a pending approval; false when no tool call waits on that id (answered,
    /// timed out, withdrawn, or never asked). The waiter is registered before the request is
    /// logged, so no client can see a request that cannot be answered yet.
    pub fn respond(&self, approval_id: &str, verdict: ApprovalVerdict) -> bool {
        let waiter = lock(&self.state).approvals.remove(approval_id);
        waiter.is_some_and(|sender| sender.send(verdict).is_ok())
    }
}

/// Marks a session's turn as running for as long as it lives; clears on drop only what it set,
/// so a finished turn never clears the next one's token.
pub(crate) struct RunningTurn {
    live: Arc<LiveSession>,
    generation: u64,
}

impl RunningTurn {
    pub(crate) fn start(live: &Arc<LiveSession>, cancel: CancellationToken) -> RunningTurn {
        let mut state = lock(&live.state);
        state.generation += 1;
        let generation = state.generation;
        state.running = Some(Running { generation, cancel });
        RunningTurn { live: Arc::clone(live), generation }
    }
}

impl Drop for RunningTurn {
    fn drop(&mut self) {
        let mut state = lock(&self.live.state);
        if state.running.as_ref().is_some_and(|running| running.generation == self.generation) {
            state.running = None;
        }
    }
}

/// One place in a session's prompt queue, given back on drop — also when the waiting call is
/// dropped because its client went away.
pub(crate) struct QueueSlot<'a> {
    live: &'a LiveSession,
}

impl<'a> QueueSlot<'a> {
    pub(crate) fn take(live: &'a LiveSession) -> ApiResult<QueueSlot<'a>> {
        let mut state = lock(&live.state);
        if state.queued >= MAX_QUEUED_PROMPTS {
            return Err(ApiError::overloaded("too many prompts are queued for this session"));
        }
        state.queued += 1;
        Ok(QueueSlot { live })
    }
}

impl Drop for QueueSlot<'_> {
    fn drop(&mut self) {
        lock(&self.live.state).queued -= 1;
    }
}

/// The daemon's [`Approver`]: each question waits in the session's turn state for
/// `approval/respond`, the approval timeout, or the turn's cancellation.
struct SessionApprover {
    state: Arc<Mutex<TurnState>>,
    timeout: Duration,
}

/// Withdraws a question when its wait ends or is dropped (a cancelled turn).
struct Withdraw {
    state: Arc<Mutex<TurnState>>,
    approval_id: String,
}

impl Drop for Withdraw {
    fn drop(&mut self) {
        lock(&self.state).approvals.remove(&self.approval_id);
    }
}

impl Approver for SessionApprover {
    fn ask(
        &self,
        request: &ApprovalRequest,
        cancel: &CancellationToken,
    ) -> BoxFuture<'static, ApprovalVerdict> {
        // Registered now, before the loop logs `approval/request`: an answer that arrives as
        // soon as a client sees the request finds its waiter.
        let (sender, answer) = oneshot::channel();
        lock(&self.state).approvals.insert(request.approval_id.clone(), sender);
        let withdraw =
            Withdraw { state: Arc::clone(&self.state), approval_id: request.approval_id.clone() };
        let timeout = self.timeout;
        let cancel = cancel.clone();
        Box::pin(async move {
            let _withdraw = withdraw;
            tokio::select! {
                // Cancel-safe: a oneshot receiver can be polled again or dropped.
                answer = answer => answer.unwrap_or(ApprovalVerdict::Deny),
                // Cancel-safe: a sleep holds no state.
                () = tokio::time::sleep(timeout) => ApprovalVerdict::Timeout,
                // Cancel-safe.
                () = cancel.cancelled() => ApprovalVerdict::Deny,
            }
        })
    }
}
