//! What an editor asks, parsed: a client frame's params as its method's type, converted to
//! what the daemon will be asked — the workspace, the editor's MCP servers, a prompt's text and
//! images, a model choice, a `session/list` cursor, a permission answer — with no daemon and no
//! I/O. The front's dispatch (`front.rs`) runs every request through [`client_request`] and
//! every notification through [`client_notification`] before a handler calls the daemon, and
//! turns the editor's answer to a permission request into a decision with
//! [`permission_decision`]; the `acp_frame` fuzz target calls the same three functions, so
//! what it fuzzes is what the front runs. Params that do not fit are refused here with ACP's
//! "invalid params", before anything reaches the daemon.

use agent_client_protocol::v1::schema::{
    CancelNotification, ListSessionsRequest, ListSessionsResponse, LoadSessionRequest,
    NewSessionRequest, PromptRequest, ResumeSessionRequest, SetSessionConfigOptionRequest,
};
use dsh_protocol::{
    Attachment, McpServerSpec, SessionForkParams, SessionParams, SessionRequestParams,
    SessionRewindParams, SessionSummary,
};
use serde::Serialize;
use serde_json::{Value, json};

pub use crate::convert::decision as permission_decision;
use crate::convert::{
    list_cursor, model_choice, prompt_parts, prompt_text, server_specs, session_page, workspace,
};
use crate::error::parse;
use crate::ext::{self, ForkRequest, RewindRequest, SteeringRequest};
use crate::front::AcpError;

/// A request of the editor, parsed and converted: what the front's handler for it gets.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ClientRequest {
    /// `initialize`: its params are not read (every client gets the same answer).
    Initialize,
    /// `authenticate`: dsh asks for none, so there is nothing to read.
    Authenticate,
    /// `session/new`: the session to create.
    NewSession {
        /// The `cwd`, absolute, as it came.
        workspace: String,
        /// The editor's MCP servers as the session's own.
        servers: Vec<McpServerSpec>,
    },
    /// `session/load` (`replay`: the conversation is replayed first) and `session/resume`:
    /// the session to open here (its `cwd` was checked absolute).
    Attach {
        /// The session.
        session_id: String,
        /// The editor's MCP servers, given to the session before it is opened.
        servers: Vec<McpServerSpec>,
        /// `session/load`.
        replay: bool,
    },
    /// `session/list`: which sessions, which page.
    List(ListPage),
    /// `session/set_config_option`: checked against the session's model once it is known.
    SetConfigOption(ModelChoice),
    /// `session/prompt`: a turn to run.
    Prompt {
        /// The session.
        session_id: String,
        /// The prompt's text (never blank).
        text: String,
        /// Its images, in order.
        attachments: Vec<Attachment>,
    },
    /// `_session/steering`: text for the running turn's next request.
    Steer {
        /// The session.
        session_id: String,
        /// The text (never blank).
        text: String,
    },
    /// `_dsh/fork`: the daemon's `session/fork` params.
    Fork(SessionForkParams),
    /// `_dsh/request`: the daemon's `session/request` params.
    Request(SessionRequestParams),
    /// `_dsh/rewind`: the daemon's `session/rewind` params.
    Rewind(SessionRewindParams),
}

/// `session/list`'s params: the workspace (every one without it) and the first session of the
/// page.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListPage {
    /// The `cwd`, absolute; `None`: every workspace.
    pub workspace: Option<String>,
    /// The index of the page's first session (the cursor the previous page gave).
    pub start: usize,
}

impl ListPage {
    /// The page of `sessions` (the daemon's list) this request asks for: newest first, at most
    /// 50, with the next page's cursor when there is one.
    pub fn page(&self, sessions: Vec<SessionSummary>) -> ListSessionsResponse {
        session_page(sessions, self.start)
    }
}

/// `session/set_config_option`'s params.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ModelChoice(SetSessionConfigOptionRequest);

impl ModelChoice {
    /// The session whose option is set.
    pub fn session_id(&self) -> String {
        self.0.session_id.to_string()
    }

    /// Accepted for a session pinned to `model` only when it sets the model to that model;
    /// anything else is refused, saying how to get another model.
    pub fn check(&self, model: &str) -> Result<(), AcpError> {
        model_choice(&self.0, model)
    }
}

/// The request `method` with `params`, parsed and converted for its handler; ACP's "invalid
/// params" when they do not fit, "method not found" for a method the front does not serve.
pub fn client_request(method: &str, params: Value) -> Result<ClientRequest, AcpError> {
    Ok(match method {
        "initialize" => ClientRequest::Initialize,
        "authenticate" => ClientRequest::Authenticate,
        "session/new" => {
            let request: NewSessionRequest = parse(params)?;
            let workspace = workspace(&request.cwd)?;
            // Checked before anything is created: a server dsh cannot take fails the request.
            let servers = server_specs(&request.mcp_servers)?;
            ClientRequest::NewSession { workspace, servers }
        }
        "session/load" => {
            let request: LoadSessionRequest = parse(params)?;
            workspace(&request.cwd)?;
            let servers = server_specs(&request.mcp_servers)?;
            ClientRequest::Attach {
                session_id: request.session_id.to_string(),
                servers,
                replay: true,
            }
        }
        "session/resume" => {
            let request: ResumeSessionRequest = parse(params)?;
            workspace(&request.cwd)?;
            let servers = server_specs(&request.mcp_servers)?;
            let session_id = request.session_id.to_string();
            ClientRequest::Attach { session_id, servers, replay: false }
        }
        "session/list" => {
            let request: ListSessionsRequest = parse(params)?;
            let workspace = request.cwd.as_deref().map(workspace).transpose()?;
            let start = list_cursor(request.cursor.as_deref())?;
            ClientRequest::List(ListPage { workspace, start })
        }
        "session/set_config_option" => ClientRequest::SetConfigOption(ModelChoice(parse(params)?)),
        "session/prompt" => {
            let request: PromptRequest = parse(params)?;
            let (text, attachments) = prompt_parts(&request.prompt)?;
            ClientRequest::Prompt { session_id: request.session_id.to_string(), text, attachments }
        }
        ext::STEERING => {
            let request: SteeringRequest = parse(params)?;
            let text = prompt_text(&request.prompt)?;
            ClientRequest::Steer { session_id: request.session_id, text }
        }
        ext::FORK => {
            let request: ForkRequest = parse(params)?;
            ClientRequest::Fork(SessionForkParams {
                session_id: request.session_id,
                at_seq: None,
                at_step: request.step,
                config: None,
            })
        }
        ext::REQUEST => ClientRequest::Request(parse(params)?),
        ext::REWIND => ClientRequest::Rewind(parse::<RewindRequest>(params)?.into_params()),
        _ => return Err(AcpError::method_not_found().data(json!({"method": method}))),
    })
}

/// The notification `method` with `params`: the session to cancel for `session/cancel`, `None`
/// for any other (ACP's rule: unknown notifications, extension ones included, are ignored).
/// A `session/cancel` whose params do not fit is "invalid params" (a notification has no
/// answer: the front logs it).
pub fn client_notification(method: &str, params: Value) -> Result<Option<SessionParams>, AcpError> {
    if method != "session/cancel" {
        return Ok(None);
    }
    let cancel: CancelNotification = parse(params)?;
    Ok(Some(SessionParams { session_id: cancel.session_id.to_string() }))
}
