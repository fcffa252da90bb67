//! MCP tool servers (`docs/mcp.md`), on `rmcp`: per workspace, each configured server is started
//! at the first step that asks for tools, shared by the workspace's sessions, restarted with
//! backoff when it dies, stopped when no loaded session of its workspace remains and at daemon
//! shutdown. A session may also have servers of its own (`session/mcpServers`, what an ACP
//! editor passes): supervised the same way, seen by that session only, stopped when it unloads
//! or its list is replaced without them.
//!
//! Tasks: one supervisor task per running server ([`supervise`]) owns its connection — it
//! connects (spawn + `initialize` + `tools/list`, bounded by the startup timeout), refreshes the
//! tool list on `notifications/tools/list_changed`, notices the end of the connection, and waits
//! out the backoff before connecting again. Everything else reads the server's state through a
//! `watch` channel; the one `std::sync::Mutex` (the server table) is never held across an await.
//!
//! What the model sees of a server is its tool list, namespaced `SERVER__TOOL`, schemas with
//! their keys sorted and descriptions as the server gave them: the loop puts them into the
//! header, so every change is a logged header change. A stdio server is a child process in its
//! own process group with an explicit environment (`PATH`, `HOME`, `LANG`, and the server's
//! `env`): nothing else of the daemon's environment reaches it.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use dsh_agent::approval::{BoxFuture, Policy};
use dsh_agent::tools::ToolOutput;
use dsh_agent::{ExternalTool, ExternalTools};
use dsh_config::{Approval, McpServer, McpTransport};
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, Tool};
use rmcp::service::{NotificationContext, Peer, RoleClient};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ServiceExt};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use crate::settings::Settings;

#[cfg(test)]
mod tests;

/// The namespace separator of tool names in requests: `SERVER__TOOL`.
pub const SEPARATOR: &str = "__";
/// The most servers one session may bring (each is a process or a connection).
const OWN_SERVERS_MAX: usize = 64;
/// The providers' limit on a tool name.
const NAME_MAX: usize = 64;
/// The most bytes of a tool result the model gets; the rest is cut with a note.
pub const RESULT_CAP_BYTES: usize = 256 * 1024;
/// The first wait before a restart; doubled after each failure up to [`BACKOFF_MAX`].
const BACKOFF_START: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// Lines of a stdio server's stderr kept for its last error.
const STDERR_LINES: usize = 5;

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Where a server is in its life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Connecting: spawned or dialled, `initialize` and `tools/list` under way.
    Starting,
    /// Connected; its tools are offered.
    Running,
    /// It failed or died; a restart follows after the backoff.
    Failed,
    /// Stopped (no session of its workspace is loaded, or it was removed from the config).
    Stopped,
}

impl Phase {
    /// Its name in `mcp/list`.
    pub fn name(&self) -> &'static str {
        match self {
            Phase::Starting => "starting",
            Phase::Running => "running",
            Phase::Failed => "failed",
            Phase::Stopped => "stopped",
        }
    }
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

/// What of a server's definition must never be shown: env and header values, and the
/// credentials and query of its URL (errors from the HTTP stack quote the URL).
fn secrets(transport: &McpTransport) -> Vec<String> {
    let mut secrets: Vec<String> = match transport {
        McpTransport::Stdio { env, .. } => env.values().cloned().collect(),
        McpTransport::Http { url, headers } => {
            let mut secrets: Vec<String> = headers.values().cloned().collect();
            if let Ok(url) = reqwest::Url::parse(url) {
                // Hosted servers put tokens in the path too: its long segments (short ones are
                // words like `mcp` or `servers`, which would blank out messages).
                let long = url.path().split('/').filter(|segment| segment.len() >= 12);
                secrets.extend(long.map(str::to_owned));
                secrets.push(url.username().to_owned());
                secrets.extend(url.password().map(str::to_owned));
                secrets.extend(url.query().map(str::to_owned));
                secrets.extend(url.fragment().map(str::to_owned));
            }
            secrets
        }
    };
    // Longest first, so a secret holding another is replaced whole; short values (`1`,
    // `true`) would blank out ordinary words and protect nothing.
    secrets.retain(|secret| secret.len() >= 4);
    secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
    secrets.dedup();
    secrets
}

/// `text` with every secret of the server replaced by `***`.
fn scrub(text: String, secrets: &[String]) -> String {
    secrets.iter().fold(text, |text, secret| {
        if text.contains(secret.as_str()) { text.replace(secret.as_str(), "***") } else { text }
    })
}

