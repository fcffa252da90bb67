//! Following a turn: a `session/subscribe` from where the turn's events begin, turned into what
//! the editor shows — `$/progress` (begun when following starts, a report per step start and
//! end, ended with the turn), a `window/showMessageRequest` per approval the turn waits for,
//! a `window/showMessage` at its end — and into stale attribution when the turn writes or
//! edits a file. The turn's `turn/end` ends the following: the subscription starts before the
//! turn's first event, so it is always seen.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use dsh_protocol::method;
use dsh_protocol::{
    ApprovalChoice, ApprovalRequest, ApprovalRespondParams, EventData, SessionEvent,
    SessionEventsParams, SessionSubscribeParams,
};
use serde_json::Value;
use tower_lsp_server::ls_types::notification::Progress;
use tower_lsp_server::ls_types::request::WorkDoneProgressCreate;
use tower_lsp_server::ls_types::*;

use crate::server::{State, lock};
use crate::text;

/// The longest wait for the editor to take a progress report or a message from the router:
/// an editor that stops reading loses reports, and the daemon's events never pile up behind it.
const DELIVERY: Duration = Duration::from_secs(1);

/// Runs `send` for at most [`DELIVERY`].
async fn deliver(send: impl std::future::Future<Output = ()>) {
    if tokio::time::timeout(DELIVERY, send).await.is_err() {
        tracing::debug!("the editor is not reading: a report was dropped");
    }
}

/// A followed turn: its progress token (`None`: the editor takes no progress), and the
/// subscription delivering its events (`None` until `session/subscribe` answers).
#[derive(Clone, Default)]
pub(crate) struct Followed {
    token: Option<ProgressToken>,
    subscription: Option<Value>,
}

fn report(message: String) -> WorkDoneProgressReport {
    WorkDoneProgressReport { cancellable: None, message: Some(message), percentage: None }
}

impl State {
    /// Follows a session's turn from `from_seq`, where its events begin (`None`: the log's
    /// end, for a turn about to be asked for); nothing when it is followed already.
    pub(crate) async fn follow(self: &Arc<Self>, session_id: &str, from_seq: Option<u64>) {
        let _one_at_a_time = self.follows.lock().await;
        if lock(&self.inner).followed.contains_key(session_id) {
            return;
        }
        let token = self.begin_progress(session_id).await;
        let followed = Followed { token, ..Followed::default() };
        lock(&self.inner).followed.insert(session_id.to_owned(), followed);
        let from_seq = match from_seq {
            Some(seq) => Some(seq),
            None => self.log_length(session_id).await,
        };
        let subscription = match from_seq {
            Some(from_seq) => self.subscribe(session_id, from_seq).await,
            None => None,
        };
        match subscription {
            Some(subscription) => {
                if let Some(followed) = lock(&self.inner).followed.get_mut(session_id) {
                    followed.subscription = Some(subscription);
                }
            }
            None => {
                drop(_one_at_a_time);
                self.unfollow(session_id).await;
            }
        }
    }

    /// `session/subscribe` from `from_seq`: the subscription id (`None`: refused, as logged).
    async fn subscribe(&self, session_id: &str, from_seq: u64) -> Option<Value> {
        let params =
            SessionSubscribeParams { session_id: session_id.to_owned(), from_seq: Some(from_seq) };
        match self.dsh.call::<method::SessionSubscribe>(params).await {
            Ok(subscription) => Some(subscription),
            Err(failure) => {
                tracing::warn!("subscribing to {session_id}: {failure}");
                None
            }
        }
    }

    /// How many events a session's log holds (`None`: the daemon cannot say, as logged).
    pub(crate) async fn log_length(&self, session_id: &str) -> Option<u64> {
        let params =
            SessionEventsParams { session_id: session_id.to_owned(), from_seq: 0, limit: 0 };
        match self.dsh.call::<method::SessionEvents>(params).await {
            Ok(page) => Some(page.length),
            Err(failure) => {
                tracing::warn!("following {session_id}: {failure}");
                None
            }
        }
    }

    async fn begin_progress(&self, session_id: &str) -> Option<ProgressToken> {
        let token = {
            let mut inner = lock(&self.inner);
            if !inner.capabilities.work_done_progress {
                return None;
            }
            inner.progress_tokens += 1;
            ProgressToken::String(format!("dsh-turn-{}", inner.progress_tokens))
        };
        let created = self
            .lsp
            .send_request::<WorkDoneProgressCreate>(WorkDoneProgressCreateParams {
                token: token.clone(),
            })
            .await;
        if created.is_err() {
            return None;
        }
        self.progress(
            &token,
            WorkDoneProgress::Begin(WorkDoneProgressBegin {
                title: "dsh".to_owned(),
                cancellable: Some(false),
                message: Some(format!("turn running in {session_id}")),
                percentage: None,
            }),
        )
        .await;
        Some(token)
    }

