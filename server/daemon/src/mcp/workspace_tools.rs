//! [`WorkspaceTools`]: one session's handle on the MCP servers — its workspace's configured ones
//! and its own — as the loop's `ExternalTools`. At every step it makes the running servers match
//! the configuration, waits (bounded, and said first as `mcp/wait`) for servers on their first
//! start or fetching a changed tool list, and offers the tools of those running; a call goes to
//! the server by the `SERVER__TOOL` name, a configured server first. While a handle of a
//! workspace lives its servers keep running; dropping it stops the session's own.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

use dsh_agent::approval::BoxFuture;
use dsh_agent::tools::ToolOutput;
use dsh_agent::{ExternalTool, ExternalTools};
use dsh_config::McpServer;
use rmcp::model::CallToolRequestParams;
use tokio_util::sync::CancellationToken;

use super::secrets::{scrub, secrets};
use super::spec::{OwnServer, own_configs};
use super::supervisor::{Phase, ServerState};
use super::tools::{SEPARATOR, render_result};
use super::{McpManager, Owner, lock, status};
use crate::settings::Settings;

/// The MCP tools of one workspace's sessions: what the loop asks at every step.
pub struct WorkspaceTools {
    pub(super) manager: Weak<McpManager>,
    pub(super) workspace: PathBuf,
    pub(super) settings: Arc<Settings>,
    /// Its session's own servers' owner (`None`: a handle of no session).
    pub(super) own: Option<Owner>,
}

impl Drop for WorkspaceTools {
    fn drop(&mut self) {
        if let Some(manager) = self.manager.upgrade() {
            if let Some(owner) = &self.own {
                manager.release_own(owner);
            }
            manager.release(&self.workspace);
        }
    }
}

impl WorkspaceTools {
    /// Gives the session its own servers, replacing the ones it had (an unchanged one keeps
    /// running). Refused as a whole, naming both, when a name is one a server configured for
    /// the workspace has, or is given twice.
    pub fn set_own_servers(&self, servers: Vec<OwnServer>) -> Result<(), String> {
        let Some(owner) = &self.own else {
            return Err("internal error: a handle of no session has no servers of its own".into());
        };
        let Some(manager) = self.manager.upgrade() else {
            return Err("the daemon is shutting down".to_owned());
        };
        let configured = || self.settings.config(&self.workspace).map_err(|e| e.to_string());
        let wanted = own_configs(configured, servers)?;
        manager.set_own(&self.workspace, owner, &wanted, &self.settings);
        Ok(())
    }

    /// Gives a new session the servers [`own_configs`] checked before it was created.
    pub fn give_own_configs(&self, wanted: &BTreeMap<String, McpServer>) {
        if let (Some(owner), Some(manager)) = (&self.own, self.manager.upgrade()) {
            manager.set_own(&self.workspace, owner, wanted, &self.settings);
        }
    }

    /// The session's own servers as `mcp/list` shows them, sorted by name.
    pub fn own_status(&self) -> Vec<dsh_protocol::McpServerStatus> {
        let (Some(owner), Some(manager)) = (&self.own, self.manager.upgrade()) else {
            return Vec::new();
        };
        manager
            .report()
            .iter()
            .filter(|report| {
                report.workspace == self.workspace
                    && matches!(owner, Owner::Session { id, .. } if report.session.as_ref() == Some(id))
            })
            .map(status)
            .collect()
    }

