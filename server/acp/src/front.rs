//! The front's connection: ACP requests from the editor become calls to the daemon; the events
//! of each open session's subscription become `session/update`s and permission requests.
//!
//! Tasks: the SDK's dispatch loop runs [`Front::dispatch`], which answers quick messages in
//! place and spawns a task per request that waits on the daemon (a prompt waits for its whole
//! turn); one router task ([`Front::route`]) reads the daemon connection's notifications in
//! order and is the only writer of `session/update`s, so updates leave in log order. The
//! sessions map is a `std::sync::Mutex`, never held across an await.

use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::Poll;
use std::time::Duration;

use agent_client_protocol::v1::{ConnectionTo, Dispatch, schema};
use agent_client_protocol::{
    Agent, ByteStreams, Client as AcpClient, RequestCancellationHandle, UntypedMessage,
};
use dsh_daemon::client::event_of;
use dsh_daemon::{Client, ClientError, Unsolicited};
use dsh_protocol::method::{self};
use dsh_protocol::{
    ApprovalChoice, ApprovalRequest, ApprovalRespondParams, Cost, EventData, McpServerSpec,
    SessionConfig, SessionCreateParams, SessionEventsParams, SessionForkParams,
    SessionInjectParams, SessionListParams, SessionMcpServersParams, SessionParams,
    SessionPromptParams, SessionRequestParams, SessionSubscribeParams, StopReason,
};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, watch};
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

use crate::translate::{META_USAGE, Translator};

/// How long a finished prompt waits for its turn's last events to be forwarded.
const FLUSH_DEADLINE: Duration = Duration::from_secs(30);
/// Sessions per `session/list` page.
const LIST_PAGE: usize = 50;
/// Unread bytes past which forwarding waits for the editor to read.
const BACKLOG_LIMIT: u64 = 16 * 1024 * 1024;
/// How long an editor may read nothing while past [`BACKLOG_LIMIT`].
const BACKLOG_STALL: Duration = Duration::from_secs(60);

/// What `dsh acp` was started with, beyond the daemon it joined.
#[derive(Clone, Debug, Default)]
pub struct FrontOptions {
    /// The profile and model (`--provider`, `--model`) of every session `session/new`
    /// creates; absent, the workspace's configured ones.
    pub session: SessionConfig,
    /// Why the daemon this front joined cannot honour its flags (another sandbox, another
    /// base URL): `initialize`, and every request after it, is answered with this error, so
    /// the flags are never silently dropped.
    pub refusal: Option<String>,
}

/// Serves ACP on `input`/`output` for the daemon behind `client` until the editor closes
/// `input` (or the daemon its connection). `inbox` is what the client's connection delivers
/// besides answers.
pub async fn serve(
    client: Arc<Client>,
    inbox: mpsc::UnboundedReceiver<Unsolicited>,
    options: FrontOptions,
    input: impl AsyncRead + Send + 'static,
    output: impl AsyncWrite + Unpin + Send + 'static,
) -> anyhow::Result<()> {
    let backlog = Arc::new(Backlog::default());
    let front = Arc::new(Front {
        client,
        options,
        sessions: Mutex::default(),
        backlog: Arc::clone(&backlog),
    });
    let output = Counted { inner: output, backlog };
    let transport = ByteStreams::new(output.compat_write(), input.compat());
    let dispatcher = Arc::clone(&front);
    Agent
        .v1()
        .name("dsh")
        .on_receive_dispatch(
            async move |message: Dispatch<UntypedMessage, UntypedMessage>,
                        connection: ConnectionTo<AcpClient>| {
                dispatcher.dispatch(message, connection).await
            },
            agent_client_protocol::on_receive_dispatch!(),
        )
        .connect_with(transport, async move |connection: ConnectionTo<AcpClient>| {
            tokio::select! {
                // Cancel-safe: the router is dropped with its receiver; nothing half-sent.
                () = front.route(inbox, connection.clone()) => {
                    tracing::warn!("the dsh daemon closed the connection");
                }
                // Cancel-safe: a wait.
                () = connection.incoming_closed() => {}
            }
            Ok(())
        })
        .await
        .map_err(|error| anyhow::anyhow!("acp connection: {error}"))
}

/// An open session: the fold of its subscription.
struct Open {
    translator: Translator,
    progress: watch::Sender<Progress>,
    /// Approvals already turned into permission requests.
    asked: HashSet<String>,
    /// Permission requests the client has not answered yet, by approval id: withdrawn
    /// (`$/cancel_request`) when the approval is decided elsewhere or its turn ends.
    asking: HashMap<String, RequestCancellationHandle>,
    /// Approvals seen below this seq are replay: asked only once the replay is through (most
    /// are decided further on).
    replay_end: u64,
    /// The prompts this front sent whose `user/message` has not come by yet: that event is not
    /// echoed to the client that sent it (ACP's `user_message_chunk` is for `session/load`'s
    /// replay and for other clients' prompts).
    prompted: Vec<String>,
    /// Each finished step's cost at the configured prices (`None`: no price for its model), as
    /// `session/usage` last said.
    costs: HashMap<u64, Option<Cost>>,
    /// The session's cost up to the last forwarded step: `None` before any step, `Some(None)`
    /// once a step had no price (or the currencies differ).
    spent: Option<Option<Cost>>,
}