fn transport_name(transport: &McpTransport) -> &'static str {
    match transport {
        McpTransport::Stdio { .. } => "stdio",
        McpTransport::Http { .. } => "http",
    }
}

/// A server's state as its supervisor publishes it.
#[derive(Clone, Debug)]
pub struct ServerState {
    /// Where it is.
    pub phase: Phase,
    /// Its tools as offered to the model (namespaced, canonical), sorted by name.
    pub tools: Vec<dsh_session::ToolSchema>,
    /// Tools it listed that are not offered, each with why (a bad name, a duplicate).
    pub refused: Vec<String>,
    /// The last thing that went wrong.
    pub last_error: Option<String>,
    /// How many times it was started.
    pub starts: u32,
    /// It said its tool list changed and the new list is being fetched: a step waits for it.
    pub refreshing: bool,
}

impl ServerState {
    fn new() -> ServerState {
        ServerState {
            phase: Phase::Starting,
            tools: Vec::new(),
            refused: Vec::new(),
            last_error: None,
            starts: 0,
            refreshing: false,
        }
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

/// One server of one workspace.
struct Server {
    config: McpServer,
    state: watch::Receiver<ServerState>,
    peer: Arc<Mutex<Option<Peer<RoleClient>>>>,
    stop: CancellationToken,
}

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
            let server = servers
                .entry(key)
                .or_insert_with(|| self.spawn_server(workspace, name, config, settings));
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

    /// A new server and its supervisor task.
    fn spawn_server(
        &self,
        workspace: &Path,
        name: &str,
        config: &McpServer,
        settings: &Arc<Settings>,
    ) -> Arc<Server> {
        let (sender, receiver) = watch::channel(ServerState::new());
        let peer = Arc::new(Mutex::new(None));
        let stop = self.shutdown.child_token();
        let server = Arc::new(Server {
            config: config.clone(),
            state: receiver,
            peer: Arc::clone(&peer),
            stop: stop.clone(),
        });
        let sender = Arc::new(sender);
        let job = Job {
            name: name.to_owned(),
            workspace: workspace.to_path_buf(),
            config: config.clone(),
            state: Arc::clone(&sender),
            peer: Arc::clone(&peer),
            stop,
            settings: Arc::clone(settings),
        };
        // A supervisor that panics must not leave its server looking alive: its state says
        // what happened and calls find no peer.
        self.tasks.spawn(async move {
            if let Err(error) = tokio::spawn(supervise(job)).await {
                tracing::error!(%error, "MCP server supervisor failed");
                *lock(&peer) = None;
                sender.send_modify(|state| {
                    state.phase = Phase::Failed;
                    state.tools.clear();
                    state.last_error =
                        Some("internal error: the server's supervisor stopped".to_owned());
                });
            }
        });
        server
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

/// The MCP tools of one workspace's sessions: what the loop asks at every step.
pub struct WorkspaceTools {
    manager: Weak<McpManager>,
    workspace: PathBuf,
    settings: Arc<Settings>,
    /// Its session's own servers' owner (`None`: a handle of no session).
    own: Option<Owner>,
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

/// A server as a session gives it (`session/mcpServers`), checked: a clear error for what
/// cannot be used, naming the server — and never an `env` or header value.
pub fn own_server(spec: dsh_protocol::McpServerSpec) -> Result<OwnServer, String> {
    let name = spec.name;
    dsh_config::check_server_name(&name)?;
    let transport = match (spec.command, spec.url) {
        (Some(_), Some(_)) => {
            return Err(format!(
                "mcp server `{name}`: give either `command` (stdio) or `url` (HTTP), not both"
            ));
        }
        (None, None) => {
            return Err(format!("mcp server `{name}` has neither `command` (stdio) nor `url`"));
        }
        (Some(command), None) => {
            if !spec.headers.is_empty() {
                return Err(format!(
                    "mcp server `{name}`: `headers` are for HTTP servers, not stdio ones"
                ));
            }
            let cwd = spec.cwd.map(PathBuf::from);
            McpTransport::Stdio { command, args: spec.args, env: spec.env, cwd }
        }
        (None, Some(url)) => {
            if !spec.args.is_empty() || !spec.env.is_empty() || spec.cwd.is_some() {
                return Err(format!(
                    "mcp server `{name}`: `args`, `env` and `cwd` are for stdio servers, not HTTP \
                     ones"
                ));
            }
            McpTransport::Http { url, headers: spec.headers }
        }
    };
    // The rules of what each key may hold are the configuration's, for both kinds of server.
    transport.check(&name).map_err(|refused| refused.message)?;
    Ok(OwnServer { name, transport })
}

/// A server a session brings (`session/mcpServers`), checked: its name follows the rule of
/// configured ones.
#[derive(Clone)]
pub struct OwnServer {
    /// Its name.
    pub name: String,
    /// How to reach it.
    pub transport: McpTransport,
}

/// A session's own servers as the supervisor runs them, checked: at most [`OWN_SERVERS_MAX`],
/// each name once, none a name a server configured for `workspace` has. Run before a session
/// is created with servers (nothing is created when they are refused) and when they change.
pub fn own_configs(
    configured: impl FnOnce() -> Result<Arc<dsh_config::Config>, String>,
    servers: Vec<OwnServer>,
) -> Result<BTreeMap<String, McpServer>, String> {
    if servers.len() > OWN_SERVERS_MAX {
        return Err(format!(
            "{} MCP servers given for one session; at most {OWN_SERVERS_MAX} are taken",
            servers.len()
        ));
    }
    let mut wanted = BTreeMap::new();
    if servers.is_empty() {
        // Nothing to check against the configuration (which may not be usable).
        return Ok(wanted);
    }
    let configured = configured()?;
    for server in servers {
        if let Some(theirs) = configured.mcp.get(&server.name) {
            return Err(format!(
                "MCP server `{0}` from the session collides with the server `{0}` configured \
                 for this workspace ({1}): rename the session's server",
                server.name, theirs.transport.source
            ));
        }
        let source = dsh_config::Source::Flag("session/mcpServers".to_owned());
        // The defaults of a configured server; `ask` whatever the editor wants: a client
        // never makes tools run unasked (`[approvals]` in your own file still can).
        let config = McpServer {
            transport: dsh_config::Sourced::new(server.transport, source.clone()),
            enabled: dsh_config::Sourced::new(true, source.clone()),
            startup_timeout: dsh_config::Sourced::new(
                dsh_config::MCP_STARTUP_TIMEOUT,
                source.clone(),
            ),
            call_timeout: dsh_config::Sourced::new(dsh_config::MCP_CALL_TIMEOUT, source.clone()),
            approval: dsh_config::Sourced::new(Approval::Ask, source.clone()),
        };
        if wanted.insert(server.name.clone(), config).is_some() {
            return Err(format!("MCP server `{}` is given twice", server.name));
        }
    }
    Ok(wanted)
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
            let policy = match server.config.approval.value {
                Approval::Auto => Policy::Auto,
                Approval::Ask => Policy::Ask,
                Approval::Deny => Policy::Deny,
            };
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

/// A tool result as the model gets it: text blocks as they are, structured content as JSON
/// when no text came with it, anything else as a one-line note; cut at [`RESULT_CAP_BYTES`].
fn render_result(result: &CallToolResult) -> ToolOutput {
    let mut parts = Vec::new();
    for block in &result.content {
        match block {
            ContentBlock::Text(text) => parts.push(text.text.clone()),
            ContentBlock::Image(image) => parts.push(format!(
                "[image {} ({} bytes of base64) not shown to the model]",
                image.mime_type,
                image.data.len()
            )),
            ContentBlock::Audio(audio) => parts.push(format!(
                "[audio {} ({} bytes of base64) not shown to the model]",
                audio.mime_type,
                audio.data.len()
            )),
            ContentBlock::Resource(resource) => {
                let uri = match &resource.resource {
                    rmcp::model::ResourceContents::TextResourceContents { uri, .. }
                    | rmcp::model::ResourceContents::BlobResourceContents { uri, .. } => {
                        uri.as_str()
                    }
                    _ => "(unknown kind)",
                };
                parts.push(format!("[embedded resource {uri} not shown to the model]"));
            }
            ContentBlock::ResourceLink(link) => {
                parts.push(format!("[resource link {} ({})]", link.uri, link.name));
            }
            _ => parts
                .push("[content of a kind dsh does not know, not shown to the model]".to_owned()),
        }
    }
    if parts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        parts.push(canonical(structured).to_string());
    }
    let mut content = parts.join("\n");
    if content.len() > RESULT_CAP_BYTES {
        let total = content.len();
        let mut cut = RESULT_CAP_BYTES;
        while !content.is_char_boundary(cut) {
            cut -= 1;
        }
        content.truncate(cut);
        content.push_str(&format!(
            "\n[result cut: {total} bytes, the first {cut} shown (MCP results are capped at {RESULT_CAP_BYTES} bytes)]"
        ));
    }
    ToolOutput { content, is_error: result.is_error == Some(true), seen: None }
}

/// A JSON value with every object's keys sorted, recursively.
pub fn canonical(value: &serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(object) => {
            let mut entries: Vec<_> = object.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let mut sorted = serde_json::Map::new();
            for (key, value) in entries {
                sorted.insert(key.clone(), canonical(value));
            }
            serde_json::Value::Object(sorted)
        }
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.iter().map(canonical).collect())
        }
        other => other.clone(),
    }
}

/// A server's tools as the model sees them: `SERVER__TOOL`, canonical schemas, sorted; a tool
/// whose name breaks the providers' rule or that the server listed twice is refused, with why.
pub fn offered_tools(server: &str, tools: &[Tool]) -> (Vec<dsh_session::ToolSchema>, Vec<String>) {
    let mut offered: BTreeMap<String, dsh_session::ToolSchema> = BTreeMap::new();
    let mut refused = Vec::new();
    let mut duplicates = std::collections::BTreeSet::new();
    for tool in tools {
        let name = format!("{server}{SEPARATOR}{}", tool.name);
        let valid = name.len() <= NAME_MAX
            && !tool.name.is_empty()
            && tool.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            refused.push(format!(
                "tool `{}`: `{name}` is not a name providers accept (^[a-zA-Z0-9_-]{{1,64}}$)",
                tool.name
            ));
            continue;
        }
        let schema = dsh_session::ToolSchema {
            name: name.clone(),
            description: tool.description.as_deref().unwrap_or_default().to_owned(),
            parameters: canonical(&serde_json::Value::Object((*tool.input_schema).clone())),
        };
        if offered.insert(name.clone(), schema).is_some() {
            duplicates.insert(name);
        }
    }
    for name in duplicates {
        offered.remove(&name);
        refused.push(format!("tool `{name}` is listed twice by the server: both refused"));
    }
    (offered.into_values().collect(), refused)
}

