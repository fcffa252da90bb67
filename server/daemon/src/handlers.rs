//! One handler per API method, in the order of the method table (`api.rs`). Each takes the
//! method's params as the protocol's types and returns its result or an [`ApiError`].

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use dsh_protocol::method;
use dsh_protocol::{
    ApprovalChoice, ApprovalRespondParams, ApprovalRespondResult, Capabilities,
    DaemonShutdownResult, DaemonStatusResult, InitializeParams, InitializeResult, LoadedSession,
    NoParams, PROTOCOL_VERSION, SandboxFeature, SandboxStatus, ServerInfo, SessionAuditResult,
    SessionCancelResult, SessionCompactResult, SessionConfig, SessionCreateParams, SessionEvent,
    SessionEventsParams, SessionEventsResult, SessionForkParams, SessionIdResult,
    SessionInjectParams, SessionInjectResult, SessionListParams, SessionListResult, SessionParams,
    SessionPromptParams, SessionPromptResult, SessionRequestParams, SessionRequestResult,
    SessionSummary, SessionUsageResult, UsageEntry, WhenBusy,
};
use dsh_session::{
    ApprovalVerdict, EVENT_KINDS, Event, EventData, SteeringMessage, reconstruct_step, usage_rows,
    usage_totals,
};
use jsonrpsee::types::Params;
use jsonrpsee::{PendingSubscriptionSink, SubscriptionMessage};
use tokio::sync::broadcast;

use crate::api::parse;
use crate::daemon::Daemon;
use crate::error::{ApiError, ApiResult};
use crate::live::LiveSession;
use crate::views;

/// Most events one `session/events` page returns.
const MAX_EVENTS_PAGE: u64 = 1000;

/// `initialize`: the protocol version must match; answers with what this daemon offers.
pub fn initialize(_: &Daemon, params: InitializeParams) -> ApiResult<InitializeResult> {
    if params.protocol_version != PROTOCOL_VERSION {
        return Err(ApiError::new(
            dsh_protocol::code::UNSUPPORTED_PROTOCOL,
            format!(
                "protocol version {} is not supported; this daemon speaks version {PROTOCOL_VERSION}",
                params.protocol_version
            ),
        ));
    }
    Ok(InitializeResult {
        server_info: ServerInfo {
            name: "dsh".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
        },
        protocol_version: PROTOCOL_VERSION,
        capabilities: Capabilities {
            methods: method::ALL.iter().map(|m| (*m).to_owned()).collect(),
            event_kinds: EVENT_KINDS.iter().map(|k| (*k).to_owned()).collect(),
        },
    })
}

/// `session/create`.
pub fn session_create(
    daemon: &Arc<Daemon>,
    params: SessionCreateParams,
) -> ApiResult<SessionIdResult> {
    let mut config = params.config.unwrap_or_else(default_config);
    if params.model.is_some() {
        config.model = params.model;
    }
    let live = daemon.create(&params.workspace, &config)?;
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
    let sessions = listing
        .sessions
        .into_iter()
        .map(|summary| SessionSummary {
            running: running.contains(&summary.id),
            session_id: summary.id,
            workspace: summary.workspace,
            title: summary.title,
            created_ms: summary.created_ms,
            updated_ms: summary.updated_ms,
            turns: summary.turns,
            steps: summary.steps,
            forked_from: summary.forked_from,
            last_usage: summary.last_usage,
        })
        .collect();
    Ok(SessionListResult { sessions })
}