/// How far the router has forwarded a session's events.
#[derive(Clone, Copy, Debug, Default)]
struct Progress {
    next_seq: u64,
    ended_turn: Option<u64>,
}

struct Front {
    client: Arc<Client>,
    options: FrontOptions,
    sessions: Mutex<HashMap<String, Open>>,
    backlog: Arc<Backlog>,
}

type Connection = ConnectionTo<AcpClient>;
type AcpError = agent_client_protocol::Error;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Front {
    /// One incoming message. Requests that wait on the daemon are answered from a task of
    /// their own, so the dispatch loop keeps reading (a `session/cancel` must get through while
    /// a prompt runs).
    async fn dispatch(
        self: &Arc<Self>,
        message: Dispatch<UntypedMessage, UntypedMessage>,
        connection: Connection,
    ) -> Result<(), AcpError> {
        match message {
            Dispatch::Request(request, responder) => {
                let front = Arc::clone(self);
                tokio::spawn(async move {
                    let UntypedMessage { method, params } = request;
                    let answer = front.answer(&method, params, &connection).await;
                    let sent = match answer {
                        Ok(result) => responder.respond(result),
                        Err(error) => responder.respond_with_error(error),
                    };
                    if let Err(error) = sent {
                        tracing::debug!("answering {method}: {error}");
                    }
                });
                Ok(())
            }
            Dispatch::Notification(notification) => {
                self.notified(notification).await;
                Ok(())
            }
            Dispatch::Response(result, router) => router.route_with_result(result),
        }
    }

    async fn notified(&self, notification: UntypedMessage) {
        if notification.method != "session/cancel" {
            // Unknown notifications, extension ones included, are ignored (ACP's rule).
            tracing::debug!("ignoring notification {}", notification.method);
            return;
        }
        let Ok(cancel) = serde_json::from_value::<schema::CancelNotification>(notification.params)
        else {
            tracing::warn!("session/cancel without a session id");
            return;
        };
        let params = SessionParams { session_id: cancel.session_id.to_string() };
        if let Err(error) = self.client.call::<method::SessionCancel>(params).await {
            tracing::warn!("cancelling {}: {error}", cancel.session_id);
        }
    }

    async fn answer(
        self: &Arc<Self>,
        method: &str,
        params: Value,
        connection: &Connection,
    ) -> Result<Value, AcpError> {
        if let Some(refusal) = &self.options.refusal {
            return Err(AcpError::new(-32603, refusal.clone()));
        }
        match method {
            "initialize" => Ok(initialize()),
            "authenticate" => Ok(json!({})),
            "session/new" => self.new_session(parse(params)?).await,
            "session/load" => {
                let request: schema::LoadSessionRequest = parse(params)?;
                let id = request.session_id.to_string();
                self.attach(id, &request.cwd, &request.mcp_servers, true, connection).await
            }
            "session/resume" => {
                let request: schema::ResumeSessionRequest = parse(params)?;
                let id = request.session_id.to_string();
                self.attach(id, &request.cwd, &request.mcp_servers, false, connection).await
            }
            "session/list" => self.list_sessions(parse(params)?).await,
            "session/set_config_option" => self.set_config_option(parse(params)?).await,
            "session/prompt" => self.prompt(parse(params)?).await,
            "_session/steering" => self.steer(parse(params)?).await,
            "_dsh/fork" => self.fork(parse(params)?).await,
            "_dsh/request" => self.what_the_model_saw(parse(params)?).await,
            _ => Err(AcpError::method_not_found().data(json!({"method": method}))),
        }
    }

    async fn new_session(
        self: &Arc<Self>,
        request: schema::NewSessionRequest,
    ) -> Result<Value, AcpError> {
        let workspace = checked_cwd(&request.cwd)?;
        // Checked before anything is created: a server dsh cannot take fails the request.
        let servers = server_specs(&request.mcp_servers)?;
        // The daemon checks the servers before it creates the session: a refused list leaves
        // nothing behind.
        let asked = &self.options.session;
        let params = SessionCreateParams {
            workspace,
            model: None,
            config: Some(asked.clone()),
            mcp_servers: Some(servers),
        };
        let created = match self.client.call::<method::SessionCreate>(params).await {
            Ok(created) => created,
            // A profile or model the workspace's configuration does not know: say which flag.
            Err(error) if error.code() == Some(dsh_protocol::code::CONFIG) => {
                let flags = [("--provider", &asked.profile), ("--model", &asked.model)]
                    .into_iter()
                    .filter_map(|(flag, value)| Some(format!("{flag} {}", value.as_ref()?)))
                    .collect::<Vec<_>>();
                let error = rpc_error(error);
                if flags.is_empty() {
                    return Err(error);
                }
                let message = format!("dsh acp {}: {}", flags.join(" "), error.message);
                return Err(AcpError::new(error.code, message));
            }
            Err(error) => return Err(rpc_error(error)),
        };
        self.open(&created.session_id, true).await?;
        // The session exists now: a selector that cannot be shown is left out, not an error
        // that would tell the editor no session was made.
        match self.config_options(&created.session_id).await {
            Ok(options) => Ok(json!({"sessionId": created.session_id, "configOptions": options})),
            Err(error) => {
                tracing::warn!(session = %created.session_id, "no model selector: {}", error.message);
                Ok(json!({"sessionId": created.session_id}))
            }
        }
    }

    /// The session's configuration options for ACP's selectors: its model (category `model`),
    /// the one its next request uses — dsh pins a session's model when it is created, so the
    /// selector offers that one.
    async fn config_options(&self, session_id: &str) -> Result<Value, AcpError> {
        let params = SessionParams { session_id: session_id.to_owned() };
        let usage = self.client.call::<method::SessionUsage>(params).await.map_err(rpc_error)?;
        Ok(json!([{
            "id": "model",
            "name": "Model",
            "description": "The model this session is pinned to (start dsh acp with --model, or fork, for another)",
            "category": "model",
            "type": "select",
            "currentValue": usage.model,
            "options": [{
                "value": usage.model,
                "name": usage.model,
                "description": format!("provider profile {}", usage.profile),
            }],
        }]))
    }

    /// `session/set_config_option`: the model a session is pinned to is the one value its
    /// selector takes; any other is refused, saying how to get it.
    async fn set_config_option(&self, request: SetConfigOption) -> Result<Value, AcpError> {
        if !lock(&self.sessions).contains_key(&request.session_id) {
            return Err(not_open(&request.session_id));
        }
        let options = self.config_options(&request.session_id).await?;
        let current = &options[0]["currentValue"];
        if request.config_id != "model" {
            return Err(invalid_params(format!(
                "unknown configuration option `{}`",
                request.config_id
            )));
        }
        if request.value.as_ref() != Some(current) {
            return Err(invalid_params(format!(
                "dsh keeps a session on the model it was created with ({current}): start `dsh \
                 acp --model MODEL` for new sessions on another, or fork this one with \
                 `dsh --model MODEL fork SESSION`"
            )));
        }
        Ok(json!({"configOptions": options}))
    }

    /// `session/load` (`replay`: the whole conversation first) and `session/resume`.
    async fn attach(
        self: &Arc<Self>,
        session_id: String,
        cwd: &std::path::Path,
        mcp_servers: &[schema::McpServer],
        replay: bool,
        connection: &Connection,
    ) -> Result<Value, AcpError> {
        checked_cwd(cwd)?;
        // The session's own servers, as the editor gives them now (the same ones: nothing
        // changes, the next request is byte-identical; fewer: a logged tools delta).
        let servers = server_specs(mcp_servers)?;
        // Given first: a list the daemon refuses leaves nothing open here and nothing replayed.
        // (Giving touches the session, so it is not idle when the front subscribes next.)
        self.give_servers(&session_id, servers).await?;
        let already = lock(&self.sessions).contains_key(&session_id);
        if !already {
            self.open(&session_id, replay).await?;
        } else if replay {
            // Its live subscription goes on; the conversation is replayed from the log with a
            // fold of its own.
            self.replay(&session_id, connection).await?;
        }
        Ok(json!({"configOptions": self.config_options(&session_id).await?}))
    }

    /// Gives the session its own MCP servers (`session/mcpServers`), replacing the ones it had.
    async fn give_servers(
        &self,
        session_id: &str,
        servers: Vec<McpServerSpec>,
    ) -> Result<(), AcpError> {
        let params = SessionMcpServersParams { session_id: session_id.to_owned(), servers };
        self.client.call::<method::SessionMcpServers>(params).await.map_err(rpc_error)?;
        Ok(())
    }

    /// Opens `session_id` in this front: subscribes to its log — from the start when
    /// `replay`, which the router forwards as the replayed conversation — and returns once the
    /// events that were logged before are forwarded.
    async fn open(self: &Arc<Self>, session_id: &str, replay: bool) -> Result<(), AcpError> {
        let usage = self
            .client
            .call::<method::SessionUsage>(SessionParams { session_id: session_id.to_owned() })
            .await
            .map_err(rpc_error)?;
        let first = self.events(session_id, 0, 1).await?;
        let length = first.length;
        let workspace = first
            .events
            .first()
            .and_then(|delivered| match &delivered.event.data {
                EventData::SessionMeta(meta) => Some(meta.workspace.clone()),
                _ => None,
            })
            .unwrap_or_default();
        let from = if replay { 0 } else { length };
        let (progress, mut watcher) = watch::channel(Progress { next_seq: from, ended_turn: None });
        {
            let mut sessions = lock(&self.sessions);
            if sessions.contains_key(session_id) {
                return Ok(());
            }
            let translator = Translator::new(workspace, usage.context_window);
            let costs = usage
                .rows
                .iter()
                .filter(|entry| entry.row.usage.is_some())
                .map(|entry| (entry.row.step, entry.row.cost.clone()));
            // Without the replay, the steps before are counted all the same.
            let finished = usage.rows.iter().any(|entry| entry.row.usage.is_some());
            let spent = (!replay && finished).then(|| usage.cost.clone());
            sessions.insert(
                session_id.to_owned(),
                Open {
                    translator,
                    progress,
                    asked: HashSet::new(),
                    asking: HashMap::new(),
                    replay_end: length,
                    prompted: Vec::new(),
                    costs: costs.collect(),
                    spent,
                },
            );
        }
        let params =
            SessionSubscribeParams { session_id: session_id.to_owned(), from_seq: Some(from) };
        if let Err(error) = self.client.call::<method::SessionSubscribe>(params).await {
            lock(&self.sessions).remove(session_id);
            return Err(rpc_error(error));
        }
        let forwarded = watcher.wait_for(|progress| progress.next_seq >= length);
        let _ = tokio::time::timeout(FLUSH_DEADLINE, forwarded).await;
        Ok(())
    }

    /// The conversation of a session already open here, replayed from its log.
    async fn replay(&self, session_id: &str, connection: &Connection) -> Result<(), AcpError> {
        let workspace;
        let window;
        {
            let sessions = lock(&self.sessions);
            let Some(open) = sessions.get(session_id) else { return Ok(()) };
            workspace = open.translator.workspace().to_owned();
            window = open.translator.window();
        }
        let mut translator = Translator::new(workspace, window);
        let params = SessionParams { session_id: session_id.to_owned() };
        let usage = self.client.call::<method::SessionUsage>(params).await.map_err(rpc_error)?;
        let costs: HashMap<u64, Option<Cost>> =
            usage.rows.into_iter().map(|entry| (entry.row.step, entry.row.cost)).collect();
        let mut spent = None;
        let mut from = 0;
        loop {
            let page = self.events(session_id, from, 1000).await?;
            for delivered in &page.events {
                {
                    let event = &delivered.event;
                    for mut update in translator.updates(event) {
                        if let Some(step) = update["_meta"][META_USAGE]["step"].as_u64() {
                            priced(&mut update, step, &costs, &mut spent);
                        }
                        if send_update(connection, &self.backlog, session_id, update).await.is_err()
                        {
                            return Err(AcpError::new(-32603, "the client stopped reading"));
                        }
                    }
                }
            }
            if page.end || page.next_seq <= from {
                return Ok(());
            }
            from = page.next_seq;
        }
    }

    async fn events(
        &self,
        session_id: &str,
        from_seq: u64,
        limit: u64,
    ) -> Result<dsh_protocol::SessionEventsResult, AcpError> {
        let params = SessionEventsParams { session_id: session_id.to_owned(), from_seq, limit };
        self.client.call::<method::SessionEvents>(params).await.map_err(rpc_error)
    }

    async fn list_sessions(&self, request: schema::ListSessionsRequest) -> Result<Value, AcpError> {
        let workspace = match &request.cwd {
            Some(cwd) if !cwd.is_absolute() => {
                return Err(invalid_params(format!(
                    "cwd must be an absolute path, not {}",
                    cwd.display()
                )));
            }
            Some(cwd) => Some(cwd.display().to_string()),
            None => None,
        };
        let listed = self.client.call::<method::SessionList>(SessionListParams { workspace }).await;
        let mut sessions = match listed {
            Ok(listed) => listed.sessions,
            // A directory that is no workspace (gone, never existed) has no sessions.
            Err(error) if error.code() == Some(dsh_protocol::code::INVALID_WORKSPACE) => Vec::new(),
            Err(error) => return Err(rpc_error(error)),
        };
        sessions
            .sort_by(|a, b| b.updated_ms.cmp(&a.updated_ms).then(a.session_id.cmp(&b.session_id)));
        let start = match request.cursor.as_deref() {
            None => 0,
            Some(cursor) => cursor
                .parse::<usize>()
                .map_err(|_| invalid_params(format!("unknown cursor `{cursor}`")))?,
        };
        let page: Vec<Value> = sessions
            .iter()
            .skip(start)
            .take(LIST_PAGE)
            .map(|summary| {
                let mut info = json!({
                    "sessionId": summary.session_id,
                    "cwd": summary.workspace,
                    "updatedAt": iso8601(summary.updated_ms),
                });
                if let Some(title) = &summary.title {
                    info["title"] = json!(title);
                }
                info
            })
            .collect();
        let mut result = json!({"sessions": page});
        if start + LIST_PAGE < sessions.len() {
            result["nextCursor"] = json!((start + LIST_PAGE).to_string());
        }
        Ok(result)
    }

    async fn prompt(&self, request: schema::PromptRequest) -> Result<Value, AcpError> {
        let session_id = request.session_id.to_string();
        let text = prompt_text(&request.prompt)?;
        let mut watcher = match lock(&self.sessions).get_mut(&session_id) {
            Some(open) => {
                open.prompted.push(text.clone());
                open.progress.subscribe()
            }
            None => return Err(not_open(&session_id)),
        };
        let params = SessionPromptParams {
            session_id: session_id.clone(),
            text: text.clone(),
            when_busy: None,
        };
        let result = match self.client.call::<method::SessionPrompt>(params).await {
            Ok(result) => result,
            Err(error) => {
                // Refused (busy, say): no `user/message` of it will come.
                if let Some(open) = lock(&self.sessions).get_mut(&session_id)
                    && let Some(at) = open.prompted.iter().position(|sent| *sent == text)
                {
                    open.prompted.remove(at);
                }
                return Err(rpc_error(error));
            }
        };
        // Every update of the turn leaves before the answer: wait for its turn/end to pass.
        let turn = result.turn;
        let flushed = watcher.wait_for(|progress| progress.ended_turn.is_some_and(|t| t >= turn));
        let _ = tokio::time::timeout(FLUSH_DEADLINE, flushed).await;
        let finish = lock(&self.sessions)
            .get(&session_id)
            .and_then(|open| open.translator.last_finish_reason.clone());
        let stop_reason = match result.stop_reason {
            StopReason::Completed => match finish.as_deref() {
                Some("length") => "max_tokens",
                Some("content_filter") => "refusal",
                _ => "end_turn",
            },
            StopReason::Cancelled => "cancelled",
            StopReason::MaxSteps => "max_turn_requests",
            StopReason::Error => {
                let message = result.error.unwrap_or_else(|| "the turn failed".to_owned());
                return Err(AcpError::new(-32603, message).data(json!({"turn": turn})));
            }
        };
        Ok(json!({
            "stopReason": stop_reason,
            "_meta": {"dsh/turn": {"turn": turn, "steps": result.steps, "usage": result.usage}},
        }))
    }

    async fn steer(&self, request: SteeringRequest) -> Result<Value, AcpError> {
        let text = prompt_text(&request.prompt)?;
        let running = match lock(&self.sessions).get(&request.session_id) {
            Some(open) => open.translator.running_turn.is_some(),
            None => return Err(not_open(&request.session_id)),
        };
        if !running {
            return Ok(json!({"outcome": "promptRequired", "reason": "noRunningTurn"}));
        }
        let params = SessionInjectParams { session_id: request.session_id, text };
        let injected =
            self.client.call::<method::SessionInject>(params).await.map_err(rpc_error)?;
        Ok(json!({"outcome": "injected", "_meta": {"dsh/seq": injected.seq}}))
    }

    async fn fork(&self, request: ForkRequest) -> Result<Value, AcpError> {
        let params = SessionForkParams {
            session_id: request.session_id,
            at_seq: None,
            at_step: request.step,
            config: None,
        };
        let forked = self.client.call::<method::SessionFork>(params).await.map_err(rpc_error)?;
        Ok(json!({"sessionId": forked.session_id}))
    }

    async fn what_the_model_saw(&self, request: SessionRequestParams) -> Result<Value, AcpError> {
        let saw = self.client.call::<method::SessionRequest>(request).await.map_err(rpc_error)?;
        serde_json::to_value(saw).map_err(AcpError::into_internal_error)
    }

    /// Reads the daemon connection's notifications in order and forwards each open session's
    /// events; returns when the daemon closes the connection.
    async fn route(
        self: &Arc<Self>,
        mut inbox: mpsc::UnboundedReceiver<Unsolicited>,
        connection: Connection,
    ) {
        while let Some(message) = inbox.recv().await {
            let Unsolicited::Notification(notification) = message else { continue };
            let Some((_, delivered)) = event_of(&notification) else { continue };
            let event = delivered.event;
            let session_id = delivered.session_id;
            let (updates, ask) = {
                let mut sessions = lock(&self.sessions);
                let Some(open) = sessions.get_mut(&session_id) else { continue };
                let before = *open.progress.borrow();
                if event.seq < before.next_seq {
                    continue;
                }
                let mut updates = open.translator.updates(&event);
                if let EventData::UserMessage(message) = &event.data
                    && let Some(at) = open.prompted.iter().position(|sent| *sent == message.text)
                {
                    // This front's own prompt: its client has it already.
                    open.prompted.remove(at);
                    updates.clear();
                }
                let mut ask = Vec::new();
                if event.seq + 1 >= open.replay_end {
                    for (approval_id, request) in &open.translator.pending_approvals {
                        if open.asked.insert(approval_id.clone()) {
                            let fields =
                                open.translator.tool_call_fields(&request.call_id, &request.tool);
                            ask.push((request.clone(), fields));
                        }
                    }
                }
                // A permission request whose approval is no longer pending (decided by another
                // front, timed out, its turn cancelled) is withdrawn.
                let pending = &open.translator.pending_approvals;
                open.asking.retain(|approval_id, handle| {
                    let keep = pending.contains_key(approval_id);
                    if !keep {
                        let _ = handle.cancel();
                    }
                    keep
                });
                let ended_turn = open.translator.last_ended.map(|(turn, _)| turn);
                open.progress.send_replace(Progress { next_seq: event.seq + 1, ended_turn });
                (updates, ask)
            };
            for mut update in updates {
                if update["sessionUpdate"] == "usage_update" {
                    self.attach_cost(&session_id, &mut update).await;
                }
                if send_update(&connection, &self.backlog, &session_id, update).await.is_err() {
                    tracing::error!(
                        "the editor has read nothing for {BACKLOG_STALL:?}: ending the front"
                    );
                    return;
                }
            }
            for (request, fields) in ask {
                let front = Arc::clone(self);
                let connection = connection.clone();
                let session_id = session_id.clone();
                tokio::spawn(async move {
                    front.ask_permission(&connection, session_id, request, fields).await;
                });
            }
        }
    }

    /// A dsh approval as `session/request_permission`, its `toolCall` described as the
    /// `tool_call` updates describe it (`fields`: kind, raw input, locations, an edit's diff),
    /// so clients that approve by kind can; the answer goes back through `approval/respond`. A
    /// cancelled request (the client's answer to `session/cancel`) or a failed one denies.
    async fn ask_permission(
        &self,
        connection: &Connection,
        session_id: String,
        asked: ApprovalRequest,
        fields: Value,
    ) {
        let ApprovalRequest { approval_id, call_id, summary, sandbox, .. } = asked;
        let mut options = vec![
            json!({"optionId": "allow_once", "name": "Allow once", "kind": "allow_once"}),
            json!({"optionId": "allow_always", "name": "Always allow this tool in this session", "kind": "allow_always"}),
            json!({"optionId": "reject_once", "name": "Reject", "kind": "reject_once"}),
        ];
        let title = match &sandbox {
            // A command: it can also run once outside the sandbox.
            Some(sandbox) => {
                options.insert(
                    1,
                    json!({"optionId": "allow_unconfined", "name": "Allow once, outside the sandbox", "kind": "allow_once"}),
                );
                format!("{summary} (sandbox: {sandbox})")
            }
            None => summary,
        };
        let mut tool_call = fields;
        tool_call["toolCallId"] = json!(call_id);
        tool_call["title"] = json!(title);
        let mut request = json!({
            "sessionId": session_id,
            "toolCall": tool_call,
            "options": options,
            "_meta": {"dsh/approvalId": approval_id},
        });
        if let Some(sandbox) = sandbox {
            request["_meta"]["dsh/sandbox"] = json!(sandbox);
        }
        let decision = match serde_json::from_value::<schema::RequestPermissionRequest>(request) {
            Ok(request) => {
                let sent = connection.send_request(request);
                self.track_asking(&session_id, &approval_id, sent.cancellation_handle());
                let answer = sent.block_task().await;
                if let Some(open) = lock(&self.sessions).get_mut(&session_id) {
                    open.asking.remove(&approval_id);
                }
                match answer {
                    Ok(response) => chosen(&response),
                    Err(error) => {
                        tracing::debug!("asking permission for {call_id}: {error}");
                        ApprovalChoice::Deny
                    }
                }
            }
            Err(error) => {
                tracing::warn!("building the permission request for {call_id}: {error}");
                ApprovalChoice::Deny
            }
        };
        let params = ApprovalRespondParams { session_id, approval_id, decision };
        if let Err(error) = self.client.call::<method::ApprovalRespond>(params).await {
            // Answered elsewhere, timed out, or the turn was cancelled: nothing waits anymore.
            tracing::debug!("answering approval: {error}");
        }
    }
}

