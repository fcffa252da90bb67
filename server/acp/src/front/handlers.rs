//! The handlers of the ACP methods that are more than opening a session: `session/new`,
//! `session/set_config_option`, `session/list`, `session/prompt` and the extensions
//! (`_session/steering`, `_dsh/fork`, `_dsh/request`).

use std::sync::Arc;

use agent_client_protocol::v1::schema;
use dsh_protocol::method;
use dsh_protocol::{
    SessionCreateParams, SessionForkParams, SessionInjectParams, SessionListParams,
    SessionPromptParams, SessionRequestParams, StopReason,
};
use serde_json::{Value, json};

use super::open::FLUSH_DEADLINE;
use super::{AcpError, Front, lock};
use crate::convert::{
    ForkRequest, SetConfigOption, SteeringRequest, checked_cwd, iso8601, prompt_text, server_specs,
};
use crate::error::{invalid_params, not_open, rpc_error};
/// Sessions per `session/list` page.
const LIST_PAGE: usize = 50;

impl Front {
    pub(super) async fn new_session(
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

    /// `session/set_config_option`: the model a session is pinned to is the one value its
    /// selector takes; any other is refused, saying how to get it.
    pub(super) async fn set_config_option(
        &self,
        request: SetConfigOption,
    ) -> Result<Value, AcpError> {
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

    pub(super) async fn list_sessions(
        &self,
        request: schema::ListSessionsRequest,
    ) -> Result<Value, AcpError> {
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

    pub(super) async fn prompt(&self, request: schema::PromptRequest) -> Result<Value, AcpError> {
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

    pub(super) async fn steer(&self, request: SteeringRequest) -> Result<Value, AcpError> {
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

    pub(super) async fn fork(&self, request: ForkRequest) -> Result<Value, AcpError> {
        let params = SessionForkParams {
            session_id: request.session_id,
            at_seq: None,
            at_step: request.step,
            config: None,
        };
        let forked = self.client.call::<method::SessionFork>(params).await.map_err(rpc_error)?;
        Ok(json!({"sessionId": forked.session_id}))
    }

    pub(super) async fn what_the_model_saw(
        &self,
        request: SessionRequestParams,
    ) -> Result<Value, AcpError> {
        let saw = self.client.call::<method::SessionRequest>(request).await.map_err(rpc_error)?;
        serde_json::to_value(saw).map_err(AcpError::into_internal_error)
    }
}
