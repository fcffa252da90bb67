//! A session open in this front: what the front keeps of it ([`Open`]: the fold of its
//! subscription, how far it was forwarded, its permission requests), and opening one —
//! `session/load`'s and `session/resume`'s attach, the subscription `session/new` shares with
//! them, the replay of a session already open here.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use agent_client_protocol::RequestCancellationHandle;
use agent_client_protocol::v1::schema::SessionConfigOption;
use dsh_protocol::method;
use dsh_protocol::{
    EventData, McpServerSpec, SessionEventsParams, SessionEventsResult, SessionMcpServersParams,
    SessionParams, SessionSubscribeParams, SessionUsageResult,
};
use tokio::sync::watch;

use super::{AcpError, Connection, Front, lock};
use crate::backlog::send_update;
use crate::convert::model_selector;
use crate::error::{rpc_error, stopped_reading};
use crate::translate::Translator;

/// How long a finished prompt waits for its turn's last events to be forwarded.
pub(super) const FLUSH_DEADLINE: Duration = Duration::from_secs(30);

/// An open session: the fold of its subscription.
pub(super) struct Open {
    /// The fold, priced with the session's step costs.
    pub(super) translator: Translator,
    pub(super) progress: watch::Sender<Progress>,
    /// Approvals already turned into permission requests.
    pub(super) asked: HashSet<String>,
    /// Permission requests the client has not answered yet, by approval id: withdrawn
    /// (`$/cancel_request`) when the approval is decided elsewhere or its turn ends.
    pub(super) asking: HashMap<String, RequestCancellationHandle>,
    /// Approvals seen below this seq are replay: asked only once the replay is through (most
    /// are decided further on).
    pub(super) replay_end: u64,
    /// The prompts this front sent whose `user/message` has not come by yet: that event is not
    /// echoed to the client that sent it (ACP's `user_message_chunk` is for `session/load`'s
    /// replay and for other clients' prompts).
    pub(super) prompted: Vec<String>,
}

/// How far the forwarding task has forwarded a session's events.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Progress {
    pub(super) next_seq: u64,
    pub(super) ended_turn: Option<u64>,
}

impl Front {
    /// The session's configuration options for ACP's selectors: its model, the one its next
    /// request uses.
    pub(super) async fn config_options(
        &self,
        session_id: &str,
    ) -> Result<Vec<SessionConfigOption>, AcpError> {
        let usage = self.usage(session_id).await?;
        Ok(model_selector(&usage.model, &usage.profile))
    }

    /// `session/load` (`replay`: the whole conversation first) and `session/resume`: the
    /// session's configuration options once it is open here.
    pub(super) async fn attach(
        self: &Arc<Self>,
        session_id: &str,
        servers: Vec<McpServerSpec>,
        replay: bool,
        connection: &Connection,
    ) -> Result<Vec<SessionConfigOption>, AcpError> {
        // The session's own servers, as the editor gives them now (the same ones: nothing
        // changes, the next request is byte-identical; fewer: a logged tools delta). Given
        // first: a list the daemon refuses leaves nothing open here and nothing replayed.
        // (Giving touches the session, so it is not idle when the front subscribes next.)
        self.give_servers(session_id, servers).await?;
        let already = lock(&self.sessions).contains_key(session_id);
        if !already {
            self.open(session_id, replay).await?;
        } else if replay {
            // Its live subscription goes on; the conversation is replayed from the log with a
            // fold of its own.
            self.replay(session_id, connection).await?;
        }
        self.config_options(session_id).await
    }

    /// Gives the session its own MCP servers (`session/mcpServers`), replacing the ones it had.
    async fn give_servers(
        &self,
        session_id: &str,
        servers: Vec<McpServerSpec>,
    ) -> Result<(), AcpError> {
        let params = SessionMcpServersParams { session_id: session_id.to_owned(), servers };
        self.client.call::<method::SessionMcpServers>(params).await.map_err(rpc_error)?;
        Ok(())
    }

    /// Opens `session_id` in this front: subscribes to its log — from the start when
    /// `replay`, which the forwarding task forwards as the replayed conversation — and returns
    /// once the events that were logged before are forwarded.
    pub(super) async fn open(
        self: &Arc<Self>,
        session_id: &str,
        replay: bool,
    ) -> Result<(), AcpError> {
        let usage = self.usage(session_id).await?;
        let first = self.events(session_id, 0, 1).await?;
        let length = first.length;
        let workspace = first
            .events
            .first()
            .and_then(|delivered| match &delivered.event.data {
                EventData::SessionMeta(meta) => Some(meta.workspace.clone()),
                _ => None,
            })
            .unwrap_or_default();
        let from = if replay { 0 } else { length };
        let (progress, mut watcher) = watch::channel(Progress { next_seq: from, ended_turn: None });
        {
            let mut sessions = lock(&self.sessions);
            if sessions.contains_key(session_id) {
                return Ok(());
            }
            let mut translator = Translator::new(workspace, usage.context_window);
            let finished = translator.price_steps(usage.rows);
            // Without the replay, the steps before are counted all the same.
            if !replay && finished {
                translator.spent_before(usage.cost);
            }
            let open = Open {
                translator,
                progress,
                asked: HashSet::new(),
                asking: HashMap::new(),
                replay_end: length,
                prompted: Vec::new(),
            };
            sessions.insert(session_id.to_owned(), open);
        }
        let params =
            SessionSubscribeParams { session_id: session_id.to_owned(), from_seq: Some(from) };
        if let Err(error) = self.client.call::<method::SessionSubscribe>(params).await {
            lock(&self.sessions).remove(session_id);
            return Err(rpc_error(error));
        }
        let forwarded = watcher.wait_for(|progress| progress.next_seq >= length);
        let _ = tokio::time::timeout(FLUSH_DEADLINE, forwarded).await;
        Ok(())
    }

    /// The conversation of a session already open here, replayed from its log.
    async fn replay(&self, session_id: &str, connection: &Connection) -> Result<(), AcpError> {
        let mut translator = {
            let sessions = lock(&self.sessions);
            let Some(open) = sessions.get(session_id) else { return Ok(()) };
            Translator::new(open.translator.workspace().to_owned(), open.translator.window())
        };
        translator.price_steps(self.usage(session_id).await?.rows);
        let mut from = 0;
        loop {
            let page = self.events(session_id, from, 1000).await?;
            for delivered in &page.events {
                for update in translator.updates(&delivered.event) {
                    if send_update(connection, &self.backlog, session_id, update).await.is_err() {
                        return Err(stopped_reading());
                    }
                }
            }
            if page.end || page.next_seq <= from {
                return Ok(());
            }
            from = page.next_seq;
        }
    }

    async fn events(
        &self,
        session_id: &str,
        from_seq: u64,
        limit: u64,
    ) -> Result<SessionEventsResult, AcpError> {
        let params = SessionEventsParams { session_id: session_id.to_owned(), from_seq, limit };
        self.client.call::<method::SessionEvents>(params).await.map_err(rpc_error)
    }

    /// `session/usage`: the session's model, context window and per-step costs.
    pub(super) async fn usage(&self, session_id: &str) -> Result<SessionUsageResult, AcpError> {
        let params = SessionParams { session_id: session_id.to_owned() };
        self.client.call::<method::SessionUsage>(params).await.map_err(rpc_error)
    }
}
