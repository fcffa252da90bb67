//! The one typed client of the API, over any byte stream (the daemon's socket, a `dsh stdio`
//! bridge, the in-process runner's pipe): requests out, responses routed back to their callers
//! by id, notifications and anything unattributable handed to the owner of the connection.
//! The CLI, the tests, the load benchmark and the fronts all speak through it; the envelopes
//! are `dsh_protocol::jsonrpc`'s.
//!
//! Also here: finding the user's daemon through its socket and starting one when none runs
//! (handing it the API key over a pipe, never through its environment).

use std::collections::HashMap;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use dsh_protocol::SessionEvent;
use dsh_protocol::jsonrpc::{
    ErrorObject, Id, Incoming, Notification, Request, Response, SubscriptionParams, raw,
};
use dsh_protocol::method::{self, Method};
use serde_json::value::RawValue;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::{mpsc, oneshot};

use crate::serve::{prepare_home, private_file};
use crate::startup::{API_KEY_ENV, DshHome, handover_text, keys_in_environment};

/// How long a client waits for a daemon it started to listen.
const START_DEADLINE: Duration = Duration::from_secs(15);

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The daemon answered with an error (shown as its message, once: it has no source).
    #[error(transparent)]
    Rpc(#[from] ErrorObject),
    /// The connection closed before the answer came.
    #[error("the daemon closed the connection")]
    Closed,
    /// Writing the request failed.
    #[error("writing to the daemon: {0}")]
    Write(#[source] std::io::Error),
    /// The answer is not the method's result type.
    #[error("reading the answer to {method}: {error}")]
    Decode {
        /// The method.
        method: String,
        /// What did not fit.
        #[source]
        error: serde_json::Error,
    },
}

impl ClientError {
    /// The JSON-RPC error code, when the daemon answered with an error.
    pub fn code(&self) -> Option<i32> {
        match self {
            ClientError::Rpc(error) => Some(error.code),
            _ => None,
        }
    }
}

/// What arrives without being the answer to a pending call.
#[derive(Debug)]
pub enum Unsolicited {
    /// A notification (for `session/event`, see [`event_of`]).
    Notification(Notification),
    /// A response whose id is null or matches no pending call (an error the daemon could not
    /// attribute to a request, or the answer to a line written raw).
    Orphan(Response),
    /// A line that is not a JSON-RPC message at all.
    Unreadable(String),
}

type Pending = Arc<Mutex<HashMap<Id, oneshot::Sender<Response>>>>;

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A JSON-RPC connection to the daemon. Cheap to share (`Arc<Client>`); calls may run
/// concurrently.
pub struct Client {
    writer: tokio::sync::Mutex<Box<dyn AsyncWrite + Unpin + Send>>,
    pending: Pending,
    /// Set by the reader when the connection closed, before it fails the pending calls.
    closed: Arc<AtomicBool>,
    next_id: AtomicU64,
}

impl Client {
    /// Wraps a reader and a writer. A task routes answers to their callers; everything else
    /// arrives on the returned receiver, which ends when the connection closes. The receiver
    /// is unbounded so that a caller that never reads it cannot stall the routing of answers;
    /// what arrives on it is bounded by what the caller subscribed to.
    pub fn new(
        reader: impl AsyncRead + Unpin + Send + 'static,
        writer: impl AsyncWrite + Unpin + Send + 'static,
    ) -> (Client, mpsc::UnboundedReceiver<Unsolicited>) {
        let pending: Pending = Arc::default();
        let (unsolicited, receiver) = mpsc::unbounded_channel();
        let routes = Arc::clone(&pending);
        let closed = Arc::new(AtomicBool::new(false));
        let reader_closed = Arc::clone(&closed);
        tokio::spawn(async move {
            let mut lines = BufReader::new(reader).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let message = match Incoming::parse(&line) {
                    Ok(Incoming::Response(response)) => {
                        let waiting = lock(&routes).remove(&response.id);
                        match waiting {
                            Some(waiter) => {
                                let _ = waiter.send(response);
                                continue;
                            }
                            None => Unsolicited::Orphan(response),
                        }
                    }
                    Ok(Incoming::Notification(notification)) => {
                        Unsolicited::Notification(notification)
                    }
                    Err(_) => Unsolicited::Unreadable(line),
                };
                // Nobody listening is fine: answers are still routed.
                let _ = unsolicited.send(message);
            }
            // The daemon closed the connection: every waiting call fails, and later calls fail
            // at once (see `send_line_for`).
            reader_closed.store(true, Ordering::SeqCst);
            lock(&routes).clear();
        });
        let client = Client {
            writer: tokio::sync::Mutex::new(Box::new(writer)),
            pending,
            closed,
            next_id: AtomicU64::new(1),
        };
        (client, receiver)
    }

    /// Connects to a socket.
    pub async fn connect(
        socket: &Path,
    ) -> anyhow::Result<(Client, mpsc::UnboundedReceiver<Unsolicited>)> {
        let stream = UnixStream::connect(socket)
            .await
            .with_context(|| format!("connecting to {}", socket.display()))?;
        let (reader, writer) = stream.into_split();
        Ok(Client::new(reader, writer))
    }

    /// Calls `M` and waits for its result.
    pub async fn call<M: Method>(&self, params: M::Params) -> Result<M::Result, ClientError> {
        let result = self.call_raw(M::NAME, raw(&params)).await?;
        serde_json::from_str(result.get())
            .map_err(|error| ClientError::Decode { method: M::NAME.to_owned(), error })
    }

    /// Calls `method` with params as given (for methods and params outside the typed API, as
    /// tests of bad input send them).
    pub async fn call_raw(
        &self,
        method: &str,
        params: Box<RawValue>,
    ) -> Result<Box<RawValue>, ClientError> {
        Ok(self.request(method, params).await?.into_outcome()?)
    }

    /// Sends a request and waits for the whole response.
    pub async fn request(
        &self,
        method: &str,
        params: Box<RawValue>,
    ) -> Result<Response, ClientError> {
        let answer = self.send(method, params).await?;
        answer.await.map_err(|_| ClientError::Closed)
    }

    /// Writes a request now and returns the wait for its response: requests sent this way from
    /// one task reach the daemon in order.
    pub async fn send(
        &self,
        method: &str,
        params: Box<RawValue>,
    ) -> Result<oneshot::Receiver<Response>, ClientError> {
        let id = Id::Number(self.fresh_id());
        let line = Request::new(id.clone(), method, params).to_line();
        self.send_line_for(id, line.as_bytes()).await
    }

    /// Writes `line` — which must be a request with id `id` — and returns the wait for its
    /// response (for hand-made requests).
    pub async fn send_line_for(
        &self,
        id: Id,
        line: &[u8],
    ) -> Result<oneshot::Receiver<Response>, ClientError> {
        let (sender, answer) = oneshot::channel();
        lock(&self.pending).insert(id.clone(), sender);
        // Registered first, checked second: a reader that closes after this check clears the
        // registration; one that closed before is seen here.
        if self.is_closed() {
            lock(&self.pending).remove(&id);
            return Err(ClientError::Closed);
        }
        if let Err(error) = self.send_line(line).await {
            lock(&self.pending).remove(&id);
            return Err(error);
        }
        Ok(answer)
    }

    /// Writes raw bytes and a newline (for bad-input tests: whatever comes back is
    /// [`Unsolicited`]).
    pub async fn send_line(&self, line: &[u8]) -> Result<(), ClientError> {
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line);
        bytes.push(b'\n');
        let mut writer = self.writer.lock().await;
        writer.write_all(&bytes).await.map_err(ClientError::Write)?;
        writer.flush().await.map_err(ClientError::Write)
    }

    /// Whether the daemon closed the connection.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// A request id not used on this connection yet.
    pub fn fresh_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::SeqCst)
    }

    /// Says hello with the protocol version this build speaks.
    pub async fn initialize(
        &self,
        name: &str,
    ) -> Result<dsh_protocol::InitializeResult, ClientError> {
        self.call::<method::Initialize>(dsh_protocol::InitializeParams {
            client_info: dsh_protocol::ClientInfo {
                name: name.to_owned(),
                version: Some(env!("CARGO_PKG_VERSION").to_owned()),
            },
            protocol_version: dsh_protocol::PROTOCOL_VERSION,
        })
        .await
    }
}

