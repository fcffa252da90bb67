//! The forwarding task: reads the daemon connection's notifications in order, folds each open
//! session's events into `session/update`s and sends them, then marks them forwarded (what a
//! prompt's answer and an open wait for); asks the editor's permission for each pending
//! approval, and withdraws a permission request once its approval is settled elsewhere.

use std::sync::Arc;

use agent_client_protocol::RequestCancellationHandle;
use agent_client_protocol::v1::schema::{SessionUpdate, ToolCallUpdateFields};
use dsh_daemon::Unsolicited;
use dsh_daemon::client::event_of;
use dsh_protocol::{
    ApprovalChoice, ApprovalRequest, ApprovalRespondParams, Event, EventData, TaskSpawn, method,
};
use tokio::sync::mpsc;

use super::open::Progress;
use super::{Connection, Front, lock};
use crate::backlog::{BACKLOG_STALL, send_update};
use crate::convert::permission_request;
use crate::frame::permission_decision;

/// What one event makes: its updates, and the approvals to ask for now with their calls'
/// fields.
struct Folded {
    updates: Vec<SessionUpdate>,
    ask: Vec<(ApprovalRequest, ToolCallUpdateFields)>,
    /// A live `task/spawn`: its child is followed for its progress.
    follow: Option<TaskSpawn>,
}

impl Front {
    /// Reads the daemon connection's notifications in order and forwards each open session's
    /// events; returns when the daemon closes the connection (or the editor stops reading).
    pub(super) async fn forward(
        self: &Arc<Self>,
        mut inbox: mpsc::UnboundedReceiver<Unsolicited>,
        connection: Connection,
    ) {
        while let Some(message) = inbox.recv().await {
            let Unsolicited::Notification(notification) = message else { continue };
            let Some((_, delivered)) = event_of(&notification) else { continue };
            let (session_id, event) = (delivered.session_id, delivered.event);
            // A followed child's step: progress of its parent's `task` call (the child may
            // also be open here as a session of its own, folded below).
            if self.is_followed(&session_id)
                && let Some((parent, update)) = self.child_progress(&session_id, &event).await
                && send_update(&connection, &self.backlog, &parent, update).await.is_err()
            {
                tracing::error!(
                    "the editor has read nothing for {BACKLOG_STALL:?}: ending the front"
                );
                return;
            }
            // A live step's cost is looked up before its `usage_update` is made (once: a
            // replay's are all known from the open).
            if let EventData::StepEnd(end) = &event.data
                && self.unpriced(&session_id, end.step)
            {
                self.price_steps(&session_id).await;
            }
            let Some(Folded { updates, ask, follow }) = self.fold(&session_id, &event) else {
                continue;
            };
            for update in updates {
                if send_update(&connection, &self.backlog, &session_id, update).await.is_err() {
                    tracing::error!(
                        "the editor has read nothing for {BACKLOG_STALL:?}: ending the front"
                    );
                    return;
                }
            }
            self.forwarded(&session_id, &event);
            if let Some(spawn) = follow {
                self.follow_child(&session_id, &spawn).await;
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

    /// Folds `event` of `session_id`: `None` when the session is not open here or the event
    /// was forwarded already. A `user/message` of this front's own prompt makes no update (its
    /// client has it); approvals are asked once the replay is through; a permission request
    /// whose approval is no longer pending is withdrawn.
    fn fold(&self, session_id: &str, event: &Event) -> Option<Folded> {
        let mut sessions = lock(&self.sessions);
        let open = sessions.get_mut(session_id)?;
        if event.seq < open.progress.borrow().next_seq {
            return None;
        }
        let mut updates = open.translator.updates(event);
        if let EventData::UserMessage(message) = &event.data
            && let Some(at) = open.prompted.iter().position(|sent| *sent == message.text)
        {
            open.prompted.remove(at);
            updates.clear();
        }
        let mut ask = Vec::new();
        let live = event.seq + 1 >= open.replay_end;
        let follow = match &event.data {
            EventData::TaskSpawn(spawn) if live && open.translator.is_pending(&spawn.call_id) => {
                Some(spawn.clone())
            }
            _ => None,
        };
        if live {
            for (approval_id, request) in &open.translator.pending_approvals {
                if open.asked.insert(approval_id.clone()) {
                    let fields = open.translator.tool_call_fields(&request.call_id, &request.tool);
                    ask.push((request.clone(), fields));
                }
            }
        }
        // Decided by another front, timed out, its turn cancelled.
        let pending = &open.translator.pending_approvals;
        open.asking.retain(|approval_id, handle| {
            let keep = pending.contains_key(approval_id);
            if !keep {
                let _ = handle.cancel();
            }
            keep
        });
        Some(Folded { updates, ask, follow })
    }

    /// Marks `event` and its updates forwarded, and the turn that ended with it.
    fn forwarded(&self, session_id: &str, event: &Event) {
        if let Some(open) = lock(&self.sessions).get(session_id) {
            let ended_turn = open.translator.last_ended.map(|(turn, _)| turn);
            open.progress.send_replace(Progress { next_seq: event.seq + 1, ended_turn });
        }
    }

    /// Whether step `step` of a session open here has no cost yet.
    fn unpriced(&self, session_id: &str, step: u64) -> bool {
        lock(&self.sessions).get(session_id).is_some_and(|open| !open.translator.is_priced(step))
    }

    /// Prices the session's finished steps with `session/usage` (at the configured prices). A
    /// failed look-up leaves the step unpriced: its `usage_update` has no cost.
    async fn price_steps(&self, session_id: &str) {
        match self.usage(session_id).await {
            Ok(usage) => {
                if let Some(open) = lock(&self.sessions).get_mut(session_id) {
                    open.translator.price_steps(usage.rows);
                }
            }
            Err(error) => tracing::debug!("pricing the steps of {session_id}: {}", error.message),
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
        fields: ToolCallUpdateFields,
    ) {
        let request = permission_request(&session_id, &asked, fields);
        let ApprovalRequest { approval_id, call_id, .. } = asked;
        let sent = connection.send_request(request);
        self.track_asking(&session_id, &approval_id, sent.cancellation_handle());
        let answer = sent.block_task().await;
        if let Some(open) = lock(&self.sessions).get_mut(&session_id) {
            open.asking.remove(&approval_id);
        }
        let decision = match answer {
            Ok(response) => permission_decision(&response),
            Err(error) => {
                tracing::debug!("asking permission for {call_id}: {error}");
                ApprovalChoice::Deny
            }
        };
        let params = ApprovalRespondParams { session_id, approval_id, decision };
        if let Err(error) = self.client.call::<method::ApprovalRespond>(params).await {
            // Answered elsewhere, timed out, or the turn was cancelled: nothing waits anymore.
            tracing::debug!("answering approval: {error}");
        }
    }

    /// Remembers an unanswered permission request so the forwarding task can withdraw it;
    /// withdraws it at once when its approval was settled while it was being sent.
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
