//! The forwarding task: reads the daemon connection's notifications in order, folds each open
//! session's events into `session/update`s (priced with the session's step costs) and sends
//! them, asks the editor's permission for each pending approval, and withdraws a permission
//! request once its approval is settled elsewhere.

use std::collections::HashMap;
use std::sync::Arc;

use agent_client_protocol::RequestCancellationHandle;
use agent_client_protocol::v1::schema;
use dsh_daemon::Unsolicited;
use dsh_daemon::client::event_of;
use dsh_protocol::method;
use dsh_protocol::{
    ApprovalChoice, ApprovalRequest, ApprovalRespondParams, Cost, EventData, SessionParams,
};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::open::Progress;
use super::{Connection, Front, lock};
use crate::backlog::{BACKLOG_STALL, send_update};
use crate::convert::chosen;
use crate::translate::META_USAGE;

impl Front {
    /// Reads the daemon connection's notifications in order and forwards each open session's
    /// events; returns when the daemon closes the connection.
    pub(super) async fn forward(
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
pub(super) fn priced(
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
