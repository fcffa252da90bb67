//! The API: every method registered once in a `jsonrpsee` [`RpcModule`], served unchanged over
//! the Unix socket, stdio, and (when enabled) WebSocket/HTTP. `protocol/README.md` documents each
//! method with an example exchange.

use std::sync::Arc;

use dsh_protocol::{
    ApprovalChoice, ApprovalRespondParams, ApprovalRespondResult, Capabilities,
    DaemonShutdownResult, DaemonStatusResult, InitializeParams, InitializeResult, LoadedSession,
    PROTOCOL_VERSION, ServerInfo, SessionCancelResult, SessionConfig, SessionCreateParams,
    SessionEvent, SessionEventsParams, SessionEventsResult, SessionForkParams, SessionIdResult,
    SessionInjectParams, SessionInjectResult, SessionListParams, SessionListResult, SessionParams,
    SessionPromptParams, SessionPromptResult, SessionRequestParams, SessionRequestResult,
    SessionSubscribeParams, SessionSummary, SessionUsageResult, UsageEntry, WhenBusy, method,
};
use dsh_session::{
    ApprovalVerdict, EVENT_KINDS, Event, EventData, SteeringMessage, reconstruct_step, usage_rows,
    usage_totals,
};
use jsonrpsee::types::{ErrorObjectOwned, Params};
use jsonrpsee::{PendingSubscriptionSink, RpcModule, SubscriptionMessage};
use tokio::sync::broadcast;

use super::error::{ApiError, ApiResult};
use super::state::Daemon;
use crate::views;

/// Most events one `session/events` page returns.
const MAX_EVENTS_PAGE: u64 = 1000;