    async fn progress(&self, token: &ProgressToken, value: WorkDoneProgress) {
        let params =
            ProgressParams { token: token.clone(), value: ProgressParamsValue::WorkDone(value) };
        self.lsp.send_notification::<Progress>(params).await;
    }

    /// Stops following a session: ends its progress and its subscription.
    pub(crate) async fn unfollow(&self, session_id: &str) {
        let Some(followed) = lock(&self.inner).followed.remove(session_id) else { return };
        if let Some(token) = followed.token {
            let end = WorkDoneProgressEnd { message: Some("turn ended".to_owned()) };
            deliver(self.progress(&token, WorkDoneProgress::End(end))).await;
        }
        if let Some(subscription) = followed.subscription
            && let Err(failure) = self.dsh.call::<method::SessionUnsubscribe>([subscription]).await
        {
            tracing::debug!("unsubscribing from {session_id}: {failure}");
        }
    }

    /// Whether `subscription` delivers the events of a followed session: its current one (an
    /// older one may still deliver a few events before its end), or one still being made.
    pub(crate) fn is_current(&self, session_id: &str, subscription: &Value) -> bool {
        lock(&self.inner).followed.get(session_id).is_some_and(|followed| {
            followed.subscription.as_ref().is_none_or(|current| current == subscription)
        })
    }

    /// One event of a followed turn.
    pub(crate) async fn on_event(self: &Arc<Self>, delivered: SessionEvent) {
        let session_id = delivered.session_id;
        let followed = lock(&self.inner).followed.get(&session_id).cloned();
        let Some(Followed { token, .. }) = followed else { return };
        match delivered.event.data {
            EventData::StepStart(start) => {
                if let Some(token) = &token {
                    let report = report(text::step_started(start.step));
                    deliver(self.progress(token, WorkDoneProgress::Report(report))).await;
                }
            }
            EventData::StepEnd(end) => {
                if let Some(token) = &token {
                    let report = report(text::step_ended(end.step, &end.usage));
                    deliver(self.progress(token, WorkDoneProgress::Report(report))).await;
                }
            }
            EventData::ToolResult(result)
                if matches!(result.name.as_str(), "write_file" | "edit_file") =>
            {
                // The log says more about some file now: attribution is asked again (and the
                // lenses that change are refreshed).
                self.logs_changed();
            }
            EventData::ApprovalRequest(request) => {
                // Asked in a task of its own: the router keeps forwarding while the user
                // decides (and an approval decided elsewhere resolves without this answer).
                let state = Arc::clone(self);
                tokio::spawn(async move { state.ask_approval(session_id, request).await });
            }
            EventData::TurnEnd(end) => {
                let failure = end.error.as_deref();
                let message = text::turn_ended(&session_id, end.turn, end.reason.as_str(), failure);
                self.unfollow(&session_id).await;
                let kind = if failure.is_some() { MessageType::WARNING } else { MessageType::INFO };
                deliver(self.lsp.show_message(kind, message)).await;
                deliver(self.refresh()).await;
            }
            _ => {}
        }
    }

    /// An approval the turn waits for, asked with `window/showMessageRequest`: Allow, Allow
    /// always, Deny (no answer: the daemon's timeout denies it).
    async fn ask_approval(&self, session_id: String, request: ApprovalRequest) {
        let ApprovalRequest { approval_id, tool, summary, .. } = request;
        let choices = [
            ("Allow", ApprovalChoice::Allow),
            ("Allow always", ApprovalChoice::AllowAlways),
            ("Deny", ApprovalChoice::Deny),
        ];
        let actions = choices.iter().map(|(title, _)| MessageActionItem {
            title: (*title).to_owned(),
            properties: HashMap::new(),
        });
        let asked = self
            .lsp
            .show_message_request(
                MessageType::WARNING,
                format!("dsh asks to run {tool}: {summary}"),
                Some(actions.collect()),
            )
            .await;
        let Ok(Some(picked)) = asked else { return };
        let Some((_, decision)) = choices.into_iter().find(|(title, _)| *title == picked.title)
        else {
            return;
        };
        let params =
            ApprovalRespondParams { session_id, approval_id: approval_id.to_owned(), decision };
        if let Err(failure) = self.dsh.call::<method::ApprovalRespond>(params).await {
            tracing::warn!("answering approval {approval_id}: {failure}");
        }
    }
}
