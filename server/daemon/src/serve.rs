//! The daemon's lifecycle: `dsh serve` (its instance lock, its socket, its optional network
//! listener, and its shutdown protocol), and the in-process runner ([`serve_on`]).
//!
//! # Start
//! One daemon per `$DSH_HOME`: it takes an exclusive lock on `$DSH_HOME/daemon.lock` (held for
//! its whole life; the OS releases it if the process dies). Holding the lock, it knows any
//! existing `$DSH_HOME/dsh.sock` is stale — left by a crashed daemon — and replaces it. The socket
//! is created with mode 0600 inside a home directory that must not be writable by others.
//!
//! # Shutdown
//! The trigger is the daemon's root [`CancellationToken`]: SIGTERM, SIGINT, `daemon/shutdown`
//! and the idle timer all cancel it (the idle timer also at once, when nothing runs, once the
//! socket it bound is removed or replaced: no client can reach the daemon again). Then, in order:
//! 1. the accept loop stops, the socket file is removed and the network front stopped (no new
//!    connections; a client starting a daemon now waits for this one's lock); connection
//!    readers stop reading;
//! 2. every running turn sees its token (a child of the root) cancelled: the loop logs the
//!    step's `step/error` (cancelled) and the turn's `turn/end {reason: cancelled}` — each a
//!    synced boundary event — and the pending `session/prompt` calls are answered;
//! 3. the task tracker is closed and waited on, with a deadline ([`TURN_DEADLINE`]), so every
//!    turn task has finished writing;
//! 4. each session's owner gets one last no-op command: when it is answered, every append
//!    queued before it is in the file; then the sessions are dropped and their owners close the
//!    logs (a final sync, the lock released); every connection writes the answers it still owes
//!    (waited on, with the same deadline);
//! 5. the instance lock is released when the process exits.

use std::io::Write as _;
use std::net::SocketAddr;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use jsonrpsee::Methods;
use tokio::net::UnixListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::api;
use crate::connection::serve_lines;
use crate::daemon::Daemon;
use crate::network::WebSockets;
use crate::settings::Settings;
use crate::startup::{DaemonConfig, DshHome};

/// How long shutdown waits for running turns to close.
pub const TURN_DEADLINE: Duration = Duration::from_secs(10);

/// Options of `dsh serve`.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Also serve WebSocket/HTTP on this loopback address (bearer token required).
    pub listen: Option<SocketAddr>,
    /// Origins the network listener accepts (requests with any other `Origin` are refused).
    pub allow_origins: Vec<String>,
    /// Exit when no client is connected and no turn runs for this long.
    pub idle_exit: Option<Duration>,
    /// Connections served at once, on the socket and over WebSocket; one more is answered with
    /// an error and closed.
    pub max_connections: usize,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            listen: None,
            allow_origins: Vec::new(),
            idle_exit: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Connections served at once (socket and WebSocket), unless configured otherwise.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;

/// An episode of failing accepts (descriptors exhausted): its backoff and its count.
#[derive(Default)]
struct Exhaustion {
    /// Failures in this episode (0: none going on).
    failures: u64,
    /// The pause before the next attempt.
    pause: Duration,
}

impl Exhaustion {
    const FIRST_PAUSE: Duration = Duration::from_millis(10);
    const LONGEST_PAUSE: Duration = Duration::from_secs(1);

    /// One failed accept: the pause before the next attempt, if any. Logs the episode's start.
    fn failed(&mut self, error: &std::io::Error, daemon: &Daemon) -> Option<Duration> {
        // EMFILE, ENFILE, ENOBUFS, ENOMEM: the process or the system is out of something that
        // only time (connections closing) gives back.
        let resource = matches!(error.raw_os_error(), Some(24 | 23 | 105 | 12));
        if !resource {
            // A connection that went away before it was accepted, or the like: the next one is
            // unaffected.
            tracing::debug!(%error, "accepting a connection failed");
            return None;
        }
        if self.failures == 0 {
            let warning = format!(
                "accepting connections fails: {error}; backing off until descriptors are free"
            );
            tracing::warn!("{warning}");
            daemon.set_condition("accept", Some(warning));
            self.pause = Self::FIRST_PAUSE;
        } else {
            self.pause = (self.pause * 2).min(Self::LONGEST_PAUSE);
        }
        self.failures += 1;
        Some(self.pause)
    }