/// A subscription notification's subscription id and payload, if `notification` is one.
pub fn subscription_of(notification: &Notification) -> Option<SubscriptionParams> {
    serde_json::from_str(notification.params.as_ref()?.get()).ok()
}

/// The session event a `session/event` notification carries, with its subscription id.
pub fn event_of(notification: &Notification) -> Option<(serde_json::Value, SessionEvent)> {
    if notification.method != method::SESSION_EVENT {
        return None;
    }
    let params = subscription_of(notification)?;
    match serde_json::from_str(params.result.get()) {
        Ok(event) => Some((params.subscription, event)),
        Err(error) => {
            // A kind or payload this build does not know (a newer daemon): said, not hidden.
            tracing::warn!(%error, "a session/event this client cannot read was skipped");
            None
        }
    }
}

/// How to start a daemon when none runs.
#[derive(Clone, Debug, Default)]
pub struct SpawnOptions {
    /// Flags passed before `serve` (the sandbox's: a profile, model or base URL is a session's).
    pub global_args: Vec<String>,
    /// The variables that may hold provider keys ([`crate::startup::key_variables`]): removed
    /// from the daemon's environment and handed over on a pipe.
    pub key_variables: Vec<String>,
}

/// Connects to the daemon of `home` if one listens.
pub async fn connect_running(home: &Path) -> Option<UnixStream> {
    UnixStream::connect(DshHome::new(home).socket()).await.ok()
}