    async fn current(&self, waits: dsh_agent::Waits) -> Vec<ExternalTool> {
        let Some(manager) = self.manager.upgrade() else { return Vec::new() };
        let configured = match self.settings.config(&self.workspace) {
            Ok(config) => config.mcp.clone(),
            Err(error) => {
                tracing::warn!(%error, "MCP servers: the configuration cannot be read");
                return Vec::new();
            }
        };
        let mut servers = manager.ensure(&self.workspace, &configured, &self.settings);
        if let Some(owner) = &self.own {
            for (name, server) in manager.own(owner) {
                // Refused when given; a server configured since wins.
                if configured.contains_key(&name) {
                    tracing::warn!(server = %name, "a session's own MCP server has the name of a configured one: left out");
                    continue;
                }
                servers.push((name, server));
            }
        }
        // A server on its first start, or fetching the tool list it said changed, is waited for
        // (bounded by its startup timeout), so the list does not flap between steps. A restart
        // after a failure is not: its tools are back when it is. What is waited for is decided
        // once, here, and said (`mcp/wait`) before the wait.
        let settled = |state: &ServerState| {
            (state.phase != Phase::Starting || state.starts > 1) && !state.refreshing
        };
        let mut starting = Vec::new();
        let mut changed = Vec::new();
        for (name, server) in &servers {
            let state = server.state.borrow();
            if !settled(&state) {
                if state.phase == Phase::Starting { &mut starting } else { &mut changed }
                    .push(name.clone());
            }
        }
        for (names, reason) in [
            (&mut starting, dsh_session::McpWaitReason::Starting),
            (&mut changed, dsh_session::McpWaitReason::ToolsChanged),
        ] {
            if names.is_empty() {
                continue;
            }
            names.sort();
            tracing::info!(servers = ?names, ?reason, "waiting for MCP servers");
            self.settings.notice(
                "mcpWaiting",
                format!(
                    "waiting for MCP server{} {} ({}) to start or list {} tools",
                    if names.len() == 1 { "" } else { "s" },
                    names.iter().map(|name| format!("`{name}`")).collect::<Vec<_>>().join(", "),
                    self.workspace.display(),
                    if names.len() == 1 { "its" } else { "their" },
                ),
            );
            let _ = waits.send(dsh_session::McpWait { servers: names.clone(), reason });
        }
        drop(waits);
        let mut tools = Vec::new();
        for (name, server) in servers {
            let mut state = server.state.clone();
            if starting.contains(&name) || changed.contains(&name) {
                let limit = server.config.startup_timeout.value + Duration::from_secs(1);
                if tokio::time::timeout(limit, state.wait_for(settled)).await.is_err() {
                    tracing::warn!(server = %name, "MCP server still not settled: its tools as they were");
                }
            }
            let state = state.borrow().clone();
            if state.phase != Phase::Running {
                continue;
            }
            let policy = server.config.approval.value;
            tools.extend(state.tools.into_iter().map(|schema| ExternalTool {
                schema,
                server: name.clone(),
                policy,
            }));
        }
        tools
    }

    async fn run_call(
        manager: Weak<McpManager>,
        workspace: PathBuf,
        own: Option<Owner>,
        name: String,
        arguments: String,
        cancel: CancellationToken,
    ) -> ToolOutput {
        let Some((server_name, tool)) = name.split_once(SEPARATOR) else {
            return ToolOutput::error(format!("`{name}` is not an MCP tool"));
        };
        // A configured server first: it wins a name collision at step time too.
        let server = manager.upgrade().and_then(|manager| {
            let servers = lock(&manager.servers);
            let key = (workspace, Owner::Workspace, server_name.to_owned());
            let configured = servers.get(&key).cloned();
            configured.or_else(|| {
                let own = own?;
                servers.get(&(key.0, own, key.2)).cloned()
            })
        });
        let Some(server) = server else {
            return ToolOutput::error(format!("MCP server `{server_name}` is not running"));
        };
        let peer = lock(&server.peer).clone();
        let Some(peer) = peer else {
            let state = server.state.borrow().clone();
            let why = state.last_error.map(|error| format!(": {error}")).unwrap_or_default();
            return ToolOutput::error(format!(
                "MCP server `{server_name}` is {}{why}",
                state.phase.name()
            ));
        };
        // Arguments go to the server as the model wrote them; only an object can be sent.
        let arguments = if arguments.trim().is_empty() { "{}" } else { arguments.as_str() };
        let arguments = match serde_json::from_str::<serde_json::Value>(arguments) {
            Ok(serde_json::Value::Object(object)) => object,
            Ok(_) => return ToolOutput::error("arguments must be a JSON object".to_owned()),
            Err(error) => {
                return ToolOutput::error(format!("arguments are not valid JSON: {error}"));
            }
        };
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        let timeout = server.config.call_timeout.value;
        // Cancel-safety: dropping `call` (cancel or timeout) makes rmcp send
        // `notifications/cancelled` for the request; the other branches are plain waits.
        let call = peer.call_tool(params);
        tokio::select! {
            result = call => match result {
                Ok(result) => render_result(&result),
                Err(error) => ToolOutput::error(scrub(
                    format!("MCP server `{server_name}` failed the call: {error}"),
                    &secrets(&server.config.transport.value),
                )),
            },
            () = tokio::time::sleep(timeout) => ToolOutput::error(format!(
                "MCP server `{server_name}` did not answer within {}s (call_timeout_secs); the call was cancelled",
                timeout.as_secs()
            )),
            () = cancel.cancelled() => ToolOutput::error(
                "cancelled: the turn was cancelled (the server was told)".to_owned(),
            ),
        }
    }
}

impl ExternalTools for WorkspaceTools {
    fn tools(&self, waits: dsh_agent::Waits) -> BoxFuture<'_, Vec<ExternalTool>> {
        Box::pin(self.current(waits))
    }

    fn call(
        &self,
        name: &str,
        arguments: &str,
        cancel: &CancellationToken,
    ) -> BoxFuture<'static, ToolOutput> {
        Box::pin(WorkspaceTools::run_call(
            self.manager.clone(),
            self.workspace.clone(),
            self.own.clone(),
            name.to_owned(),
            arguments.to_owned(),
            cancel.clone(),
        ))
    }
}
