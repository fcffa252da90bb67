//! One handler per API method (the method table is `api.rs`). Each takes the method's params
//! as the protocol's types and returns its result or an [`ApiError`]. Here: the sessions'
//! methods, and how a handler reaches a session's log; `handlers/daemon.rs` has the daemon's
//! and MCP's, `handlers/subscribe.rs` the session subscription and the API's event.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use dsh_protocol::method;
use dsh_protocol::{
    ApprovalChoice, ApprovalRespondParams, ApprovalRespondResult, Capabilities, DaemonKeysParams,
    DaemonKeysResult, DaemonNotice, DaemonShutdownResult, DaemonStatusResult, InitializeParams,
    InitializeResult, LoadedSession, McpListParams, McpListResult, NoParams, PROTOCOL_VERSION,
    SandboxFeature, SandboxStatus, ServerInfo, SessionAuditResult, SessionCancelResult,
    SessionCompactResult, SessionCreateParams, SessionEvent, SessionEventsParams,
    SessionEventsResult, SessionForkParams, SessionIdResult, SessionInjectParams,
    SessionInjectResult, SessionListParams, SessionListResult, SessionMcpServersParams,
    SessionMcpServersResult, SessionParams, SessionPlanResult, SessionPromptParams,
    SessionPromptResult, SessionRequestParams, SessionRequestResult, SessionSummary,
    SessionUsageResult, TurnLimits, WhenBusy,
};
use dsh_session::{
    ApprovalVerdict, EVENT_KINDS, Event, EventData, ReconstructError, SteeringMessage, StepRequest,
    UsageFold, reconstruct_step,
};
use jsonrpsee::types::Params;
use jsonrpsee::{PendingSubscriptionSink, SubscriptionMessage};
use tokio::sync::broadcast;

use crate::api::parse;
use crate::daemon::{Daemon, ForkAt};
use crate::error::{ApiError, ApiResult};
use crate::live::LiveSession;
use crate::views;

mod daemon;
mod subscribe;

use daemon::own_servers;
pub use daemon::*;
pub use subscribe::*;

/// Most events one `session/events` page returns.
const MAX_EVENTS_PAGE: u64 = 1000;

/// About the most bytes of events one `session/events` page returns (a page always holds at
/// least one event, however large); `nextSeq` says where the next page starts.
pub const MAX_EVENTS_PAGE_BYTES: usize = 4 * 1024 * 1024;

/// `session/create`.
pub fn session_create(
    daemon: &Arc<Daemon>,
    params: SessionCreateParams,
) -> ApiResult<SessionIdResult> {
    let mut config = params.config.unwrap_or_default();
    if params.model.is_some() {
        config.model = params.model;
    }
    // Servers are checked first: a refused list creates nothing.
    let servers = params.mcp_servers.map(own_servers).transpose()?;
    let images = params.images.unwrap_or(false);
    let (live, wanted) =
        daemon.create_checked(&params.workspace, &config, |workspace, pinned| {
            if images {
                daemon.check_reads_images(workspace, pinned, |model| {
                    format!(
                        "{model} does not read images (set `images = true` for it in your \
                     configuration when it does, docs/config.md): no session was created"
                    )
                })?;
            }
            let Some(servers) = servers else { return Ok(None) };
            // A configuration that cannot be used is `config` (1012), as for the session itself.
            let configured = daemon.config_for(workspace)?;
            crate::mcp::own_configs(|| Ok(configured), servers)
                .map(Some)
                .map_err(ApiError::invalid_params)
        })?;
    if let Some(wanted) = wanted {
        live.mcp_tools.give_own_configs(&wanted);
    }
    Ok(SessionIdResult { session_id: live.id.clone() })
}