/// `session/subscribe`: stored events from `fromSeq`, then live ones, with no gap and no
/// duplicate at the seam (both come from one owner command). A subscriber that lags behind the
/// live buffer catches up from the log the same way.
pub async fn session_subscribe(
    params: Params<'static>,
    pending: PendingSubscriptionSink,
    daemon: Arc<Daemon>,
) {
    let params = match parse::<method::SessionSubscribe>(&params) {
        Ok(params) => params,
        Err(error) => return pending.reject(error).await,
    };
    let live = match load(&daemon, &params.session_id).await {
        Ok(live) => live,
        Err(error) => return pending.reject(error).await,
    };
    let mut next = params.from_seq.unwrap_or(0);
    // The log only grows, so a fromSeq within it now stays within it.
    match live.handle.query(|s| s.next_seq()).await {
        Ok(length) if next > length => {
            let message = format!("fromSeq {next} is beyond the end of the log ({length} events)");
            return pending.reject(ApiError::out_of_range(message)).await;
        }
        Ok(_) => {}
        Err(error) => return pending.reject(ApiError::from(error)).await,
    }
    let (mut stored, mut receiver) = match live.handle.subscribe(next).await {
        Ok(subscription) => subscription,
        Err(error) => return pending.reject(ApiError::from(error)).await,
    };
    let Ok(sink) = pending.accept().await else { return };
    let id = sink.subscription_id();
    loop {
        for event in stored.drain(..) {
            if event.seq < next {
                continue;
            }
            next = event.seq + 1;
            let message = SubscriptionMessage::new(
                method::SESSION_EVENT,
                id.clone(),
                &api_event(&live.id, &event),
            );
            let Ok(message) = message else { return };
            if sink.send(message).await.is_err() {
                return;
            }
        }
        // Cancel-safety: `recv` is cancel-safe; `closed` is cancel-safe.
        let received = tokio::select! {
            received = receiver.recv() => received,
            () = sink.closed() => return,
        };
        match received {
            Ok(event) => stored.push(event),
            Err(broadcast::error::RecvError::Lagged(_)) => {
                // Fell behind the live buffer: catch up from the log, without a gap.
                match live.handle.subscribe(next).await {
                    Ok((catch_up, fresh)) => {
                        stored = catch_up;
                        receiver = fresh;
                    }
                    Err(_) => return,
                }
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// `session/prompt`: runs a turn (or queues it) and answers when it ends.
pub async fn session_prompt(
    daemon: Arc<Daemon>,
    params: SessionPromptParams,
) -> ApiResult<SessionPromptResult> {
    let live = load(&daemon, &params.session_id).await?;
    let queue = params.when_busy.unwrap_or_default() == WhenBusy::Queue;
    let outcome = daemon.prompt(live, params.text, queue).await?;
    Ok(SessionPromptResult {
        turn: outcome.turn,
        stop_reason: outcome.stop_reason,
        steps: outcome.steps,
        usage: outcome.usage,
        error: outcome.error,
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
    let config = params.config.unwrap_or_else(default_config);
    let live = daemon.fork(&params.session_id, params.at_seq, &config)?;
    Ok(SessionIdResult { session_id: live.id.clone() })
}

/// `session/request`: "what the model saw" at a step, rebuilt from the log file.
pub fn session_request(
    daemon: &Arc<Daemon>,
    params: SessionRequestParams,
) -> ApiResult<SessionRequestResult> {
    let events = daemon.read_events(&params.session_id)?;
    let rebuilt = reconstruct_step(&events, params.step).map_err(ApiError::from_reconstruct)?;
    let diff = if params.diff.unwrap_or(false) && params.step > 1 {
        let previous =
            reconstruct_step(&events, params.step - 1).map_err(ApiError::from_reconstruct)?;
        Some(views::diff_text(&previous, &rebuilt))
    } else {
        None
    };
    Ok(views::request_result(&rebuilt, diff))
}

/// `session/usage`: per-step usage with the logged cause of every cache drop.
pub async fn session_usage(
    daemon: Arc<Daemon>,
    params: SessionParams,
) -> ApiResult<SessionUsageResult> {
    // A loaded session's fold holds exactly the log's events: fold them where they are rather
    // than re-reading the file (the CLI asks after every step).
    let rows = match daemon.loaded_session(&params.session_id) {
        Some(live) => live.handle.query(|session| usage_rows(session.events())).await?,
        None => {
            let id = params.session_id.clone();
            let events = blocking(move || daemon.read_events(&id)).await?;
            usage_rows(&events)
        }
    };
    let totals = usage_totals(&rows);
    let rows =
        rows.into_iter().map(|row| UsageEntry { explanation: views::explain(&row), row }).collect();
    Ok(SessionUsageResult { rows, totals })
}

/// `session/events`: a page of the log's events.
pub fn session_events(
    daemon: &Arc<Daemon>,
    params: SessionEventsParams,
) -> ApiResult<SessionEventsResult> {
    let events = daemon.read_events(&params.session_id)?;
    let len = events.len() as u64;
    if params.from_seq > len {
        return Err(ApiError::out_of_range(format!(
            "fromSeq {} is beyond the end of the log ({len} events)",
            params.from_seq
        )));
    }
    let limit = params.limit.min(MAX_EVENTS_PAGE);
    let end = (params.from_seq + limit).min(len);
    let page = events[params.from_seq as usize..end as usize]
        .iter()
        .map(|event| api_event(&params.session_id, event))
        .collect();
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

/// `daemon/status`.
pub fn daemon_status(daemon: &Daemon, _: NoParams) -> ApiResult<DaemonStatusResult> {
    Ok(DaemonStatusResult {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        pid: std::process::id(),
        protocol_version: PROTOCOL_VERSION,
        home: daemon.home().root().display().to_string(),
        base_url: daemon.config.base_url.clone(),
        sessions: daemon
            .loaded()
            .iter()
            .map(|s| LoadedSession {
                session_id: s.id.clone(),
                running: s.is_running(),
                failed: s.failed(),
            })
            .collect(),
        clients: daemon.clients.load(Ordering::SeqCst),
        uptime_ms: daemon.started.elapsed().as_millis() as u64,
        sandbox: sandbox_status(daemon.sandbox.status()),
    })
}

/// The sandbox's status in the API's terms.
pub fn sandbox_status(status: &dsh_sandbox::SandboxStatus) -> SandboxStatus {
    SandboxStatus {
        policy: status.policy.clone(),
        network: status.network,
        features: status
            .features
            .iter()
            .map(|feature| SandboxFeature {
                name: feature.name.clone(),
                available: feature.available,
                used: feature.used,
                turned_off: feature.turned_off,
                detail: feature.detail.clone(),
            })
            .collect(),
        in_force: status.in_force.clone(),
        approval_required: status.approval_required,
        warnings: status.warnings.clone(),
    }
}

/// `daemon/shutdown`: answered, then the daemon stops (see `serve.rs`).
pub fn daemon_shutdown(daemon: &Daemon, _: NoParams) -> ApiResult<DaemonShutdownResult> {
    tracing::info!("shutdown requested by a client");
    daemon.request_shutdown();
    Ok(DaemonShutdownResult { stopping: true })
}

/// A log event as the API delivers it.
pub fn api_event(session_id: &str, event: &Event) -> SessionEvent {
    let value = serde_json::to_value(event).unwrap_or_default();
    SessionEvent {
        session_id: session_id.to_owned(),
        seq: event.seq,
        time: event.time,
        kind: event.kind().to_owned(),
        data: value.get("data").cloned().unwrap_or_default(),
    }
}

/// Loads a session on the blocking pool (opening a log reads and folds it).
async fn load(daemon: &Arc<Daemon>, id: &str) -> ApiResult<Arc<LiveSession>> {
    let daemon = Arc::clone(daemon);
    let id = id.to_owned();
    blocking(move || daemon.session(&id)).await
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|_| ApiError::store("a blocking task of the daemon panicked"))?
}

fn default_config() -> SessionConfig {
    SessionConfig {
        model: None,
        max_tokens: None,
        thinking: None,
        reasoning_effort: None,
        temperature: None,
        max_steps: None,
    }
}