/// What a supervisor needs.
struct Job {
    name: String,
    workspace: PathBuf,
    config: McpServer,
    state: Arc<watch::Sender<ServerState>>,
    peer: Arc<Mutex<Option<Peer<RoleClient>>>>,
    stop: CancellationToken,
    /// Where `daemon/notice` goes.
    settings: Arc<Settings>,
}

/// The client side of a connection: it hears that the tool list changed.
#[derive(Clone)]
struct Handler {
    tools_changed: Arc<Notify>,
    state: Arc<watch::Sender<ServerState>>,
}

impl ClientHandler for Handler {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + rmcp::service::MaybeSendFuture + '_ {
        // Marked at once, so the next step waits for the new list instead of sending the old.
        self.state.send_modify(|state| state.refreshing = true);
        self.tools_changed.notify_one();
        std::future::ready(())
    }
}

/// A started connection.
struct Connection {
    running: rmcp::service::RunningService<RoleClient, Handler>,
    /// The process group of a stdio server.
    group: Option<i32>,
}

async fn connect(
    job: &Job,
    handler: Handler,
    stderr_tail: &Arc<Mutex<Vec<String>>>,
    spawned: &Mutex<Option<i32>>,
) -> Result<Connection, String> {
    match &job.config.transport.value {
        McpTransport::Stdio { command, args, env, cwd } => {
            let mut process = tokio::process::Command::new(command);
            process.args(args).env_clear();
            for variable in ["PATH", "HOME", "LANG"] {
                if let Some(value) = std::env::var_os(variable) {
                    process.env(variable, value);
                }
            }
            process.envs(env);
            // Not the workspace by default: `npx`, `uvx` or `python -m` started there would run
            // what a cloned repository ships (its node_modules, its .npmrc, its modules). A
            // server that needs the workspace is given it in `args` or `cwd`.
            let home = std::env::var_os("HOME").map(PathBuf::from);
            let default_dir = home.filter(|home| home.is_dir()).unwrap_or_else(std::env::temp_dir);
            process.current_dir(cwd.as_deref().unwrap_or(&default_dir));
            process.process_group(0);
            let (transport, stderr) = TokioChildProcess::builder(process)
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|error| format!("cannot start `{command}`: {error}"))?;
            let group = transport.id().and_then(|pid| i32::try_from(pid).ok());
            // Known to the supervisor at once: a start that times out or is stopped kills the
            // whole group, not only the direct child (an `npx` leaves its children behind).
            *lock(spawned) = group;
            if let Some(stderr) = stderr {
                let tail = Arc::clone(stderr_tail);
                let secrets = secrets(&job.config.transport.value);
                tokio::spawn(async move {
                    // Read in bounded pieces: a server that writes no newline (a progress bar,
                    // binary) never grows a line without limit. A line is scrubbed whole (a
                    // server may print its environment), then shortened for showing.
                    use tokio::io::AsyncReadExt as _;
                    let mut stderr = stderr;
                    let mut buffer = vec![0u8; 4096];
                    let mut line = Vec::new();
                    while let Ok(read) = stderr.read(&mut buffer).await {
                        if read == 0 {
                            break;
                        }
                        for &byte in &buffer[..read] {
                            if byte == b'\n' || line.len() >= 16 * 1024 {
                                let text = String::from_utf8_lossy(&line).into_owned();
                                let text: String =
                                    scrub(text, &secrets).chars().take(300).collect();
                                let mut tail = lock(&tail);
                                if tail.len() == STDERR_LINES {
                                    tail.remove(0);
                                }
                                tail.push(text);
                                line.clear();
                                if byte == b'\n' {
                                    continue;
                                }
                            }
                            line.push(byte);
                        }
                    }
                });
            }
            let running = handler.serve(transport).await.map_err(|error| {
                kill_group(group);
                format!("initialize failed: {error}")
            })?;
            Ok(Connection { running, group })
        }
        McpTransport::Http { url, headers } => {
            let mut custom = HashMap::new();
            for (name, value) in headers {
                let name = http::HeaderName::try_from(name.as_str())
                    .map_err(|_| format!("header `{name}` is not a valid header name"))?;
                let value = http::HeaderValue::try_from(value.as_str())
                    .map_err(|_| format!("the value of header `{name}` is not valid"))?;
                custom.insert(name, value);
            }
            let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                .custom_headers(custom)
                .max_json_response_size(16 * 1024 * 1024);
            let client = reqwest::Client::builder()
                .build()
                .map_err(|error| format!("cannot build the HTTP client: {error}"))?;
            let transport = StreamableHttpClientTransport::with_client(client, config);
            let running = handler
                .serve(transport)
                .await
                .map_err(|error| format!("initialize failed: {error}"))?;
            Ok(Connection { running, group: None })
        }
    }
}