/// `session/list`: one workspace's sessions, or every session of the home.
pub fn session_list(
    daemon: &Arc<Daemon>,
    params: SessionListParams,
) -> ApiResult<SessionListResult> {
    if params.workspace.as_deref().is_some_and(|w| !Path::new(w).is_absolute()) {
        return Err(ApiError::invalid_workspace("workspace must be an absolute path"));
    }
    let listing = match &params.workspace {
        Some(workspace) => daemon
            .home()
            .workspace(Path::new(workspace))
            .map_err(|e| ApiError::invalid_workspace(e.to_string()))?
            .list_sessions()?,
        None => daemon.home().list_all_sessions()?,
    };
    let running: Vec<String> =
        daemon.loaded().iter().filter(|s| s.is_running()).map(|s| s.id.clone()).collect();
    // A log that cannot be read is listed with its error, never dropped.
    let broken = listing.errors.into_iter().map(|(path, error)| SessionSummary {
        session_id: path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
        workspace: params.workspace.clone().unwrap_or_default(),
        title: None,
        created_ms: 0,
        updated_ms: 0,
        turns: 0,
        steps: 0,
        forked_from: None,
        parent: None,
        last_usage: None,
        profile: None,
        model: None,
        cost: None,
        running: false,
        error: Some(error.to_string()),
    });
    // Prices are the workspace's configuration: resolved once per workspace listed.
    let mut configs: std::collections::HashMap<String, Option<Arc<dsh_config::Config>>> =
        std::collections::HashMap::new();
    let mut sessions: Vec<SessionSummary> = listing
        .sessions
        .into_iter()
        .map(|summary| SessionSummary {
            cost: configs
                .entry(summary.workspace.clone())
                .or_insert_with(|| daemon.config_for(Path::new(&summary.workspace)).ok())
                .as_ref()
                .and_then(|config| views::cost_of(config, &summary.usage_by_model)),
            profile: summary.pinned.as_ref().and_then(|(profile, _)| profile.clone()),
            model: summary.pinned.as_ref().map(|(_, model)| model.clone()),
            running: running.contains(&summary.id),
            session_id: summary.id,
            workspace: summary.workspace,
            title: summary.title,
            created_ms: summary.created_ms,
            updated_ms: summary.updated_ms,
            turns: summary.turns,
            steps: summary.steps,
            forked_from: summary.forked_from,
            parent: summary.parent,
            last_usage: summary.last_usage,
            error: None,
        })
        .chain(broken)
        .collect();
    sessions.sort_by(|a, b| a.session_id.cmp(&b.session_id));
    Ok(SessionListResult { sessions })
}

/// `session/prompt`: runs a turn (or queues it) and answers when it ends.
pub async fn session_prompt(
    daemon: Arc<Daemon>,
    params: SessionPromptParams,
) -> ApiResult<SessionPromptResult> {
    // An empty prompt says nothing, and some formats refuse it in every later request.
    if params.text.trim().is_empty() {
        return Err(ApiError::invalid_params("prompt text is empty"));
    }
    let limits = turn_limits(params.limits.unwrap_or_default())?;
    let output = params.output_schema.map(output_schema).transpose()?;
    let live = load(&daemon, &params.session_id).await?;
    let queue = params.when_busy.unwrap_or_default() == WhenBusy::Queue;
    let outcome = daemon
        .prompt_with_images(live, params.text, params.attachments, queue, limits, output)
        .await?;
    Ok(SessionPromptResult {
        turn: outcome.turn,
        stop_reason: outcome.stop_reason,
        steps: outcome.steps,
        usage: outcome.usage,
        error: outcome.error,
        limit: outcome.limit,
        output: outcome.output,
        output_errors: outcome.output_errors,
    })
}

/// The turn's output schema from `session/prompt`'s `outputSchema`, checked and compiled before
/// anything is logged: one that is not a valid JSON Schema is refused.
fn output_schema(schema: serde_json::Value) -> ApiResult<dsh_agent::OutputSchema> {
    dsh_agent::OutputSchema::new(schema)
        .map_err(|problem| ApiError::invalid_params(format!("outputSchema: {problem}")))
}

/// The loop's budgets from `session/prompt`'s `limits`: each must be positive (a finite
/// number of seconds for the timeout), else the prompt is refused before anything runs.
fn turn_limits(limits: TurnLimits) -> ApiResult<dsh_agent::TurnLimits> {
    let count = |name: &str, value: Option<i64>| match value {
        Some(count) if count < 1 => {
            Err(ApiError::invalid_params(format!("limits.{name} must be at least 1, not {count}")))
        }
        value => Ok(value.map(i64::unsigned_abs)),
    };
    let amount = |name: &str, value: Option<f64>| match value {
        Some(amount) if !(amount > 0.0 && amount.is_finite()) => Err(ApiError::invalid_params(
            format!("limits.{name} must be more than 0, not {amount}"),
        )),
        value => Ok(value),
    };
    let timeout = amount("timeoutSecs", limits.timeout_secs)?
        .map(|secs| {
            Duration::try_from_secs_f64(secs).map_err(|_| {
                ApiError::invalid_params(format!("limits.timeoutSecs is too large: {secs}"))
            })
        })
        .transpose()?;
    Ok(dsh_agent::TurnLimits {
        max_steps: count("maxSteps", limits.max_steps)?,
        max_tokens: count("maxTokens", limits.max_tokens)?,
        max_cost: amount("maxCost", limits.max_cost)?,
        timeout,
    })
}

