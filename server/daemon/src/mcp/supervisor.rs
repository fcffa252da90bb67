//! One MCP server's life, owned by its supervisor task ([`start`]): it connects (spawn or dial +
//! `initialize` + `tools/list`, bounded by the startup timeout), refreshes the tool list on
//! `notifications/tools/list_changed`, notices the end of the connection, and waits out the
//! backoff (1 s, doubling to 60 s, reset by a good start) before connecting again — until
//! stopped. It publishes the server's [`ServerState`] on a `watch` channel and its peer (for
//! calls) while connected; nothing else writes either.
//!
//! A stdio server is a child process in its own process group with an explicit environment
//! (`PATH`, `HOME`, `LANG`, and the server's `env`): nothing else of the daemon's environment
//! reaches it. Whatever ends a connection — a failed or timed-out start, a stop, the end of the
//! serve — kills that whole group (an `npx` leaves its children behind).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_config::{McpServer, McpTransport};
use rmcp::service::{NotificationContext, Peer, RoleClient};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ServiceExt};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::lock;
use super::secrets::{scrub, secrets};
use super::tools::offered_tools;
use crate::settings::Settings;

/// The first wait before a restart; doubled after each failure up to [`BACKOFF_MAX`].
const BACKOFF_START: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// Lines of a stdio server's stderr kept for its last error.
const STDERR_LINES: usize = 5;

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

/// One server of one workspace, as the manager holds it: its definition, its published state,
/// its peer while connected, and what stops it.
pub(super) struct Server {
    pub(super) config: McpServer,
    pub(super) state: watch::Receiver<ServerState>,
    pub(super) peer: Arc<Mutex<Option<Peer<RoleClient>>>>,
    pub(super) stop: CancellationToken,
}

/// A new server and its supervisor task (tracked by `tasks`); `stop` stops it.
pub(super) fn start(
    tasks: &TaskTracker,
    stop: CancellationToken,
    workspace: &Path,
    name: &str,
    config: &McpServer,
    settings: &Arc<Settings>,
) -> Arc<Server> {
    let (sender, receiver) = watch::channel(ServerState::new());
    let peer = Arc::new(Mutex::new(None));
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
    tasks.spawn(async move {
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