impl Front {
    /// Adds the session's cumulative cost to a step's `usage_update` (ACP's `cost`) and the
    /// step's own cost to its `_meta["dsh/usage"]`, when its model has prices. A step not yet
    /// priced here is looked up with `session/usage` (once: live steps; a replay's are all
    /// known from the open).
    async fn attach_cost(&self, session_id: &str, update: &mut Value) {
        let Some(step) = update["_meta"][META_USAGE]["step"].as_u64() else { return };
        let known =
            lock(&self.sessions).get(session_id).is_some_and(|o| o.costs.contains_key(&step));
        if !known {
            let params = SessionParams { session_id: session_id.to_owned() };
            match self.client.call::<method::SessionUsage>(params).await {
                Ok(usage) => {
                    if let Some(open) = lock(&self.sessions).get_mut(session_id) {
                        // Finished steps only: a step that started since has no usage yet.
                        for entry in usage.rows.into_iter().filter(|e| e.row.usage.is_some()) {
                            open.costs.insert(entry.row.step, entry.row.cost);
                        }
                    }
                }
                Err(error) => tracing::debug!("pricing step {step}: {error}"),
            }
        }
        let mut sessions = lock(&self.sessions);
        let Some(open) = sessions.get_mut(session_id) else { return };
        priced(update, step, &open.costs, &mut open.spent);
    }