/// Connects to the daemon of `home`, starting one (the `dsh` binary this process runs) when
/// none listens.
///
/// The daemon is started **detached**: this process runs `dsh serve --detach`, a middle
/// process that leaves this process's session and process group ([`start_detached`]), starts
/// the daemon and exits at once. The daemon is then no descendant of this process (its parent
/// is init or the nearest subreaper) and in a session of its own, so nothing a client's
/// caller does to the client — a signal to its process group, its session or every process
/// descended from it, as ACP clients and editors do when they close an agent — reaches the
/// daemon, which serves every other client and turn on. The key's pipe passes through the
/// middle process untouched (it inherits it and hands it on without reading it).
pub async fn connect_or_start(home: &Path, spawn: &SpawnOptions) -> anyhow::Result<UnixStream> {
    let socket = DshHome::new(home).socket();
    if let Ok(stream) = UnixStream::connect(&socket).await {
        return Ok(stream);
    }
    prepare_home(home)?;
    let log_path = DshHome::new(home).daemon_log();
    let log = private_file(&log_path)?;
    let exe = std::env::current_exe().context("finding the dsh binary")?;
    let idle = std::env::var("DSH_DAEMON_IDLE_EXIT").unwrap_or_else(|_| "30".to_owned());
    // The key never sits in the daemon's environment (a command could read it from
    // /proc/PID/environ): it is removed there and handed over on a pipe instead.
    let keys = keys_in_environment(&spawn.key_variables);
    let mut command = tokio::process::Command::new(exe);
    command
        .arg("--home")
        .arg(home)
        .args(&spawn.global_args)
        .args(["serve", "--idle-exit", &idle, DETACH_FLAG])
        .stdin(Stdio::null())
        // The middle process says the daemon's pid here; the daemon's own stdout is null.
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .kill_on_drop(false);
    for variable in spawn.key_variables.iter().map(String::as_str).chain([API_KEY_ENV]) {
        command.env_remove(variable);
    }
    if !keys.is_empty() {
        command.arg("--api-key-stdin").stdin(Stdio::piped());
    }
    let mut starter = command.spawn().context("starting the dsh daemon")?;
    if let (false, Some(mut stdin)) = (keys.is_empty(), starter.stdin.take()) {
        let text = handover_text(&keys);
        stdin.write_all(text.as_bytes()).await.context("handing the API keys to the daemon")?;
        // Closing the pipe is the end of the key.
        drop(stdin);
    }
    let started = tokio::time::Instant::now();
    let said = tokio::time::timeout(START_DEADLINE, starter.wait_with_output()).await;
    let said = said
        .map_err(|_| {
            anyhow::anyhow!("starting the dsh daemon took longer than {START_DEADLINE:?}")
        })?
        .context("starting the dsh daemon")?;
    let pid = String::from_utf8_lossy(&said.stdout).trim().parse::<i32>().ok();
    let Some(pid) = pid.filter(|_| said.status.success()) else {
        bail!(
            "the dsh daemon could not be started ({}); its log {} ends with:\n{}",
            said.status,
            log_path.display(),
            tail(&log_path, 10)
        );
    };
    loop {
        if let Ok(stream) = UnixStream::connect(&socket).await {
            return Ok(stream);
        }
        if !running(pid) {
            // Another client may have started one at the same time: its socket wins.
            tokio::time::sleep(Duration::from_millis(100)).await;
            if let Ok(stream) = UnixStream::connect(&socket).await {
                return Ok(stream);
            }
            bail!(
                "the dsh daemon (pid {pid}) exited before listening; its log {} ends with:\n{}",
                log_path.display(),
                tail(&log_path, 10)
            );
        }
        if started.elapsed() > START_DEADLINE {
            bail!(
                "the dsh daemon did not listen on {} within {START_DEADLINE:?}",
                socket.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The flag of `dsh serve` that makes it the middle process of a detached start.
pub const DETACH_FLAG: &str = "--detach";

/// The middle process of a detached start (`dsh serve --detach`, which [`connect_or_start`]
/// runs): leaves the caller's session and process group (`setsid`), then starts `program` with
/// `args` — the same command without `--detach` — handing on its standard input (the key's
/// pipe, if any) and standard error (the daemon's log), and returns the daemon's pid without
/// waiting for it. The caller prints the pid and exits: the daemon, its parent gone, is
/// reparented to init (or the nearest subreaper), in a session that is none of the client's.
/// A daemon in a session of its own is not its leader either, so it never gets a controlling
/// terminal (the classic double fork, done with two `exec`s).
pub fn start_detached(program: &Path, args: Vec<std::ffi::OsString>) -> std::io::Result<u32> {
    let mut command = std::process::Command::new(program);
    command.args(args).stdin(Stdio::inherit()).stdout(Stdio::null()).stderr(Stdio::inherit());
    if nix::unistd::setsid().is_err() {
        // Only a process group leader is refused, and a client never starts one (`dsh serve
        // --detach` run by hand from a shell is one): the daemon still gets a process group of
        // its own, and is reparented all the same.
        command.process_group(0);
    }
    let daemon = command.spawn()?;
    // Not waited for: the daemon outlives this process, whose exit reparents it.
    Ok(daemon.id())
}

/// Whether process `pid` still runs (it is no child of ours: its parent, init, reaps it — or,
/// in a container whose init does not reap, leaves it a zombie, which counts as gone).
fn running(pid: i32) -> bool {
    u32::try_from(pid).is_ok_and(dsh_sandbox::process_alive)
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