fn parse<T: serde::de::DeserializeOwned>(params: &Params<'_>) -> ApiResult<T> {
    params.parse().map_err(|error: ErrorObjectOwned| {
        // jsonrpsee puts serde's complaint ("missing field `sessionId`") in the error's data.
        let detail = error.data().map(|data| data.get().trim_matches('"').to_owned());
        ApiError::invalid_params(match detail {
            Some(detail) => format!("invalid params: {detail}"),
            None => "invalid params".to_owned(),
        })
    })
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

/// Builds the module with every method.
pub fn module(daemon: Arc<Daemon>) -> anyhow::Result<RpcModule<Daemon>> {
    let mut module = RpcModule::from_arc(daemon);

    module.register_method(method::INITIALIZE, |params, _, _| -> ApiResult<InitializeResult> {
        let params: InitializeParams = parse(&params)?;
        if params.protocol_version != PROTOCOL_VERSION {
            return Err(ApiError {
                code: dsh_protocol::code::UNSUPPORTED_PROTOCOL,
                message: format!(
                    "protocol version {} is not supported; this daemon speaks version {PROTOCOL_VERSION}",
                    params.protocol_version
                ),
            });
        }
        Ok(InitializeResult {
            server_info: ServerInfo { name: "dsh".to_owned(), version: env!("CARGO_PKG_VERSION").to_owned() },
            protocol_version: PROTOCOL_VERSION,
            capabilities: Capabilities {
                methods: method::ALL.iter().map(|m| (*m).to_owned()).collect(),
                event_kinds: EVENT_KINDS.iter().map(|k| (*k).to_owned()).collect(),
            },
        })
    })?;

    module.register_blocking_method(
        method::SESSION_CREATE,
        |params, daemon, _| -> ApiResult<SessionIdResult> {
            let params: SessionCreateParams = parse(&params)?;
            let mut config = params.config.unwrap_or_default_config();
            if params.model.is_some() {
                config.model = params.model;
            }
            let live = daemon.create(&params.workspace, &config)?;
            Ok(SessionIdResult { session_id: live.id.clone() })
        },
    )?;

    module.register_blocking_method(
        method::SESSION_LIST,
        |params, daemon, _| -> ApiResult<SessionListResult> {
            let params: SessionListParams = if params.as_str().is_some() {
                parse(&params)?
            } else {
                SessionListParams { workspace: None }
            };
            if params.workspace.as_deref().is_some_and(|w| !std::path::Path::new(w).is_absolute()) {
                return Err(ApiError::invalid_workspace("workspace must be an absolute path"));
            }
            let listing = match &params.workspace {
                Some(workspace) => daemon
                    .home()
                    .workspace(std::path::Path::new(workspace))
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
        },
    )?;

    module.register_subscription(
        method::SESSION_SUBSCRIBE,
        method::SESSION_EVENT,
        method::SESSION_UNSUBSCRIBE,
        |params, pending, daemon, _| async move { subscribe(params, pending, daemon).await },
    )?;

    module.register_async_method(method::SESSION_PROMPT, |params, daemon, _| async move {
        let params: SessionPromptParams = parse(&params)?;
        let live = daemon_session(&daemon, &params.session_id).await?;
        let queue = params.when_busy.unwrap_or_default() == WhenBusy::Queue;
        let outcome = daemon.prompt(live, params.text, queue).await?;
        Ok::<_, ApiError>(SessionPromptResult {
            turn: outcome.turn,
            stop_reason: outcome.stop_reason,
            steps: outcome.steps,
            usage: outcome.usage,
            error: outcome.error,
        })
    })?;

    module.register_async_method(method::SESSION_INJECT, |params, daemon, _| async move {
        let params: SessionInjectParams = parse(&params)?;
        if params.text.trim().is_empty() {
            return Err(ApiError::invalid_params("steering text is empty"));
        }
        let live = daemon_session(&daemon, &params.session_id).await?;
        let event = live
            .handle
            .append(EventData::SteeringMessage(SteeringMessage { text: params.text }))
            .await?;
        Ok::<_, ApiError>(SessionInjectResult { seq: event.seq })
    })?;

    module.register_async_method(method::SESSION_COMPACT, |params, daemon, _| async move {
        let params: SessionParams = parse(&params)?;
        let live = daemon_session(&daemon, &params.session_id).await?;
        daemon.compact(live).await
    })?;

    module.register_async_method(method::SESSION_CANCEL, |params, daemon, _| async move {
        let params: SessionParams = parse(&params)?;
        let live = daemon_session(&daemon, &params.session_id).await?;
        Ok::<_, ApiError>(SessionCancelResult { cancelled: live.cancel() })
    })?;

    module.register_blocking_method(
        method::SESSION_FORK,
        |params, daemon, _| -> ApiResult<SessionIdResult> {
            let params: SessionForkParams = parse(&params)?;
            let config = params.config.unwrap_or_default_config();
            let live = daemon.fork(&params.session_id, params.at_seq, &config)?;
            Ok(SessionIdResult { session_id: live.id.clone() })
        },
    )?;

    module.register_blocking_method(
        method::SESSION_REQUEST,
        |params, daemon, _| -> ApiResult<SessionRequestResult> {
            let params: SessionRequestParams = parse(&params)?;
            let events = daemon.read_events(&params.session_id)?;
            let rebuilt =
                reconstruct_step(&events, params.step).map_err(ApiError::from_reconstruct)?;
            let diff = if params.diff.unwrap_or(false) && params.step > 1 {
                let previous = reconstruct_step(&events, params.step - 1)
                    .map_err(ApiError::from_reconstruct)?;
                Some(views::diff_text(&previous, &rebuilt))
            } else {
                None
            };
            Ok(views::request_result(&rebuilt, diff))
        },
    )?;

    module.register_blocking_method(
        method::SESSION_USAGE,
        |params, daemon, _| -> ApiResult<SessionUsageResult> {
            let params: SessionParams = parse(&params)?;
            // A loaded session's fold holds exactly the log's events: fold them where they are
            // rather than re-reading the file (the CLI asks after every step).
            let loaded = daemon.loaded().into_iter().find(|live| live.id == params.session_id);
            let rows = match loaded {
                Some(live) => tokio::runtime::Handle::current()
                    .block_on(live.handle.query(|session| usage_rows(session.events())))?,
                None => usage_rows(&daemon.read_events(&params.session_id)?),
            };
            let totals = usage_totals(&rows);
            let rows = rows
                .into_iter()
                .map(|row| UsageEntry { explanation: views::explain(&row), row })
                .collect();
            Ok(SessionUsageResult { rows, totals })
        },
    )?;

    module.register_blocking_method(
        method::SESSION_EVENTS,
        |params, daemon, _| -> ApiResult<SessionEventsResult> {
            let params: SessionEventsParams = parse(&params)?;
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
        },
    )?;

    module.register_async_method(method::APPROVAL_RESPOND, |params, daemon, _| async move {
        let params: ApprovalRespondParams = parse(&params)?;
        let live = daemon_session(&daemon, &params.session_id).await?;
        let verdict = match params.decision {
            ApprovalChoice::Allow => ApprovalVerdict::Allow,
            ApprovalChoice::Deny => ApprovalVerdict::Deny,
            ApprovalChoice::AllowAlways => ApprovalVerdict::AllowAlways,
        };
        if !live.respond(&params.approval_id, verdict).await {
            return Err(ApiError::approval_not_found(&params.session_id, &params.approval_id));
        }
        Ok::<_, ApiError>(ApprovalRespondResult { accepted: true })
    })?;

    module.register_method(
        method::DAEMON_STATUS,
        |_, daemon, _| -> ApiResult<DaemonStatusResult> {
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
                clients: daemon.clients.load(std::sync::atomic::Ordering::SeqCst),
                uptime_ms: daemon.started.elapsed().as_millis() as u64,
            })
        },
    )?;

    module.register_method(
        method::DAEMON_SHUTDOWN,
        |_, daemon, _| -> ApiResult<DaemonShutdownResult> {
            tracing::info!("shutdown requested by a client");
            daemon.shutdown.cancel();
            Ok(DaemonShutdownResult { stopping: true })
        },
    )?;

    Ok(module)
}

/// Loads a session on the blocking pool (opening a log reads and folds it).
async fn daemon_session(
    daemon: &Arc<Daemon>,
    id: &str,
) -> ApiResult<Arc<super::state::LiveSession>> {
    let daemon = Arc::clone(daemon);
    let id = id.to_owned();
    tokio::task::spawn_blocking(move || daemon.session(&id))
        .await
        .map_err(|_| ApiError::store("loading the session panicked"))?
}

trait ConfigDefault {
    fn unwrap_or_default_config(self) -> SessionConfig;
}

impl ConfigDefault for Option<SessionConfig> {
    fn unwrap_or_default_config(self) -> SessionConfig {
        self.unwrap_or(SessionConfig {
            model: None,
            max_tokens: None,
            thinking: None,
            reasoning_effort: None,
            temperature: None,
            max_steps: None,
        })
    }
}

/// `session/subscribe`: stored events from `fromSeq`, then live ones, with no gap and no
/// duplicate at the seam (both come from one owner command). A subscriber that lags behind the
/// live buffer catches up from the log the same way.
async fn subscribe(params: Params<'static>, pending: PendingSubscriptionSink, daemon: Arc<Daemon>) {
    let params: SessionSubscribeParams = match parse(&params) {
        Ok(params) => params,
        Err(error) => return pending.reject(error).await,
    };
    let live = match daemon_session(&daemon, &params.session_id).await {
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
