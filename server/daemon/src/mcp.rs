//! MCP tool servers (`docs/mcp.md`), on `rmcp`: per workspace, each configured server is started
//! at the first step that asks for tools, shared by the workspace's sessions, restarted with
//! backoff when it dies, stopped when no loaded session of its workspace remains and at daemon
//! shutdown. A session may also have servers of its own (`session/mcpServers`, what an ACP
//! editor passes): supervised the same way, seen by that session only, stopped when it unloads
//! or its list is replaced without them.
//!
//! This module is the manager: [`McpManager`], the table of every server by workspace, owner
//! and name, which starts, restarts on a changed definition, and stops them. Its parts:
//! `supervisor.rs` (one server's life: connection, tool-list refresh, backoff, its process
//! group), `workspace_tools.rs` ([`WorkspaceTools`], a session's handle: the tools at each step
//! and the calls), `tools.rs` (what the model sees: names, canonical schemas, results),
//! `spec.rs` (a session's own servers, checked), `secrets.rs` (what is never shown).
//!
//! Tasks: one supervisor task per running server owns its connection. Everything else reads the
//! server's state through a `watch` channel; the one `std::sync::Mutex` (the server table) is
//! never held across an await, and `users` is taken before it, never the other way round.

mod secrets;
mod spec;
mod supervisor;
mod tools;
mod workspace_tools;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_config::{McpServer, McpTransport};
use tokio_util::sync::CancellationToken;

use crate::settings::Settings;
use supervisor::Server;

pub use spec::{OwnServer, own_configs, own_server};
pub use supervisor::{Phase, ServerState};
pub use tools::{RESULT_CAP_BYTES, SEPARATOR, canonical, offered_tools};
pub use workspace_tools::WorkspaceTools;

#[cfg(test)]
mod tests;

/// Every server the daemon runs, by workspace, owner and name.
pub struct McpManager {
    servers: Mutex<BTreeMap<Key, Arc<Server>>>,
    /// The next [`WorkspaceTools`] handle's number.
    handles: std::sync::atomic::AtomicU64,
    /// How many live handles ([`WorkspaceTools`]) each workspace has.
    users: Mutex<HashMap<PathBuf, usize>>,
    shutdown: CancellationToken,
    tasks: tokio_util::task::TaskTracker,
}

/// One server in `mcp/list`.
#[derive(Clone, Debug)]
pub struct ServerReport {
    /// The workspace it serves.
    pub workspace: PathBuf,
    /// The session whose own server it is; `None` for a configured one.
    pub session: Option<String>,
    /// Its name.
    pub name: String,
    /// `stdio` or `http`.
    pub transport: &'static str,
    /// Its state.
    pub state: ServerState,
}

impl McpManager {
    /// No server running; `shutdown` stops them all.
    pub fn new(shutdown: CancellationToken) -> Arc<McpManager> {
        Arc::new(McpManager {
            servers: Mutex::new(BTreeMap::new()),
            handles: std::sync::atomic::AtomicU64::new(1),
            users: Mutex::new(HashMap::new()),
            shutdown,
            tasks: tokio_util::task::TaskTracker::new(),
        })
    }

    /// The tools of a session in `workspace` (`session`: its id; `None` for a handle of no
    /// session, which has no servers of its own): a handle the loop asks at every step. While
    /// a handle of a workspace lives, its servers keep running; the session's own servers are
    /// the handle's, stopped when it is dropped.
    pub fn tools_for(
        self: &Arc<Self>,
        workspace: &Path,
        settings: Arc<Settings>,
        session: Option<&str>,
    ) -> Arc<WorkspaceTools> {
        *lock(&self.users).entry(workspace.to_path_buf()).or_default() += 1;
        let handle = self.handles.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Arc::new(WorkspaceTools {
            manager: Arc::downgrade(self),
            workspace: workspace.to_path_buf(),
            settings,
            own: session.map(|id| Owner::Session { id: id.to_owned(), handle }),
        })
    }

    /// Every server started so far, by workspace, owner and name.
    pub fn report(&self) -> Vec<ServerReport> {
        lock(&self.servers)
            .iter()
            .map(|((workspace, owner, name), server)| ServerReport {
                workspace: workspace.clone(),
                session: match owner {
                    Owner::Workspace => None,
                    Owner::Session { id, .. } => Some(id.clone()),
                },
                name: name.clone(),
                transport: transport_name(&server.config.transport.value),
                state: server.state.borrow().clone(),
            })
            .collect()
    }

