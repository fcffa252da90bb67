//! The pure half of the front's answer to each client frame, in one function with no daemon,
//! for the `acp_frame` fuzz target and its regression test (`#[doc(hidden)]`, not an API): the
//! frame's params parsed as its method's type and converted as the handlers
//! (`front/handlers.rs`, `front/open.rs`, `front/forward.rs`) convert them before they call the
//! daemon — the workspace, the editor's MCP servers, a prompt's text, a model choice, a
//! `session/list` page, a permission answer. It restates their order, in the way
//! `front.rs`'s `answer` dispatches; what it returns is what the daemon would be asked.

use std::path::Path;

use agent_client_protocol::v1::schema::{
    CancelNotification, InitializeRequest, ListSessionsRequest, LoadSessionRequest,
    NewSessionRequest, PromptRequest, RequestPermissionResponse, ResumeSessionRequest,
    SetSessionConfigOptionRequest,
};
use dsh_protocol::{SessionCreateParams, SessionForkParams, SessionRequestParams, SessionSummary};
use serde::Serialize;
use serde_json::{Value, json};

use crate::convert::{
    decision, initialize, model_choice, prompt_text, server_specs, session_page, workspace,
};
use crate::error::parse;
use crate::ext::{self, ForkRequest, SteeringRequest};
use crate::front::AcpError;

/// The model the sessions of [`client_frame`] are pinned to.
pub const MODEL: &str = "m1";

/// What the front would ask the daemon for `frame` (a JSON-RPC request or notification from
/// the editor, or its answer to a permission request), as JSON: `null` for a frame the front
/// ignores. An error is the ACP error the editor would get, as on the wire.
pub fn client_frame(frame: &Value) -> Result<Value, Value> {
    answer(frame).map_err(|error| serde_json::to_value(error).unwrap_or(Value::Null))
}

fn answer(frame: &Value) -> Result<Value, AcpError> {
    let params = frame.get("params").cloned().unwrap_or(Value::Null);
    let Some(method) = frame.get("method").and_then(Value::as_str) else {
        // An answer: the only requests the front sends are permission requests.
        return match frame.get("result") {
            Some(result) => {
                let response: RequestPermissionResponse = parse(result.clone())?;
                to_json(decision(&response))
            }
            None => Ok(Value::Null),
        };
    };
    if frame.get("id").is_none() {
        // A notification: `session/cancel` is the one the front acts on.
        if method == "session/cancel" {
            let cancel: CancelNotification = parse(params)?;
            return Ok(json!({"sessionId": cancel.session_id.to_string()}));
        }
        return Ok(Value::Null);
    }
    match method {
        "initialize" => {
            let _: InitializeRequest = parse(params)?;
            to_json(initialize(false))
        }
        "session/new" => {
            let request: NewSessionRequest = parse(params)?;
            let workspace = workspace(&request.cwd)?;
            let servers = server_specs(&request.mcp_servers)?;
            to_json(SessionCreateParams {
                workspace,
                model: None,
                config: None,
                mcp_servers: Some(servers),
                images: None,
            })
        }
        "session/load" => {
            let request: LoadSessionRequest = parse(params)?;
            attach(&request.cwd, &request.mcp_servers, request.session_id.to_string())
        }
        "session/resume" => {
            let request: ResumeSessionRequest = parse(params)?;
            attach(&request.cwd, &request.mcp_servers, request.session_id.to_string())
        }
        "session/list" => {
            let request: ListSessionsRequest = parse(params)?;
            let workspace = request.cwd.as_deref().map(workspace).transpose()?;
            let sessions = sessions(workspace.as_deref().unwrap_or("/w"));
            to_json(session_page(sessions, request.cursor.as_deref())?)
        }
        "session/set_config_option" => {
            let request: SetSessionConfigOptionRequest = parse(params)?;
            model_choice(&request, MODEL)?;
            Ok(json!({"sessionId": request.session_id.to_string()}))
        }
        "session/prompt" => {
            let request: PromptRequest = parse(params)?;
            let text = prompt_text(&request.prompt)?;
            Ok(json!({"sessionId": request.session_id.to_string(), "text": text}))
        }
        ext::STEERING => {
            let request: SteeringRequest = parse(params)?;
            let text = prompt_text(&request.prompt)?;
            Ok(json!({"sessionId": request.session_id, "text": text}))
        }
        ext::FORK => {
            let request: ForkRequest = parse(params)?;
            to_json(SessionForkParams {
                session_id: request.session_id,
                at_seq: None,
                at_step: request.step,
                config: None,
            })
        }
        ext::REQUEST => to_json(parse::<SessionRequestParams>(params)?),
        "authenticate" => Ok(Value::Null),
        _ => Err(AcpError::method_not_found().data(json!({"method": method}))),
    }
}

/// `session/load` and `session/resume` before the daemon: the workspace, then the servers.
fn attach(
    cwd: &Path,
    servers: &[agent_client_protocol::v1::schema::McpServer],
    session_id: String,
) -> Result<Value, AcpError> {
    workspace(cwd)?;
    let servers = server_specs(servers)?;
    Ok(json!({"sessionId": session_id, "servers": to_json(servers)?}))
}

/// More sessions than one `session/list` page holds.
fn sessions(workspace: &str) -> Vec<SessionSummary> {
    (0..120u64)
        .map(|n| SessionSummary {
            session_id: format!("s{n:03}"),
            workspace: workspace.to_owned(),
            title: (n % 3 == 0).then(|| format!("session {n}")),
            created_ms: n * 1000,
            updated_ms: (n % 7) * 86_400_000,
            turns: n % 4,
            steps: n % 9,
            forked_from: None,
            parent: None,
            last_usage: None,
            profile: None,
            model: Some(MODEL.to_owned()),
            cost: None,
            running: n % 5 == 0,
            error: None,
        })
        .collect()
}

fn to_json(answer: impl Serialize) -> Result<Value, AcpError> {
    serde_json::to_value(answer).map_err(AcpError::into_internal_error)
}