    /// Remembers an unanswered permission request so the router can withdraw it; withdraws it
    /// at once when its approval was settled while it was being sent.
    fn track_asking(&self, session_id: &str, approval_id: &str, handle: RequestCancellationHandle) {
        let mut sessions = lock(&self.sessions);
        let Some(open) = sessions.get_mut(session_id) else { return };
        if open.translator.pending_approvals.contains_key(approval_id) {
            open.asking.insert(approval_id.to_owned(), handle);
        } else {
            let _ = handle.cancel();
        }
    }
}

/// Step `step`'s `usage_update` with its cost (`costs`) and the cumulative one (`spent`, which
/// this step is added to).
fn priced(
    update: &mut Value,
    step: u64,
    costs: &HashMap<u64, Option<Cost>>,
    spent: &mut Option<Option<Cost>>,
) {
    let cost = costs.get(&step).cloned().flatten();
    *spent = Some(match (spent.take(), &cost) {
        (None, Some(cost)) => Some(cost.clone()),
        (Some(Some(sum)), Some(cost)) => sum.plus(cost),
        _ => None,
    });
    if let Some(cost) = cost {
        update["_meta"][META_USAGE]["cost"] = json!(cost);
    }
    if let Some(Some(spent)) = spent {
        update["cost"] = json!({"amount": spent.amount, "currency": spent.currency});
    }
}

