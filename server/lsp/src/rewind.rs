//! `dsh.rewind`: returns the workspace's files and the conversation to before a step
//! (`session/rewind`), asking first. LSP has no dialog of its own, so the question is a
//! `window/showMessageRequest` built from the rewind's dry run: the files it restores, recreates
//! and deletes, those it cannot restore, and the files changed since the agent's last
//! checkpoint by someone else — with those, the action is "Overwrite and rewind" (`force`).
//! A rewind refused for files changed after the question asks once more. `dryRun: true`
//! answers the plan and changes nothing; `confirm: false` does not ask (the client asked).

use std::sync::Arc;

use dsh_daemon::ClientError;
use dsh_protocol::method;
use dsh_protocol::{RewindConflictData, SessionRewindParams, SessionRewindResult, code};
use serde_json::{Value, json};
use tower_lsp_server::jsonrpc::{Error as RpcError, ErrorCode, Result as RpcResult};
use tower_lsp_server::ls_types::{MessageActionItem, MessageType};

use crate::server::{State, error, invalid};
use crate::text;

/// The action that rewinds, when nothing someone else changed is overwritten.
const REWIND: &str = "Rewind";
/// The action that rewinds over files someone else changed (`force`).
const OVERWRITE: &str = "Overwrite and rewind";
const CANCEL: &str = "Cancel";

/// `dsh.rewind`'s arguments beyond the session.
pub(crate) struct Rewind {
    pub(crate) step: Option<u64>,
    pub(crate) checkpoint: Option<u64>,
    pub(crate) files: Option<bool>,
    pub(crate) conversation: Option<bool>,
    pub(crate) force: bool,
    pub(crate) dry_run: bool,
    pub(crate) confirm: bool,
}

impl State {
    /// `dsh.rewind {sessionId?, step | checkpoint, files?, conversation?, force?, dryRun?,
    /// confirm?}`: the daemon's answer (`sessionId`: the session that continues) with
    /// `cancelled`; cancelled, the dry run's plan.
    pub(crate) async fn rewind(
        self: &Arc<Self>,
        session_id: String,
        asked: Rewind,
    ) -> RpcResult<Value> {
        if asked.step.is_some() == asked.checkpoint.is_some() {
            return Err(invalid("dsh.rewind needs `step` or `checkpoint` (one of them)"));
        }
        let params = |force: bool, dry_run: bool| SessionRewindParams {
            session_id: session_id.clone(),
            step: asked.step,
            checkpoint: asked.checkpoint,
            files: asked.files,
            conversation: asked.conversation,
            force: Some(force),
            dry_run: Some(dry_run),
        };
        let target = text::rewind_target(asked.step, asked.checkpoint);
        // What the daemon does by default: the conversation too when rewinding to a step.
        let conversation = asked.conversation.unwrap_or(asked.step.is_some());
        let mut force = asked.force;
        if asked.dry_run || asked.confirm {
            let plan = self.call_rewind(params(force, true)).await?;
            if asked.dry_run {
                return answer(&plan, false);
            }
            let question = text::rewind_question(&session_id, &target, &plan, conversation);
            let action = if plan.conflicts.is_empty() || force { REWIND } else { OVERWRITE };
            if !self.ask_to_rewind(question, action).await {
                return answer(&plan, true);
            }
            force |= action == OVERWRITE;
        }
        let result = match self.call_rewind(params(force, false)).await {
            Err(refused) if asked.confirm && refused.code == conflict_code() => {
                // Files changed between the question and the rewind: ask about those.
                let conflicts = refused
                    .data
                    .clone()
                    .and_then(|data| serde_json::from_value::<RewindConflictData>(data).ok())
                    .map(|data| data.conflicts)
                    .unwrap_or_default();
                if !self.ask_to_rewind(text::rewind_conflicts(&conflicts), OVERWRITE).await {
                    return Ok(json!({"cancelled": true, "conflicts": conflicts}));
                }
                self.call_rewind(params(true, false)).await?
            }
            other => other?,
        };
        self.lsp
            .show_message(MessageType::INFO, text::rewound(&session_id, &target, &result))
            .await;
        answer(&result, false)
    }

    /// `session/rewind`, its refusals with dsh's code and `data` (the conflicts, say).
    async fn call_rewind(&self, params: SessionRewindParams) -> RpcResult<SessionRewindResult> {
        self.dsh.call::<method::SessionRewind>(params).await.map_err(rewind_error)
    }

    /// Asks `question` with `action` and Cancel: whether `action` was picked (a client that
    /// cannot answer cancels).
    async fn ask_to_rewind(&self, question: String, action: &str) -> bool {
        let actions = [action, CANCEL]
            .into_iter()
            .map(|title| MessageActionItem {
                title: title.to_owned(),
                properties: Default::default(),
            })
            .collect();
        let picked =
            self.lsp.show_message_request(MessageType::WARNING, question, Some(actions)).await;
        match picked {
            Ok(Some(item)) => item.title == action,
            Ok(None) => false,
            Err(failure) => {
                tracing::warn!("window/showMessageRequest: {failure}");
                false
            }
        }
    }
}

fn conflict_code() -> ErrorCode {
    ErrorCode::from(i64::from(code::REWIND_CONFLICT))
}

/// The daemon's answer with `cancelled`.
fn answer(result: &SessionRewindResult, cancelled: bool) -> RpcResult<Value> {
    let mut value = serde_json::to_value(result).map_err(|e| error(format!("dsh: {e}")))?;
    if let Some(object) = value.as_object_mut() {
        object.insert("cancelled".to_owned(), Value::Bool(cancelled));
    }
    Ok(value)
}

/// A daemon error with its code and data, so a client can act on a refused rewind.
fn rewind_error(failure: ClientError) -> RpcError {
    match failure {
        ClientError::Rpc(object) => RpcError {
            code: ErrorCode::from(i64::from(object.code)),
            message: format!("dsh: {}", object.message).into(),
            data: object.data,
        },
        other => error(format!("dsh: {other}")),
    }
}