    /// Stops every server and waits (bounded) for their processes to be gone.
    pub async fn stop_all(&self) {
        let servers: Vec<_> = std::mem::take(&mut *lock(&self.servers)).into_values().collect();
        for server in &servers {
            server.stop.cancel();
        }
        self.tasks.close();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.tasks.wait()).await;
    }

    fn release(&self, workspace: &Path) {
        // The count and the stop are one step under `users` (taken before `servers`, as nowhere
        // else takes them in the other order): a session of the workspace loading meanwhile
        // either keeps the servers or starts new ones — never lists tools of servers then stopped.
        let mut users = lock(&self.users);
        let count = users.entry(workspace.to_path_buf()).or_default();
        *count = count.saturating_sub(1);
        if *count == 0 {
            users.remove(workspace);
            stop_where(&mut lock(&self.servers), "no session uses it", |(root, owner, _), _| {
                root == workspace && *owner == Owner::Workspace
            });
        }
    }

    /// Stops the servers `owner` (a session's handle) holds.
    fn release_own(&self, owner: &Owner) {
        stop_where(&mut lock(&self.servers), "its session is unloaded", |(_, own, _), _| {
            own == owner
        });
    }

    /// The servers `configured` for `workspace`, started when new (or when their configuration
    /// changed); servers no longer configured are stopped. Sessions' own servers are not
    /// touched.
    fn ensure(
        &self,
        workspace: &Path,
        configured: &BTreeMap<String, McpServer>,
        settings: &Arc<Settings>,
    ) -> Vec<(String, Arc<Server>)> {
        let enabled = configured.iter().filter(|(_, config)| config.enabled.value);
        self.reconcile(workspace, &Owner::Workspace, enabled.collect(), settings)
    }

    /// Replaces the servers of `owner` (a session's handle) with `wanted`.
    fn set_own(
        &self,
        workspace: &Path,
        owner: &Owner,
        wanted: &BTreeMap<String, McpServer>,
        settings: &Arc<Settings>,
    ) {
        self.reconcile(workspace, owner, wanted.iter().collect(), settings);
    }

    /// Makes the servers of `owner` in `workspace` those of `wanted`: a server whose definition
    /// is unchanged keeps running (a reload with the same servers changes nothing), one that
    /// changed is restarted, one no longer wanted is stopped. Returns `wanted`'s servers.
    fn reconcile(
        &self,
        workspace: &Path,
        owner: &Owner,
        wanted: BTreeMap<&String, &McpServer>,
        settings: &Arc<Settings>,
    ) -> Vec<(String, Arc<Server>)> {
        let mut servers = lock(&self.servers);
        let stale = |(root, own, name): &Key, server: &Server| {
            root == workspace
                && own == owner
                && wanted.get(name).is_none_or(|config| !same(config, &server.config))
        };
        stop_where(&mut servers, "its definition changed or it is no longer wanted", stale);
        let mut out = Vec::new();
        for (name, config) in wanted {
            let key = (workspace.to_path_buf(), owner.clone(), name.clone());
            let server = servers.entry(key).or_insert_with(|| {
                let stop = self.shutdown.child_token();
                supervisor::start(&self.tasks, stop, workspace, name, config, settings)
            });
            out.push((name.clone(), Arc::clone(server)));
        }
        out
    }

    /// The servers `owner` holds, by name.
    fn own(&self, owner: &Owner) -> Vec<(String, Arc<Server>)> {
        lock(&self.servers)
            .iter()
            .filter(|((_, own, _), _)| own == owner)
            .map(|((_, _, name), server)| (name.clone(), Arc::clone(server)))
            .collect()
    }
}

/// Whose a server is: the workspace's sessions (configured), or one session's own.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Owner {
    /// Configured for the workspace: shared by its sessions.
    Workspace,
    /// Given to one session (`session/mcpServers`), by the handle that holds it: a reloaded
    /// session's new handle never stops the servers of the one before, nor the other way round.
    Session { id: String, handle: u64 },
}

/// A server's place in the table: its workspace, whose it is, its name.
type Key = (PathBuf, Owner, String);

/// Stops the servers `doomed` picks, saying why in the daemon's log.
fn stop_where(
    servers: &mut BTreeMap<Key, Arc<Server>>,
    why: &str,
    doomed: impl Fn(&Key, &Server) -> bool,
) {
    let keys: Vec<Key> = servers
        .iter()
        .filter(|(key, server)| doomed(key, server))
        .map(|(key, _)| key.clone())
        .collect();
    for key in keys {
        if let Some(server) = servers.remove(&key) {
            tracing::info!(server = %key.2, workspace = %key.0.display(), "stopping MCP server: {why}");
            server.stop.cancel();
        }
    }
}

/// Whether two definitions of a server are the same, whatever lines they were written on (an
/// edit elsewhere in the file restarts nothing).
fn same(a: &McpServer, b: &McpServer) -> bool {
    a.transport.value == b.transport.value
        && a.enabled.value == b.enabled.value
        && a.startup_timeout.value == b.startup_timeout.value
        && a.call_timeout.value == b.call_timeout.value
        && a.approval.value == b.approval.value
}

/// A server as `mcp/list` and `daemon/status` show it.
pub fn status(report: &ServerReport) -> dsh_protocol::McpServerStatus {
    let state = &report.state;
    dsh_protocol::McpServerStatus {
        workspace: report.workspace.display().to_string(),
        session: report.session.clone(),
        name: report.name.clone(),
        transport: report.transport.to_owned(),
        state: state.phase.name().to_owned(),
        tools: state
            .tools
            .iter()
            .map(|tool| dsh_protocol::McpToolStatus {
                name: tool.name.clone(),
                description: tool.description.clone(),
            })
            .collect(),
        refused: state.refused.clone(),
        last_error: state.last_error.clone(),
        starts: state.starts,
    }
}

/// A configured server that is not running: `disabled`, or `notStarted` (no step asked yet).
pub fn not_started(
    workspace: &Path,
    name: &str,
    server: &McpServer,
) -> dsh_protocol::McpServerStatus {
    dsh_protocol::McpServerStatus {
        workspace: workspace.display().to_string(),
        session: None,
        name: name.to_owned(),
        transport: transport_name(&server.transport.value).to_owned(),
        state: if server.enabled.value { "notStarted" } else { "disabled" }.to_owned(),
        tools: Vec::new(),
        refused: Vec::new(),
        last_error: None,
        starts: 0,
    }
}

fn transport_name(transport: &McpTransport) -> &'static str {
    match transport {
        McpTransport::Stdio { .. } => "stdio",
        McpTransport::Http { .. } => "http",
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
