//! What the daemon says unasked, and who hears it. The front asks nothing while nothing happens:
//! it holds one `daemon/subscribe`, whose `workspace/turnStarted` says which turn starts in
//! which workspace (whoever asked for it) and where its events begin, and one
//! `session/subscribe` per followed turn (`follow.rs`). One router task reads the daemon
//! connection's notifications in order and hands each to its follower.
//!
//! Only turns already running when the front starts (or when a folder is added) are looked
//! for, once, with `daemon/status`. The subscription's other notifications are left alone:
//! `workspace/changed` reports files changed on disk, which the editor reloads itself (the
//! attribution is of the editor's text and the logs, never of the disk), and `daemon/notice`
//! (a configuration file or an MCP server that cannot be used) is not about lines.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_daemon::Unsolicited;
use dsh_daemon::client::{event_of, subscription_of};
use dsh_protocol::jsonrpc::Notification;
use dsh_protocol::method;
use dsh_protocol::{EventData, NoParams, SessionEventsParams, WorkspaceTurnStarted};
use tokio::sync::mpsc;
use tower_lsp_server::ls_types::MessageType;

use crate::server::{State, lock};

/// How far back from a log's end a turn found running is looked for its end.
const TAIL: u64 = 16;

/// The `workspace/turnStarted` that `notification` is, if it is one.
fn turn_started(notification: &Notification) -> Option<WorkspaceTurnStarted> {
    if notification.method != method::WORKSPACE_TURN_STARTED {
        return None;
    }
    serde_json::from_str(subscription_of(notification)?.result.get()).ok()
}

impl State {
    /// The router: each followed session's events in order, and the turns that start.
    pub(crate) async fn route(self: Arc<Self>, mut inbox: mpsc::UnboundedReceiver<Unsolicited>) {
        while let Some(message) = inbox.recv().await {
            let Unsolicited::Notification(notification) = message else { continue };
            if let Some((subscription, event)) = event_of(&notification) {
                if self.is_current(&event.session_id, &subscription) {
                    self.on_event(event).await;
                }
            } else if let Some(started) = turn_started(&notification)
                && self.is_ours(&started.workspace)
            {
                // Followed in a task of its own: the router keeps forwarding while the editor
                // creates the progress.
                let state = Arc::clone(&self);
                tokio::spawn(async move {
                    state.follow(&started.session_id, Some(started.from_seq)).await;
                });
            }
        }
        tracing::warn!("the dsh daemon closed the connection");
        self.lsp.show_message(MessageType::ERROR, "dsh: the daemon closed the connection").await;
    }

    /// After `initialized`: subscribes to the daemon, then follows the turns of the workspace
    /// folders that run already (in that order, so that no turn falls in between).
    pub(crate) async fn listen(self: Arc<Self>) {
        if let Err(failure) = self.dsh.call::<method::DaemonSubscribe>(NoParams {}).await {
            tracing::warn!("daemon/subscribe: {failure}; turns others start are not followed");
        }
        let folders = lock(&self.inner).folders.clone();
        self.follow_running_in(folders).await;
    }

    /// Whether `workspace` (as the daemon names it) is one of the workspace folders.
    fn is_ours(&self, workspace: &str) -> bool {
        let workspace = PathBuf::from(workspace);
        let workspace = workspace.canonicalize().unwrap_or(workspace);
        lock(&self.inner).folders.contains(&workspace)
    }

    /// Follows the turns running in `folders`.
    pub(crate) async fn follow_running_in(self: Arc<Self>, folders: Vec<PathBuf>) {
        let status = match self.dsh.call::<method::DaemonStatus>(NoParams {}).await {
            Ok(status) => status,
            Err(failure) => {
                tracing::warn!("daemon/status: {failure}");
                return;
            }
        };
        for session in status.sessions.iter().filter(|s| s.running) {
            let workspace = self.workspace_of_session(&session.session_id).await;
            if workspace.is_some_and(|workspace| folders.contains(&workspace)) {
                self.follow_running(&session.session_id).await;
            }
        }
    }

    /// Follows a turn found running, from the log's end — unless the log's tail says it ended
    /// meanwhile (a turn's `turn/end` is its last event).
    async fn follow_running(self: &Arc<Self>, session_id: &str) {
        let Some(length) = self.log_length(session_id).await else { return };
        let from_seq = length.saturating_sub(TAIL);
        let params =
            SessionEventsParams { session_id: session_id.to_owned(), from_seq, limit: TAIL };
        let Ok(tail) = self.dsh.call::<method::SessionEvents>(params).await else { return };
        let ended =
            tail.events.iter().filter(|delivered| delivered.event.seq < length).rev().find_map(
                |delivered| match delivered.event.data {
                    EventData::TurnStart(_) => Some(false),
                    EventData::TurnEnd(_) => Some(true),
                    _ => None,
                },
            );
        if ended != Some(true) {
            self.follow(session_id, Some(length)).await;
        }
    }

    async fn workspace_of_session(&self, session_id: &str) -> Option<PathBuf> {
        let params =
            SessionEventsParams { session_id: session_id.to_owned(), from_seq: 0, limit: 1 };
        let page = self.dsh.call::<method::SessionEvents>(params).await.ok()?;
        let EventData::SessionMeta(meta) = &page.events.first()?.event.data else { return None };
        let workspace = PathBuf::from(&meta.workspace);
        Some(workspace.canonicalize().unwrap_or(workspace))
    }
}