    /// An accept succeeded: ends an episode, logging how long it was.
    fn ended(&mut self, daemon: &Daemon) {
        if self.failures > 0 {
            tracing::warn!(failures = self.failures, "accepting connections works again");
            daemon.set_condition("accept", None);
            *self = Exhaustion::default();
        }
    }
}

/// Answers a connection past the cap with one error line, then closes it. The write is
/// bounded in time: a peer that does not read is simply closed.
fn refuse_connection(stream: tokio::net::UnixStream, max: usize) {
    use tokio::io::AsyncWriteExt as _;
    let message = crate::daemon::overloaded_message(max);
    let line = dsh_protocol::jsonrpc::Response::error(
        dsh_protocol::jsonrpc::Id::Null,
        dsh_protocol::jsonrpc::ErrorObject::new(dsh_protocol::code::OVERLOADED, message),
    )
    .to_line();
    tokio::spawn(async move {
        let mut stream = stream;
        let write = async {
            stream.write_all(line.as_bytes()).await?;
            stream.write_all(b"\n").await?;
            stream.shutdown().await
        };
        let _ = tokio::time::timeout(Duration::from_secs(1), write).await;
    });
}

/// Makes sure `$DSH_HOME` exists, is a directory only its owner can write, and returns what a
/// user should hear about it: a warning when others can read or enter it (the daemon's own files
/// in it are private anyway, see [`private_file`]).
pub fn prepare_home(home: &Path) -> anyhow::Result<Vec<String>> {
    if !home.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(home)
            .with_context(|| format!("creating {}", home.display()))?;
        std::fs::set_permissions(home, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("restricting {}", home.display()))?;
    }
    let mode = std::fs::metadata(home)
        .with_context(|| format!("reading {}", home.display()))?
        .permissions()
        .mode();
    if mode & 0o022 != 0 {
        bail!(
            "{} is writable by other users (mode {:o}); the daemon's socket must live in a directory only you can write: chmod go-w {}",
            home.display(),
            mode & 0o777,
            home.display()
        );
    }
    let mut warnings = Vec::new();
    if mode & 0o077 != 0 {
        warnings.push(format!(
            "{} can be listed or entered by other users (mode {:o}): the daemon's files in it are private (0600, directories 0700), but their names show; chmod 700 {}",
            home.display(),
            mode & 0o777,
            home.display()
        ));
    }
    Ok(warnings)
}

/// Opens (creating it if needed) a file only its owner can read and write — whatever the umask,
/// and narrowing an existing file that is wider — for appending.
pub fn private_file(path: &Path) -> anyhow::Result<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("restricting {}", path.display()))?;
    Ok(file)
}

/// Holds the instance lock for the daemon's life.
pub struct InstanceLock {
    _file: std::fs::File,
}