/// `session/inject`: a steering message, logged now; it joins the next request.
pub async fn session_inject(
    daemon: Arc<Daemon>,
    params: SessionInjectParams,
) -> ApiResult<SessionInjectResult> {
    if params.text.trim().is_empty() {
        return Err(ApiError::invalid_params("steering text is empty"));
    }
    let live = load(&daemon, &params.session_id).await?;
    let event = live
        .handle
        .append(EventData::SteeringMessage(SteeringMessage { text: params.text }))
        .await?;
    Ok(SessionInjectResult { seq: event.seq })
}

/// `session/cancel`.
pub async fn session_cancel(
    daemon: Arc<Daemon>,
    params: SessionParams,
) -> ApiResult<SessionCancelResult> {
    let live = load(&daemon, &params.session_id).await?;
    Ok(SessionCancelResult { cancelled: live.cancel() })
}

/// `session/fork`.
pub fn session_fork(daemon: &Arc<Daemon>, params: SessionForkParams) -> ApiResult<SessionIdResult> {
    let at = match (params.at_seq, params.at_step) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid_params("give `atSeq` or `atStep`, not both"));
        }
        (Some(seq), None) => ForkAt::Seq(seq),
        (None, Some(step)) => ForkAt::Step(step),
        (None, None) => ForkAt::End,
    };
    let config = params.config.unwrap_or_default();
    let live = daemon.fork(&params.session_id, at, &config)?;
    Ok(SessionIdResult { session_id: live.id.clone() })
}

/// `session/request`: "what the model saw" at a step, rebuilt by a fresh fold over the events
/// before its boundary (the live surface never vouches for its structure; it lends only the
/// messages it projected from the same events).
pub async fn session_request(
    daemon: Arc<Daemon>,
    params: SessionRequestParams,
) -> ApiResult<SessionRequestResult> {
    let step = params.step;
    let diff = params.diff.unwrap_or(false) && step > 1;
    let (rebuilt, previous) = with_log(&daemon, &params.session_id, move |log| {
        let rebuilt = log.reconstruct(step);
        let previous = diff.then(|| log.reconstruct(step - 1));
        (rebuilt, previous)
    })
    .await?;
    let mut rebuilt = rebuilt.map_err(ApiError::from_reconstruct)?;
    rebuilt.request.images =
        step_images(&daemon, &params.session_id, step, &rebuilt.request.messages).await?;
    // Held from here to the end of the answer: a session answering is not idle, so the unloader
    // does not close it halfway (a reload would then serialize the same body a second time).
    let live = daemon.loaded_session(&params.session_id);
    let previous_images = match &previous {
        Some(Ok(previous)) => {
            step_images(&daemon, &params.session_id, step - 1, &previous.request.messages).await?
        }
        _ => dsh_session::ImageData::default(),
    };
    // Serializing a long conversation takes a while: not on the runtime's threads.
    blocking(move || {
        let mut result = match &live {
            None => views::request_result(&rebuilt, views::Body::Fresh),
            Some(live) => {
                let (memo, loop_wire) = (&live.wire_memo, &live.loop_wire);
                let mut memo = memo.lock().unwrap_or_else(PoisonError::into_inner);
                // The loop's memo may hold this very request (the step it just sent): taking
                // it as the view's memo (a compare and a copy of shared pieces) is cheaper than
                // serializing and hashing again. Copied first: the loop never waits for the
                // compare.
                if !memo.adopt(&rebuilt.request) {
                    let mut copy = loop_wire.lock().unwrap_or_else(PoisonError::into_inner).clone();
                    if copy.adopt(&rebuilt.request) {
                        *memo = copy;
                    }
                }
                views::request_result(&rebuilt, views::Body::Memo(&mut memo))
            }
        };
        if let Some(previous) = previous {
            let mut previous = previous.map_err(ApiError::from_reconstruct)?;
            previous.request.images = previous_images;
            result.diff = Some(views::diff_text(&previous, &result));
        }
        Ok(result)
    })
    .await
}

