//! The front's connection: ACP requests from the editor become calls to the daemon; the events
//! of each open session's subscription become `session/update`s and permission requests.
//!
//! Tasks: the SDK's dispatch loop runs [`Front::dispatch`], which answers quick messages in
//! place and spawns a task per request that waits on the daemon (a prompt waits for its whole
//! turn); one forwarding task ([`Front::forward`], `forward.rs`) reads the daemon connection's
//! notifications in order and is the only writer of `session/update`s, so updates leave in log
//! order. The sessions map is a `std::sync::Mutex`, never held across an await. Every request's
//! and notification's params are parsed and converted by `frame.rs` before a handler sees them;
//! the handlers of the methods are in `handlers.rs`, opening a session (subscribe, replay) in
//! `open.rs`.

mod children;
mod forward;
mod handlers;
mod open;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use agent_client_protocol::v1::schema::{
    AuthenticateResponse, LoadSessionResponse, ResumeSessionResponse,
};
use agent_client_protocol::v1::{ConnectionTo, Dispatch};
use agent_client_protocol::{Agent, ByteStreams, Client as AcpClient, UntypedMessage};
use dsh_daemon::{Client, Unsolicited};
use dsh_protocol::method;
use dsh_protocol::{SessionConfig, SessionParams};
use serde::Serialize;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

use crate::backlog::{Backlog, Counted};
use crate::convert;
use crate::error::internal;
use crate::frame::{self, ClientRequest};
use open::Open;

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
        children: Mutex::default(),
        backlog: Arc::clone(&backlog),
    });
    let output = Counted::new(output, backlog);
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
                // Cancel-safe: the forwarding task is dropped with its receiver; nothing half-sent.
                () = front.forward(inbox, connection.clone()) => {
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

/// The front's shared state: the daemon, the flags, the sessions open here, the output's
/// backlog.
struct Front {
    client: Arc<Client>,
    options: FrontOptions,
    sessions: Mutex<HashMap<String, Open>>,
    /// The running children of sessions open here, followed for their progress, by child.
    children: Mutex<HashMap<String, children::Followed>>,
    backlog: Arc<Backlog>,
}

pub(crate) type Connection = ConnectionTo<AcpClient>;
pub(crate) type AcpError = agent_client_protocol::Error;

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
                    let asked = params.get("sessionId").and_then(Value::as_str).map(str::to_owned);
                    let answer = front.answer(&method, params, &connection).await;
                    // The session a successful `session/new`, `session/load` or
                    // `session/resume` opened: its commands are advertised after the answer.
                    let opened = match (&answer, method.as_str()) {
                        (Ok(result), "session/new") => {
                            result.get("sessionId").and_then(Value::as_str).map(str::to_owned)
                        }
                        (Ok(_), "session/load" | "session/resume") => asked,
                        _ => None,
                    };
                    let sent = match answer {
                        Ok(result) => responder.respond(result),
                        Err(error) => responder.respond_with_error(error),
                    };
                    if let Err(error) = sent {
                        tracing::debug!("answering {method}: {error}");
                    }
                    if let Some(session_id) = opened {
                        front.advertise_commands(&session_id, &connection).await;
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
        let params = match frame::client_notification(&notification.method, notification.params) {
            Ok(Some(params)) => params,
            // Unknown notifications, extension ones included, are ignored (ACP's rule).
            Ok(None) => {
                tracing::debug!("ignoring notification {}", notification.method);
                return;
            }
            Err(error) => {
                tracing::warn!("{}: {}", notification.method, error.message);
                return;
            }
        };
        let session_id = params.session_id.clone();
        if let Err(error) = self.client.call::<method::SessionCancel>(params).await {
            tracing::warn!("cancelling {session_id}: {error}");
        }
    }

    /// Sends the session's prompt commands as `available_commands_update` (after the answer
    /// that opened it, so the editor knows the session), when it has any. A daemon that cannot
    /// list them is logged and nothing is sent.
    async fn advertise_commands(&self, session_id: &str, connection: &Connection) {
        let params = SessionParams { session_id: session_id.to_owned() };
        match self.client.call::<method::SessionCommands>(params).await {
            // Nothing to offer: nothing sent (the editor's list stays empty).
            Ok(listed) if listed.commands.is_empty() => {}
            Ok(listed) => {
                let update = convert::available_commands(&listed);
                let _ = crate::backlog::send_update(connection, &self.backlog, session_id, update)
                    .await;
            }
            Err(error) => {
                tracing::warn!(session = %session_id, "no commands to advertise: {error}")
            }
        }
    }

    /// The answer to one request: its method's handler, its typed answer as the result.
    async fn answer(
        self: &Arc<Self>,
        method: &str,
        params: Value,
        connection: &Connection,
    ) -> Result<Value, AcpError> {
        if let Some(refusal) = &self.options.refusal {
            return Err(internal(refusal.clone()));
        }
        match frame::client_request(method, params)? {
            ClientRequest::Initialize => result(convert::initialize(self.takes_images().await)),
            ClientRequest::Authenticate => result(AuthenticateResponse::new()),
            ClientRequest::NewSession { workspace, servers } => {
                result(self.new_session(workspace, servers).await?)
            }
            ClientRequest::Attach { session_id, servers, replay } => {
                let options = self.attach(&session_id, servers, replay, connection).await?;
                if replay {
                    result(LoadSessionResponse::new().config_options(options))
                } else {
                    result(ResumeSessionResponse::new().config_options(options))
                }
            }
            ClientRequest::List(page) => result(self.list_sessions(page).await?),
            ClientRequest::SetConfigOption(choice) => result(self.set_config_option(choice).await?),
            ClientRequest::Prompt { session_id, text, attachments } => {
                result(self.prompt(session_id, text, attachments).await?)
            }
            ClientRequest::Steer { session_id, text } => {
                result(self.steer(session_id, text).await?)
            }
            ClientRequest::Fork(params) => result(self.fork(params).await?),
            ClientRequest::Request(params) => result(self.what_the_model_saw(params).await?),
            ClientRequest::Rewind(params) => result(self.rewind(params).await?),
        }
    }
}

/// A typed answer as the untyped result the dispatch responds with.
fn result(answer: impl Serialize) -> Result<Value, AcpError> {
    serde_json::to_value(answer).map_err(AcpError::into_internal_error)
}