/// The dsh decision for a permission answer.
fn chosen(response: &schema::RequestPermissionResponse) -> ApprovalChoice {
    let value = serde_json::to_value(response).unwrap_or_default();
    let outcome = &value["outcome"];
    if outcome["outcome"] != "selected" {
        return ApprovalChoice::Deny;
    }
    match outcome["optionId"].as_str() {
        Some("allow_once") => ApprovalChoice::Allow,
        Some("allow_always") => ApprovalChoice::AllowAlways,
        Some("allow_unconfined") => ApprovalChoice::AllowUnconfined,
        _ => ApprovalChoice::Deny,
    }
}

/// Queues one `session/update`, then waits while the editor has more than [`BACKLOG_LIMIT`]
/// bytes left unread (the SDK's outgoing queue is unbounded). An editor that reads nothing for
/// [`BACKLOG_STALL`] is given up on: the front ends rather than grow without bound (the turn
/// goes on in the daemon).
async fn send_update(
    connection: &Connection,
    backlog: &Backlog,
    session_id: &str,
    update: Value,
) -> Result<(), Stalled> {
    let notification = json!({"sessionId": session_id, "update": update});
    let bytes = notification.to_string().len() as u64 + 1;
    match serde_json::from_value::<schema::SessionNotification>(notification) {
        Ok(notification) => match connection.send_notification(notification) {
            Ok(()) => backlog.queued(bytes),
            Err(error) => tracing::debug!("sending an update: {error}"),
        },
        Err(error) => tracing::warn!("an update does not fit ACP's types: {error}"),
    }
    drain(backlog, BACKLOG_LIMIT, BACKLOG_STALL).await
}