fn kill_group(group: Option<i32>) {
    if let Some(group) = group.filter(|group| *group > 1) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(group),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// One server's life: connect, serve, notice the end, back off, again — until stopped.
async fn supervise(job: Job) {
    let mut backoff = BACKOFF_START;
    loop {
        job.state.send_modify(|state| {
            state.phase = Phase::Starting;
            state.starts += 1;
        });
        let tools_changed = Arc::new(Notify::new());
        let handler =
            Handler { tools_changed: Arc::clone(&tools_changed), state: Arc::clone(&job.state) };
        let stderr_tail = Arc::new(Mutex::new(Vec::new()));
        let startup = job.config.startup_timeout.value;
        let spawned = Mutex::new(None);
        let started = async {
            let connection = connect(&job, handler, &stderr_tail, &spawned).await?;
            let tools = connection.running.peer().list_all_tools().await.map_err(|error| {
                kill_group(connection.group);
                format!("tools/list failed: {error}")
            })?;
            Ok::<_, String>((connection, tools))
        };
        // Cancel-safety: dropping `started` drops the transport, which kills the child (and
        // the group is killed below); `cancelled()` is cancel-safe.
        let outcome = tokio::select! {
            outcome = tokio::time::timeout(startup, started) => outcome,
            () = job.stop.cancelled() => {
                kill_group(*lock(&spawned));
                break;
            }
        };
        let failure = match outcome {
            Err(_) => {
                kill_group(*lock(&spawned));
                format!("did not start within {}s (startup_timeout_secs)", startup.as_secs())
            }
            Ok(Err(error)) => error,
            Ok(Ok((connection, tools))) => {
                backoff = BACKOFF_START;
                let (offered, refused) = offered_tools(&job.name, &tools);
                for problem in &refused {
                    tracing::warn!(server = %job.name, "{problem}");
                }
                tracing::info!(server = %job.name, tools = offered.len(), "MCP server running");
                *lock(&job.peer) = Some(connection.running.peer().clone());
                job.state.send_modify(|state| {
                    state.phase = Phase::Running;
                    state.tools = offered;
                    state.refused = refused;
                    state.refreshing = false;
                });
                let failure = serve(&job, connection, &tools_changed).await;
                *lock(&job.peer) = None;
                match failure {
                    None => break,
                    Some(failure) => failure,
                }
            }
        };
        let tail = lock(&stderr_tail).join(" | ");
        let error = if tail.is_empty() { failure } else { format!("{failure} (stderr: {tail})") };
        // A server's output may quote its environment; an HTTP error, its URL.
        let error = scrub(error, &secrets(&job.config.transport.value));
        tracing::warn!(server = %job.name, %error, retry_in = ?backoff, "MCP server failed");
        job.settings.notice(
            "mcpFailed",
            format!(
                "MCP server `{}` ({}) failed: {error}; restarting in {}s",
                job.name,
                job.workspace.display(),
                backoff.as_secs()
            ),
        );
        job.state.send_modify(|state| {
            state.phase = Phase::Failed;
            state.tools.clear();
            state.refreshing = false;
            state.last_error = Some(error);
        });
        // Cancel-safety: both branches are plain waits.
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            () = job.stop.cancelled() => break,
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
    job.state.send_modify(|state| {
        state.phase = Phase::Stopped;
        state.tools.clear();
    });
}

/// Serves a running connection until it ends (`Some(why)`) or the server is stopped (`None`).
async fn serve(job: &Job, connection: Connection, tools_changed: &Notify) -> Option<String> {
    let Connection { running, group } = connection;
    let peer = running.peer().clone();
    let closing = running.cancellation_token();
    let mut ended = tokio::spawn(running.waiting());
    let failure = loop {
        // Cancel-safety: `&mut ended` (a join handle), `notified()` and `cancelled()` are
        // cancel-safe.
        tokio::select! {
            quit = &mut ended => {
                break Some(match quit {
                    Ok(reason) => format!("the connection ended ({reason:?})"),
                    Err(error) => format!("the connection task failed: {error}"),
                });
            }
            () = tools_changed.notified() => {
                // Bounded like a start, and stopped by what stops the server: a server that
                // never answers (or pages forever) neither holds up steps nor outlives a stop.
                let refresh = tokio::time::timeout(
                    job.config.startup_timeout.value,
                    peer.list_all_tools(),
                );
                // Cancel-safety: `&mut ended` and `cancelled()` are cancel-safe; dropping the
                // refresh abandons the request (rmcp sends `notifications/cancelled`).
                let refreshed = tokio::select! {
                    refreshed = refresh => refreshed,
                    quit = &mut ended => {
                        job.state.send_modify(|state| state.refreshing = false);
                        break Some(match quit {
                            Ok(reason) => format!("the connection ended ({reason:?})"),
                            Err(error) => format!("the connection task failed: {error}"),
                        });
                    }
                    () = job.stop.cancelled() => {
                        job.state.send_modify(|state| state.refreshing = false);
                        break None;
                    }
                };
                let refreshed = refreshed.unwrap_or_else(|_| {
                    Err(rmcp::ServiceError::Timeout { timeout: job.config.startup_timeout.value })
                });
                match refreshed {
                    Ok(tools) => {
                        let (offered, refused) = offered_tools(&job.name, &tools);
                        tracing::info!(server = %job.name, tools = offered.len(), "MCP server's tool list changed");
                        job.state.send_modify(|state| {
                            state.tools = offered;
                            state.refused = refused;
                            state.refreshing = false;
                        });
                    }
                    Err(error) => {
                        job.state.send_modify(|state| {
                            let error =
                                scrub(format!("tools/list failed: {error}"), &secrets(&job.config.transport.value));
                            state.last_error = Some(error);
                            state.refreshing = false;
                        });
                    }
                }
            }
            () = job.stop.cancelled() => break None,
        }
    };
    if failure.is_none() {
        // Stopped: close the connection and give the service a moment to end (a join handle
        // is awaited only here, never after it completed).
        closing.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(3), ended).await;
    }
    kill_group(group);
    failure
}
