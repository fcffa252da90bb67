//! The handlers of the ACP methods that are more than opening a session: `session/new`,
//! `session/set_config_option`, `session/list`, `session/prompt` and the extensions
//! (`_session/steering`, `_dsh/fork`, `_dsh/request`, `_dsh/rewind`). Each calls the daemon and answers with
//! the SDK's typed response (or `ext.rs`'s, for an extension), built by `convert.rs`. Each
//! gets its request parsed and converted by `frame.rs`.

use std::sync::Arc;

use agent_client_protocol::v1::schema::{
    ListSessionsResponse, NewSessionResponse, PromptResponse, SetSessionConfigOptionResponse,
};
use dsh_protocol::{
    Attachment, McpServerSpec, NoParams, SessionCreateParams, SessionForkParams,
    SessionInjectParams, SessionListParams, SessionPromptParams, SessionRequestParams,
    SessionRequestResult, SessionRewindParams, SessionRewindResult, code, method,
};

use super::open::FLUSH_DEADLINE;
use super::{AcpError, Front, lock};
use crate::convert::{model_selector, prompt_response};
use crate::error::{create_refused, not_open, rpc_error};
use crate::ext::{ForkResponse, SteeringResponse};
use crate::frame::{ListPage, ModelChoice};

impl Front {
    /// `session/new`: creates the session with `dsh acp`'s profile and model and the editor's
    /// MCP servers, and opens it here before the answer.
    pub(super) async fn new_session(
        self: &Arc<Self>,
        workspace: String,
        servers: Vec<McpServerSpec>,
    ) -> Result<NewSessionResponse, AcpError> {
        // The daemon checks the servers before it creates the session: a refused list leaves
        // nothing behind.
        let asked = &self.options.session;
        let params = SessionCreateParams {
            workspace,
            model: None,
            config: Some(asked.clone()),
            mcp_servers: Some(servers),
            images: None,
        };
        let created = self
            .client
            .call::<method::SessionCreate>(params)
            .await
            .map_err(|error| create_refused(error, asked))?;
        self.open(&created.session_id, true).await?;
        // The session exists now: a selector that cannot be shown is left out, not an error
        // that would tell the editor no session was made.
        let options = match self.config_options(&created.session_id).await {
            Ok(options) => Some(options),
            Err(error) => {
                tracing::warn!(session = %created.session_id, "no model selector: {}", error.message);
                None
            }
        };
        Ok(NewSessionResponse::new(created.session_id).config_options(options))
    }

    /// `session/set_config_option`: the model a session is pinned to is the one value its
    /// selector takes; any other is refused, saying how to get it.
    pub(super) async fn set_config_option(
        &self,
        choice: ModelChoice,
    ) -> Result<SetSessionConfigOptionResponse, AcpError> {
        let session_id = choice.session_id();
        if !lock(&self.sessions).contains_key(&session_id) {
            return Err(not_open(&session_id));
        }
        let usage = self.usage(&session_id).await?;
        choice.check(&usage.model)?;
        Ok(SetSessionConfigOptionResponse::new(model_selector(&usage.model, &usage.profile)))
    }

    /// `session/list`: the sessions of `cwd` (of every workspace without one), a page at a time.
    pub(super) async fn list_sessions(
        &self,
        page: ListPage,
    ) -> Result<ListSessionsResponse, AcpError> {
        let workspace = page.workspace.clone();
        let listed = self.client.call::<method::SessionList>(SessionListParams { workspace }).await;
        let sessions = match listed {
            Ok(listed) => listed.sessions,
            // A directory that is no workspace (gone, never existed) has no sessions.
            Err(error) if error.code() == Some(code::INVALID_WORKSPACE) => Vec::new(),
            Err(error) => return Err(rpc_error(error)),
        };
        Ok(page.page(sessions))
    }

    /// Whether the sessions `session/new` creates take images (ACP's `promptCapabilities.image`
    /// is the connection's, not a session's): their profile (the front's `--provider`, else
    /// the default) has the front's `--model` reading images, or, without `--model`, any
    /// model reading images. A session whose model does not is still refused an image, naming
    /// the model, before anything is logged.
    pub(super) async fn takes_images(&self) -> bool {
        let Ok(status) = self.client.call::<method::DaemonStatus>(NoParams {}).await else {
            return false;
        };
        let wanted = self.options.session.profile.as_deref();
        let profile = status.profiles.iter().find(|profile| match wanted {
            Some(name) => profile.name == name,
            None => profile.default,
        });
        let model = self.options.session.model.as_deref();
        profile.is_some_and(|profile| {
            profile.models.iter().any(|m| m.images && model.is_none_or(|model| m.id == model))
        })
    }

    /// `session/prompt`: runs a turn and answers once every update of it has left.
    pub(super) async fn prompt(
        &self,
        session_id: String,
        text: String,
        attachments: Vec<Attachment>,
    ) -> Result<PromptResponse, AcpError> {
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
            limits: None,
            output_schema: None,
            attachments,
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
        prompt_response(result, finish.as_deref())
    }

    /// `_session/steering`: the text joins the running turn's next request; without a running
    /// turn nothing is logged and the client is told to prompt.
    pub(super) async fn steer(
        &self,
        session_id: String,
        text: String,
    ) -> Result<SteeringResponse, AcpError> {
        let running = match lock(&self.sessions).get(&session_id) {
            Some(open) => open.translator.running_turn.is_some(),
            None => return Err(not_open(&session_id)),
        };
        if !running {
            return Ok(SteeringResponse::no_running_turn());
        }
        let params = SessionInjectParams { session_id, text };
        let injected =
            self.client.call::<method::SessionInject>(params).await.map_err(rpc_error)?;
        Ok(SteeringResponse::injected(injected.seq))
    }

    /// `_dsh/fork`: a new session holding the log before the step (the whole log without one).
    pub(super) async fn fork(&self, params: SessionForkParams) -> Result<ForkResponse, AcpError> {
        let forked = self.client.call::<method::SessionFork>(params).await.map_err(rpc_error)?;
        Ok(ForkResponse { session_id: forked.session_id })
    }

    /// `_dsh/request`: what the model saw at a step, the daemon's answer as it is.
    pub(super) async fn what_the_model_saw(
        &self,
        request: SessionRequestParams,
    ) -> Result<SessionRequestResult, AcpError> {
        self.client.call::<method::SessionRequest>(request).await.map_err(rpc_error)
    }

    /// `_dsh/rewind`: the daemon's `session/rewind`, its answer as it is. After a conversation
    /// rewind, `sessionId` is the fork that continues: the client opens it with `session/load`
    /// (a replay up to the step), as after `_dsh/fork`; the rewound session stays as it was,
    /// history. A refusal keeps dsh's code and `data` (the conflicts to show, say).
    pub(super) async fn rewind(
        &self,
        params: SessionRewindParams,
    ) -> Result<SessionRewindResult, AcpError> {
        self.client.call::<method::SessionRewind>(params).await.map_err(rpc_error)
    }
}