/// Takes the instance lock of `home`, or says another daemon holds it.
///
/// A daemon that is shutting down removes its socket first and releases the lock last: while
/// the lock is held but no socket answers, this waits (up to [`TURN_DEADLINE`] and a bit) for the
/// stopping daemon to exit instead of failing.
pub async fn lock_instance(home: &Path) -> anyhow::Result<InstanceLock> {
    let path = DshHome::new(home).lock_file();
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("restricting {}", path.display()))?;
    let started = std::time::Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => break,
            Err(std::fs::TryLockError::WouldBlock) => {
                // A daemon killed a moment ago can still hold the lock and answer on its socket
                // while its threads exit (its leader already a zombie): not running.
                let pid = std::fs::read_to_string(&path).unwrap_or_default();
                let holder_alive =
                    pid.trim().parse::<u32>().map_or(true, dsh_sandbox::process_alive);
                let answers =
                    tokio::net::UnixStream::connect(DshHome::new(home).socket()).await.is_ok();
                if (answers && holder_alive)
                    || started.elapsed() > TURN_DEADLINE + Duration::from_secs(5)
                {
                    bail!(
                        "another dsh daemon is running for {} (pid {})",
                        home.display(),
                        pid.trim()
                    );
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(std::fs::TryLockError::Error(error)) => {
                return Err(error).with_context(|| format!("locking {}", path.display()));
            }
        }
    }
    file.set_len(0).ok();
    let _ = write!(file, "{}", std::process::id());
    Ok(InstanceLock { _file: file })
}

/// Runs the daemon until it is shut down.
pub async fn run(config: DaemonConfig, options: ServeOptions) -> anyhow::Result<()> {
    let dsh_home = config.home.clone();
    let home = dsh_home.root().to_path_buf();
    let warnings = prepare_home(&home)?;
    for warning in &warnings {
        tracing::warn!("{warning}");
    }
    let _lock = lock_instance(&home).await?;
    let daemon = Daemon::new(config)?;
    daemon.add_warnings(warnings);
    daemon.start_checkpoints();
    Settings::watch(&daemon.settings);
    let methods: Methods = api::module(Arc::clone(&daemon))?.into();
    // Every connection's task, so shutdown can wait for the answers they still owe.
    let connections = TaskTracker::new();
    // The network front first: if it cannot start, nothing is left behind. Without
    // `--listen`, `daemon/web` may start it later.
    let websockets = WebSockets {
        methods: methods.clone(),
        daemon: Arc::clone(&daemon),
        connections: connections.clone(),
        max_connections: options.max_connections,
    };
    daemon.web.install(websockets, options.allow_origins.clone());
    if let Some(addr) = options.listen
        && let Err(error) = daemon.web.start(&home, addr).await
    {
        daemon.web.stop().await;
        return Err(error);
    }
    let socket_path = dsh_home.socket();
    let listener = bind_private(&dsh_home, &socket_path)?;
    let _ = daemon.socket.set(socket_path.clone());
    let shutdown = daemon.shutdown.clone();
    spawn_signal_handler(shutdown.clone());
    let identity = SocketIdentity::of(&socket_path);
    if let Some(idle) = options.idle_exit {
        tokio::spawn(idle_watch(Arc::clone(&daemon), idle, identity.clone()));
    }
    tokio::spawn(unload_watch(Arc::clone(&daemon)));
    tracing::info!(socket = %socket_path.display(), pid = std::process::id(), "dsh daemon listening");

    let mut exhausted = Exhaustion::default();
    loop {
        // Cancel-safety: `accept` is cancel-safe (a connection not returned stays queued);
        // `cancelled` is cancel-safe.
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shutdown.cancelled() => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => {
                exhausted.ended(&daemon);
                stream
            }
            Err(error) => {
                // Out of descriptors (or memory): accepting again at once would fail again at
                // once, burning a core and the log. Back off, keep serving the connections
                // we have, and say so once per episode.
                if let Some(pause) = exhausted.failed(&error, &daemon) {
                    // Cancel-safety: both branches only wait.
                    tokio::select! {
                        () = tokio::time::sleep(pause) => {}
                        () = shutdown.cancelled() => break,
                    }
                }
                continue;
            }
        };
        // Counted here, not in the task: the next accept must see this connection.
        let Some(slot) = daemon.admit(options.max_connections) else {
            refuse_connection(stream, options.max_connections);
            continue;
        };
        let shutdown = daemon.shutdown.clone();
        let methods = methods.clone();
        let places = daemon.large_places.clone();
        connections.spawn(async move {
            let (reader, writer) = stream.into_split();
            serve_lines(methods, places, reader, writer, shutdown).await;
            drop(slot);
        });
    }

    // Step 1: no new connections — the socket goes now (only if it is still this daemon's: a
    // socket another daemon bound at the same path is that daemon's), the network front stops now.
    drop(listener);
    if identity.as_ref().is_none_or(SocketIdentity::still_there) {
        let _ = std::fs::remove_file(&socket_path);
    }
    daemon.web.stop().await;
    shut_down(&daemon, &connections).await;
    Ok(())
}