/// Waits while more than `limit` bytes are unread; [`Stalled`] when the editor read nothing
/// for `stall`.
async fn drain(backlog: &Backlog, limit: u64, stall: Duration) -> Result<(), Stalled> {
    let mut seen = backlog.written();
    let mut since = tokio::time::Instant::now();
    while backlog.unread() > limit {
        tokio::time::sleep(Duration::from_millis(10)).await;
        if backlog.written() != seen {
            seen = backlog.written();
            since = tokio::time::Instant::now();
        } else if since.elapsed() > stall {
            return Err(Stalled);
        }
    }
    Ok(())
}

/// The editor stopped reading.
#[derive(Debug)]
struct Stalled;

/// Bytes handed to the SDK to send and bytes written to the editor's stdin, so the front knows
/// how much the editor has not read yet.
#[derive(Debug, Default)]
pub(crate) struct Backlog {
    queued: AtomicU64,
    written: AtomicU64,
}

impl Backlog {
    fn queued(&self, bytes: u64) {
        self.queued.fetch_add(bytes, Ordering::Relaxed);
    }

    fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    fn unread(&self) -> u64 {
        self.queued.load(Ordering::Relaxed).saturating_sub(self.written())
    }
}

/// The front's output, counting what reaches the editor.
struct Counted<W> {
    inner: W,
    backlog: Arc<Backlog>,
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Counted<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
        buffer: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(context, buffer);
        if let Poll::Ready(Ok(written)) = &polled {
            self.backlog.written.fetch_add(*written as u64, Ordering::Relaxed);
        }
        polled
    }

    fn poll_flush(
        mut self: Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(context)
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(context)
    }
}