/// The bytes of the images `messages` (step `step` of session `id`) name, from the workspace's
/// object store: an image that cannot be read is an error naming the session, the step and the
/// hash — a rebuilt request never silently lacks one.
async fn step_images(
    daemon: &Arc<Daemon>,
    id: &str,
    step: u64,
    messages: &[Arc<dsh_session::Message>],
) -> ApiResult<dsh_session::ImageData> {
    let refs: Vec<dsh_session::ImageRef> =
        dsh_session::image_refs(messages).into_iter().cloned().collect();
    if refs.is_empty() {
        return Ok(dsh_session::ImageData::default());
    }
    let dir = dsh_store::objects_dir_of_log(&daemon.session_path(id)?);
    let id = id.to_owned();
    blocking(move || {
        let (images, failed) = crate::images::load_images(dir.as_deref(), &refs);
        match failed.into_iter().next() {
            None => Ok(images),
            Some((image, why)) => Err(ApiError::store(format!(
                "session {id}, step {step}: image {} cannot be read: {why}",
                image.sha256
            ))),
        }
    })
    .await
}

/// `session/usage`: per-step usage with the logged cause of every cache drop.
pub async fn session_usage(
    daemon: Arc<Daemon>,
    params: SessionParams,
) -> ApiResult<SessionUsageResult> {
    let (rows, workspace, call, pin, spawns) = with_log(&daemon, &params.session_id, |log| {
        let answer = |usage: &UsageFold, events: &[Event]| {
            let call = usage.header().map(|header| header.config.clone());
            let pin = match events.first().map(|event| &event.data) {
                Some(EventData::SessionMeta(meta)) => meta.pin.clone(),
                _ => None,
            };
            let spawns = crate::subagents::own_children(events);
            (usage.rows().to_vec(), views::workspace_of(events), call, pin, spawns)
        };
        match log {
            Log::Loaded(session, live) => {
                let mut usage = live.usage.lock().unwrap_or_else(PoisonError::into_inner);
                usage.advance(session.events());
                answer(&usage, session.events())
            }
            Log::File(events) => {
                let mut usage = UsageFold::default();
                usage.advance(events);
                answer(&usage, events)
            }
        }
    })
    .await?;
    let config = workspace.and_then(|workspace| daemon.config_for(&workspace).ok());
    let next = views::next_model(config.as_deref(), call.as_ref(), pin.as_ref());
    let mut result = views::usage_result(rows, config.as_deref(), next);
    if !spawns.is_empty() {
        let daemon = Arc::clone(&daemon);
        let children = blocking(move || {
            Ok(crate::subagents::children_usage(&daemon, &spawns, config.as_deref(), 0))
        })
        .await?;
        result.with_children = Some(crate::subagents::with_children(&result, &children));
        result.children = children;
    }
    Ok(result)
}

/// `session/plan`: the session's current plan, the last `plan/update` of its log.
pub async fn session_plan(
    daemon: Arc<Daemon>,
    params: SessionParams,
) -> ApiResult<SessionPlanResult> {
    let current = with_events(&daemon, &params.session_id, dsh_session::current_plan).await?;
    Ok(SessionPlanResult::from_current(current))
}

/// `session/commands`: the prompt commands and skills of the session's workspace.
pub async fn session_commands(
    daemon: Arc<Daemon>,
    params: SessionParams,
) -> ApiResult<dsh_protocol::SessionCommandsResult> {
    let live = load(&daemon, &params.session_id).await?;
    let root = live.toolbox.workspace().root().to_path_buf();
    let settings = Arc::clone(&daemon.settings);
    let (commands, skills) =
        tokio::task::spawn_blocking(move || crate::commands::list(&settings, &root))
            .await
            .map_err(|_| ApiError::unavailable("listing the commands failed"))?;
    Ok(dsh_protocol::SessionCommandsResult { commands, skills })
}

/// `session/events`: a page of the log's events, bounded in count and in bytes.
pub async fn session_events(
    daemon: Arc<Daemon>,
    params: SessionEventsParams,
) -> ApiResult<SessionEventsResult> {
    let SessionEventsParams { session_id, from_seq, limit } = params;
    let id = session_id.clone();
    let (page, len) = with_events(&daemon, &session_id, move |events| {
        let len = events.len() as u64;
        if from_seq > len {
            return (None, len);
        }
        let last = (from_seq + limit.min(MAX_EVENTS_PAGE)).min(len);
        let mut page = Vec::new();
        let mut bytes = 0;
        for event in &events[from_seq as usize..last as usize] {
            let size = dsh_session::encode_event(event).len();
            if !page.is_empty() && bytes + size > MAX_EVENTS_PAGE_BYTES {
                break;
            }
            bytes += size;
            page.push(api_event(&id, event, events));
        }
        (Some(page), len)
    })
    .await?;
    let Some(page) = page else {
        return Err(ApiError::out_of_range(format!(
            "fromSeq {from_seq} is beyond the end of the log ({len} events)"
        )));
    };
    let end = from_seq + page.len() as u64;
    Ok(SessionEventsResult { events: page, next_seq: end, end: end == len, length: len })
}