/// Binds the socket so that it is never reachable with wider permissions than 0600: it is bound
/// inside a fresh 0700 directory, restricted, then renamed into place (replacing a stale socket
/// left by a crashed daemon — we hold the instance lock, so any socket there is stale).
fn bind_private(home: &DshHome, socket_path: &Path) -> anyhow::Result<UnixListener> {
    let private = home.socket_staging(std::process::id());
    let _ = std::fs::remove_dir_all(&private);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&private)
        .with_context(|| format!("creating {}", private.display()))?;
    let staged = private.join(socket_path.file_name().unwrap_or_default());
    let bound = UnixListener::bind(&staged)
        .with_context(|| format!("binding {}", staged.display()))
        .and_then(|listener| {
            std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o600))
                .with_context(|| format!("restricting {}", staged.display()))?;
            std::fs::rename(&staged, socket_path)
                .with_context(|| format!("moving the socket to {}", socket_path.display()))?;
            Ok(listener)
        });
    let _ = std::fs::remove_dir_all(&private);
    bound
}

/// The in-process runner: serves the API over one reader/writer pair with a private daemon
/// inside this process — no socket, no instance lock beyond the logs' own — until the peer
/// closes its side or `stop` fires; then the daemon shuts down as `serve` does (turns cancelled
/// and logged, logs flushed) and this returns. `dsh stdio --in-process` runs it on
/// stdin/stdout, `dsh demo` and tests on an in-memory pipe.
pub async fn serve_on<R, W>(
    config: DaemonConfig,
    reader: R,
    writer: W,
    stop: CancellationToken,
) -> anyhow::Result<()>
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let warnings = prepare_home(config.home.root())?;
    let daemon = Daemon::new(config)?;
    daemon.add_warnings(warnings);
    daemon.start_checkpoints();
    Settings::watch(&daemon.settings);
    let methods: Methods = api::module(Arc::clone(&daemon))?.into();
    tokio::spawn(unload_watch(Arc::clone(&daemon)));
    let shutdown = daemon.shutdown.clone();
    tokio::spawn(async move {
        // Cancel-safety: both branches only wait for a token.
        tokio::select! {
            () = stop.cancelled() => shutdown.cancel(),
            () = shutdown.cancelled() => {}
        }
    });
    let slot = daemon.admit(usize::MAX);
    let places = daemon.large_places.clone();
    serve_lines(methods, places, reader, writer, daemon.shutdown.clone()).await;
    drop(slot);
    finish(&daemon).await;
    Ok(())
}

/// `dsh stdio --in-process`: [`serve_on`] stdin/stdout, stopped early by SIGTERM/SIGINT.
pub async fn run_in_process(config: DaemonConfig) -> anyhow::Result<()> {
    let stop = CancellationToken::new();
    spawn_signal_handler(stop.clone());
    serve_on(config, tokio::io::stdin(), tokio::io::stdout(), stop).await
}

async fn shut_down(daemon: &Arc<Daemon>, connections: &TaskTracker) {
    tracing::info!("dsh daemon shutting down");
    // Steps 1–2 happened when the token fired: accept loops and readers stopped, turns are
    // being cancelled.
    finish(daemon).await;
    // The connections write the answers they still owe (the `daemon/shutdown` call itself, the
    // prompts of cancelled turns) before the process exits.
    connections.close();
    if tokio::time::timeout(TURN_DEADLINE, connections.wait()).await.is_err() {
        tracing::warn!("some connections did not finish within {TURN_DEADLINE:?}");
    }
    // Step 5: the instance lock is released when the process exits.
    tracing::info!("dsh daemon stopped");
}