/// `_session/steering` params: the shape of the Claude Code and Codex adapters.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SteeringRequest {
    session_id: String,
    prompt: Vec<schema::ContentBlock>,
}

/// `session/set_config_option` params (a select's value; a boolean has no option here).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SetConfigOption {
    session_id: String,
    config_id: String,
    #[serde(default)]
    value: Option<Value>,
}

/// `_dsh/fork` params.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ForkRequest {
    session_id: String,
    /// Fork before this step (its request is the fork's next); the whole log when absent.
    #[serde(default)]
    step: Option<u64>,
}

fn initialize() -> Value {
    let steering = json!({
        "supported": true,
        "method": "_session/steering",
        "idleBehavior": "promptRequired",
    });
    json!({
        "protocolVersion": 1,
        "agentCapabilities": {
            "loadSession": true,
            "promptCapabilities": {"image": false, "audio": false, "embeddedContext": true},
            "sessionCapabilities": {"list": {}, "resume": {}},
            "mcpCapabilities": {"http": true, "sse": false},
            "_meta": {
                "steering": steering,
                "dsh": {
                    "version": 1,
                    "methods": ["_session/steering", "_dsh/fork", "_dsh/request"],
                    "updateMeta": ["dsh/usage", "dsh/steering"],
                },
            },
        },
        "agentInfo": {"name": "dsh", "title": "dsh", "version": env!("CARGO_PKG_VERSION")},
        "authMethods": [],
        "_meta": {"steering": steering},
    })
}

/// A session's workspace from ACP's `cwd`: absolute.
fn checked_cwd(cwd: &std::path::Path) -> Result<String, AcpError> {
    if !cwd.is_absolute() {
        return Err(invalid_params(format!(
            "cwd must be an absolute path, not `{}`",
            cwd.display()
        )));
    }
    Ok(cwd.display().to_string())
}