/// `session/compact`.
pub async fn session_compact(
    daemon: Arc<Daemon>,
    params: SessionParams,
) -> ApiResult<SessionCompactResult> {
    let live = load(&daemon, &params.session_id).await?;
    daemon.compact(live).await
}

/// `session/audit`: every step rebuilt from the log file and compared with `request/sent`.
pub fn session_audit(daemon: &Arc<Daemon>, params: SessionParams) -> ApiResult<SessionAuditResult> {
    let path = daemon.session_path(&params.session_id)?;
    Ok(views::audit_file(&path)?)
}

/// `approval/respond`: the answer to a pending approval request.
pub async fn approval_respond(
    daemon: Arc<Daemon>,
    params: ApprovalRespondParams,
) -> ApiResult<ApprovalRespondResult> {
    let live = load(&daemon, &params.session_id).await?;
    let verdict = match params.decision {
        ApprovalChoice::Allow => ApprovalVerdict::Allow,
        ApprovalChoice::Deny => ApprovalVerdict::Deny,
        ApprovalChoice::AllowAlways => ApprovalVerdict::AllowAlways,
        ApprovalChoice::AllowUnconfined => ApprovalVerdict::AllowUnconfined,
    };
    if !live.respond(&params.approval_id, verdict) {
        return Err(ApiError::approval_not_found(&params.session_id, &params.approval_id));
    }
    Ok(ApprovalRespondResult { accepted: true })
}

/// Runs `view` over session `id`'s events: the loaded session's (loading it if needed; they are
/// the events its log file holds — each is written, then folded), in its owner task, or the log
/// file's when another process holds it. The daemon's reader permits bound how many run at
/// once.
pub(crate) async fn with_events<R: Send + 'static>(
    daemon: &Arc<Daemon>,
    id: &str,
    view: impl FnOnce(&[Event]) -> R + Send + 'static,
) -> ApiResult<R> {
    with_log(daemon, id, move |log| view(log.events())).await
}

/// A session's log as a view reads it: loaded (with the fold's indexes and the views kept
/// beside it) or from its file.
enum Log<'a> {
    Loaded(&'a dsh_session::Session, &'a LiveSession),
    File(&'a [Event]),
}

impl Log<'_> {
    fn events(&self) -> &[Event] {
        match self {
            Log::Loaded(session, _) => session.events(),
            Log::File(events) => events,
        }
    }

    /// A step's request rebuilt by a fresh fold: from a loaded session over the events that
    /// can shape a request, its messages shared with the session's surface (the same result,
    /// `dsh_session::reconstruct_session_step_shared`).
    fn reconstruct(&self, step: u64) -> Result<StepRequest, ReconstructError> {
        match self {
            Log::Loaded(session, _) => dsh_session::reconstruct_session_step_shared(session, step),
            Log::File(events) => reconstruct_step(events, step),
        }
    }
}

async fn with_log<R: Send + 'static>(
    daemon: &Arc<Daemon>,
    id: &str,
    view: impl FnOnce(Log<'_>) -> R + Send + 'static,
) -> ApiResult<R> {
    let _reading = daemon.readers.acquire().await.map_err(|_| ApiError::shutting_down())?;
    let source = {
        let daemon = Arc::clone(daemon);
        let id = id.to_owned();
        blocking(move || daemon.session_or_file(&id)).await?
    };
    daemon.enforce_budget().await;
    match source {
        Ok(live) => {
            let held = Arc::clone(&live);
            Ok(live.handle.query(move |session| view(Log::Loaded(session, &held))).await?)
        }
        Err(path) => {
            blocking(move || Ok(view(Log::File(&dsh_store::read_log(&path)?.events)))).await
        }
    }
}

/// Loads a session on the blocking pool (opening a log reads and folds it).
pub(crate) async fn load(daemon: &Arc<Daemon>, id: &str) -> ApiResult<Arc<LiveSession>> {
    let live = {
        let daemon = Arc::clone(daemon);
        let id = id.to_owned();
        blocking(move || daemon.session(&id)).await?
    };
    daemon.enforce_budget().await;
    Ok(live)
}

/// Runs `work` on the blocking pool; a panic there is a store error, not the daemon's end.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|_| ApiError::store("a blocking task of the daemon panicked"))?
}