async fn finish(daemon: &Arc<Daemon>) {
    daemon.shutdown.cancel();
    // Step 3: wait for every turn task.
    daemon.tasks.close();
    if tokio::time::timeout(TURN_DEADLINE, daemon.tasks.wait()).await.is_err() {
        tracing::warn!("some turns did not end within {TURN_DEADLINE:?}");
    }
    // Step 4: a no-op round trip per owner flushes its queue; then drop the sessions.
    for live in daemon.loaded() {
        let _ = tokio::time::timeout(Duration::from_secs(5), live.handle.query(|_| ())).await;
    }
    daemon.unload_all();
    daemon.mcp.stop_all().await;
}

fn spawn_signal_handler(shutdown: CancellationToken) {
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut terminate), Ok(mut interrupt)) =
            (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
        else {
            tracing::error!("cannot install signal handlers");
            return;
        };
        // Cancel-safety: `recv` on a signal stream is cancel-safe.
        tokio::select! {
            _ = terminate.recv() => tracing::info!("SIGTERM"),
            _ = interrupt.recv() => tracing::info!("SIGINT"),
            () = shutdown.cancelled() => return,
        }
        shutdown.cancel();
    });
}

/// Unloads idle sessions now and then (see [`Daemon::unload_idle`]), until shutdown.
async fn unload_watch(daemon: Arc<Daemon>) {
    let every =
        (daemon.config.unload_after / 4).clamp(Duration::from_millis(50), Duration::from_secs(5));
    let mut tick = tokio::time::interval(every);
    loop {
        // Cancel-safety: both branches are cancel-safe.
        tokio::select! {
            _ = tick.tick() => {}
            () = daemon.shutdown.cancelled() => return,
        }
        daemon.unload_idle().await;
    }
}

async fn idle_watch(daemon: Arc<Daemon>, idle: Duration, socket: Option<SocketIdentity>) {
    let mut idle_since: Option<Instant> = None;
    let mut tick =
        tokio::time::interval(Duration::from_secs(1).min(idle).max(Duration::from_millis(10)));
    loop {
        // Cancel-safety: both branches are cancel-safe.
        tokio::select! {
            _ = tick.tick() => {}
            () = daemon.shutdown.cancelled() => return,
        }
        let busy = daemon.clients.load(Ordering::SeqCst) > 0 || daemon.any_turn_running();
        // Its socket removed or replaced (the home deleted, another daemon in a new home of the
        // same path): no client can reach this daemon again, so waiting out the idle time only
        // holds memory. It goes as soon as nothing runs.
        if !busy
            && let Some(socket) = &socket
            && !socket.still_there()
        {
            tracing::info!(socket = %socket.path.display(), "the socket was removed or replaced: exiting");
            daemon.shutdown.cancel();
            return;
        }
        match (busy, idle_since) {
            (true, _) => idle_since = None,
            (false, None) => idle_since = Some(Instant::now()),
            (false, Some(since)) if since.elapsed() >= idle => {
                tracing::info!("idle for {idle:?}: exiting");
                daemon.shutdown.cancel();
                return;
            }
            (false, Some(_)) => {}
        }
    }
}

/// The socket file this daemon bound, by device and inode: a file of another daemon at the same
/// path is not it.
#[derive(Clone)]
struct SocketIdentity {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl SocketIdentity {
    fn of(path: &Path) -> Option<SocketIdentity> {
        let meta = std::fs::symlink_metadata(path).ok()?;
        Some(SocketIdentity { path: path.to_owned(), dev: meta.dev(), ino: meta.ino() })
    }

    fn still_there(&self) -> bool {
        std::fs::symlink_metadata(&self.path)
            .is_ok_and(|meta| meta.dev() == self.dev && meta.ino() == self.ino)
    }
}