/// The editor's MCP servers as dsh's `session/mcpServers` takes them: stdio and streamable
/// HTTP; SSE (deprecated by MCP) is refused. Names are mapped by [`server_name`]; two that map
/// to the same name are refused, naming both.
fn server_specs(servers: &[schema::McpServer]) -> Result<Vec<McpServerSpec>, AcpError> {
    let mut specs: Vec<McpServerSpec> = Vec::new();
    let mut given: HashMap<String, String> = HashMap::new();
    for server in servers {
        let (original, spec) = match server {
            schema::McpServer::Stdio(stdio) => (
                &stdio.name,
                McpServerSpec {
                    name: server_name(&stdio.name)?,
                    command: Some(stdio.command.display().to_string()),
                    args: stdio.args.clone(),
                    env: stdio.env.iter().map(|v| (v.name.clone(), v.value.clone())).collect(),
                    cwd: None,
                    url: None,
                    headers: Default::default(),
                },
            ),
            schema::McpServer::Http(http) => (
                &http.name,
                McpServerSpec {
                    name: server_name(&http.name)?,
                    command: None,
                    args: Vec::new(),
                    env: Default::default(),
                    cwd: None,
                    url: Some(http.url.clone()),
                    headers: http
                        .headers
                        .iter()
                        .map(|h| (h.name.clone(), h.value.clone()))
                        .collect(),
                },
            ),
            schema::McpServer::Sse(sse) => {
                return Err(invalid_params(format!(
                    "MCP server `{}`: the SSE transport is not supported (MCP deprecated it); \
                     use its streamable-HTTP endpoint (`\"type\": \"http\"`) or run it over stdio",
                    sse.name
                )));
            }
            _ => {
                return Err(invalid_params(
                    "an MCP server of a transport dsh does not know: use stdio or http".to_owned(),
                ));
            }
        };
        if let Some(first) = given.insert(spec.name.clone(), original.clone()) {
            return Err(invalid_params(format!(
                "MCP servers `{first}` and `{original}` both become `{}` in dsh (server names are \
                 letters, digits and `-`): rename one",
                spec.name
            )));
        }
        specs.push(spec);
    }
    Ok(specs)
}

/// An ACP server name as dsh's (1 to 32 ASCII letters, digits or `-`, so its tools can be
/// `NAME__TOOL`): every other character becomes `-` and the name is cut at 32 characters. The
/// same name always maps the same way (a `session/load` with the same servers resumes
/// byte-identical), and a valid name is kept as it is. A name with no letter or digit is
/// refused.
fn server_name(name: &str) -> Result<String, AcpError> {
    let mapped: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' })
        .take(32)
        .collect();
    if !mapped.chars().any(|c| c.is_ascii_alphanumeric()) {
        return Err(invalid_params(format!(
            "MCP server name `{}` has no ASCII letter or digit: dsh names a server's tools \
             `NAME__TOOL` with NAME made of letters, digits and `-`",
            name.escape_debug()
        )));
    }
    Ok(mapped)
}

/// A prompt's content blocks as the text of a dsh prompt: text as is, resource links as
/// Markdown links, embedded resources as tagged context.
fn prompt_text(blocks: &[schema::ContentBlock]) -> Result<String, AcpError> {
    let mut parts = Vec::new();
    for block in blocks {
        let value = serde_json::to_value(block).map_err(AcpError::into_internal_error)?;
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        match value["type"].as_str() {
            Some("text") => parts.push(text(&value["text"])),
            Some("resource_link") => {
                parts.push(format!("[@{}]({})", text(&value["name"]), text(&value["uri"])))
            }
            Some("resource") => {
                let resource = &value["resource"];
                match resource.get("text") {
                    Some(body) => parts.push(format!(
                        "<context ref=\"{}\">\n{}\n</context>",
                        text(&resource["uri"]),
                        text(body)
                    )),
                    None => {
                        return Err(invalid_params(format!(
                            "binary resource {} is not supported",
                            text(&resource["uri"])
                        )));
                    }
                }
            }
            other => {
                return Err(invalid_params(format!(
                    "{} content is not supported (see promptCapabilities)",
                    other.unwrap_or("unknown")
                )));
            }
        }
    }
    if parts.iter().all(|part| part.trim().is_empty()) {
        return Err(invalid_params("the prompt is empty"));
    }
    Ok(parts.join("\n"))
}

fn parse<T: serde::de::DeserializeOwned>(params: Value) -> Result<T, AcpError> {
    serde_json::from_value(params)
        .map_err(|error| invalid_params(format!("invalid params: {error}")))
}

fn invalid_params(message: impl Into<String>) -> AcpError {
    AcpError::new(-32602, message)
}

fn not_open(session_id: &str) -> AcpError {
    AcpError::new(
        -32002,
        format!("session {session_id} is not open here: call session/load or session/resume first"),
    )
}

/// A daemon error as an ACP error: an unknown session is ACP's "resource not found", a bad
/// workspace invalid params; other application codes pass through (`protocol/README.md`).
fn rpc_error(error: ClientError) -> AcpError {
    match error {
        ClientError::Rpc(object) => {
            let code = match object.code {
                dsh_protocol::code::SESSION_NOT_FOUND => -32002,
                dsh_protocol::code::INVALID_WORKSPACE => -32602,
                code => code,
            };
            AcpError::new(code, object.message)
        }
        other => AcpError::new(-32603, other.to_string()),
    }
}

/// Unix milliseconds as an RFC 3339 UTC timestamp.
fn iso8601(unix_ms: u64) -> String {
    let seconds = unix_ms / 1000;
    let (days, rest) = (seconds / 86_400, seconds % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        unix_ms % 1000
    )
}

#[cfg(test)]
mod tests;
