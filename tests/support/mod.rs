//! The one fixture of the end-to-end tests (`tests/cli`, `tests/api`): a mock provider, a
//! temporary `$DSH_HOME` and workspace, the real `dsh` binary (commands, `dsh serve`, a `dsh
//! stdio` bridge), and connections to the daemon through the project's typed client
//! (`dsh_daemon::Client`; [`Conn`] adds what the tests inspect: events per subscription,
//! unattributable answers, raw lines).
//!
//! Nothing here sleeps for a fixed time to let something happen: every wait polls a condition
//! (a response, an event, a recorded request, a file) against [`DEADLINE`]. Dropping an [`Env`]
//! stops the daemon its commands started, so no daemon outlives a test.

pub mod llama;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dsh_daemon::client::subscription_of;
use dsh_daemon::{Client, ClientError, Unsolicited};
use dsh_mock::{MockConfig, MockServer, RecordedRequest};
use dsh_protocol::jsonrpc::{Id, Response, raw};
use dsh_session::{Event, EventData};
use dsh_store::{DshHome, SessionId, read_log};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{oneshot, watch};

/// How long any wait in these tests may take before it fails.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// The API key the default fixture's mock accepts.
pub const KEY: &str = "sk-test";

/// A JSON-RPC error answer.
#[derive(Clone, Debug, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}

/// A running mock, a temporary state directory and workspace.
pub struct Env {
    pub mock: MockServer,
    pub home: PathBuf,
    pub workspace: PathBuf,
    pub root: PathBuf,
    pub key: String,
    _temp: tempfile::TempDir,
}

impl Env {
    /// An environment whose mock is configured by `config`; the daemon uses the mock's first key.
    pub async fn with_mock(config: MockConfig) -> Env {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let key = config.keys.first().map_or_else(|| KEY.to_owned(), |k| k.key.clone());
        let temp = tempfile::tempdir().unwrap();
        let root = temp.path().canonicalize().unwrap();
        let home = root.join("home");
        let workspace = root.join("workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        let mock = MockServer::start(config).await.unwrap();
        Env { mock, home, workspace, root, key, _temp: temp }
    }

    /// An environment with the default mock.
    pub async fn new() -> Env {
        Env::with_mock(MockConfig::default()).await
    }

    /// `dsh --home H --base-url U ARGS…` with the environment's key, not yet spawned.
    pub fn command(&self, args: &[&str]) -> tokio::process::Command {
        self.command_with_key(&self.key, args)
    }

    /// Like [`Env::command`] with another API key.
    pub fn command_with_key(&self, key: &str, args: &[&str]) -> tokio::process::Command {
        let base_url = self.mock.base_url();
        let mut all = vec!["--base-url", base_url.as_str()];
        all.extend_from_slice(args);
        self.command_plain(key, &all)
    }

    /// `dsh --home H ARGS…` with `key`: no `--base-url`, so the provider profiles of the
    /// configuration files decide where requests go.
    pub fn command_plain(&self, key: &str, args: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_dsh"));
        command
            .arg("--home")
            .arg(&self.home)
            .args(args)
            .current_dir(&self.workspace)
            .env("DEEPSEEK_API_KEY", key)
            // The user's configuration file is the test's own (absent until a test writes it).
            .env("DSH_CONFIG", self.user_config())
            .env_remove("DSH_PROVIDER")
            .env_remove("DSH_HOME")
            .env_remove("DSH_MODEL")
            .env_remove("DEEPSEEK_BASE_URL")
            .env_remove("DSH_LOG")
            .env_remove("DSH_DAEMON_IDLE_EXIT")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        command
    }

    /// The user's configuration file of the commands this environment runs (`$DSH_CONFIG`).
    pub fn user_config(&self) -> PathBuf {
        self.root.join("config.toml")
    }

    /// Runs `dsh ARGS…` to its end.
    pub async fn dsh(&self, args: &[&str]) -> Output {
        run(self.command(args)).await
    }

    /// Starts `dsh serve EXTRA…` in the foreground (stderr → `$DSH_HOME/daemon.log`, as a daemon a
    /// client starts) and connects to its socket.
    pub async fn serve(&self, extra: &[&str]) -> Served {
        self.serve_with(extra, |_| {}).await
    }

    /// Like [`Env::serve`], with a hook to adjust the command (environment).
    pub async fn serve_with(
        &self,
        extra: &[&str],
        adjust: impl FnOnce(&mut tokio::process::Command),
    ) -> Served {
        std::fs::create_dir_all(&self.home).unwrap();
        let mut perms = std::fs::metadata(&self.home).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o700);
        std::fs::set_permissions(&self.home, perms).unwrap();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.home.join("daemon.log"))
            .unwrap();
        let mut args = vec!["serve"];
        args.extend_from_slice(extra);
        let mut command = self.command(&args);
        command.stderr(Stdio::from(log)).stdout(Stdio::null());
        if let Ok(filter) = std::env::var("DSH_TEST_DAEMON_LOG") {
            command.env("DSH_LOG", filter);
        }
        adjust(&mut command);
        let mut child = command.spawn().unwrap();
        let started = Instant::now();
        let socket = self.socket();
        loop {
            if let Ok(stream) = tokio::net::UnixStream::connect(&socket).await {
                drop(stream);
                break;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("dsh serve exited ({status}) before listening:\n{}", self.daemon_log());
            }
            assert!(started.elapsed() < DEADLINE, "dsh serve did not listen in time");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Served { child, home: self.home.clone() }
    }

    /// `$DSH_HOME/dsh.sock`.
    pub fn socket(&self) -> PathBuf {
        self.home.join("dsh.sock")
    }

    /// The daemon's own log.
    pub fn daemon_log(&self) -> String {
        std::fs::read_to_string(self.home.join("daemon.log")).unwrap_or_default()
    }

    /// A new connection to the daemon's socket.
    pub async fn connect(&self) -> Arc<Conn> {
        let stream = tokio::net::UnixStream::connect(self.socket()).await.unwrap();
        let (reader, writer) = stream.into_split();
        Conn::new(reader, writer)
    }

    /// A new connection, greeted with `initialize`.
    pub async fn client(&self) -> Arc<Conn> {
        let conn = self.connect().await;
        conn.initialize().await;
        conn
    }

    /// Queues mock replies (as `POST /_fake/script`).
    pub async fn script(&self, scripts: Value) {
        self.mock.script(scripts).unwrap();
    }

    /// Queues a mock fault (as `POST /_fake/fault`).
    pub async fn fault(&self, fault: Value) {
        self.mock.fault(fault).unwrap();
    }

    /// The model requests the mock recorded (chat completions and Anthropic Messages).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        let model_request =
            |path: &str| path.ends_with("/chat/completions") || path.ends_with("/v1/messages");
        self.mock.requests().into_iter().filter(|r| model_request(&r.path)).collect()
    }

    /// The path of a session's log.
    pub fn log_path(&self, session: &str) -> PathBuf {
        DshHome::new(&self.home).find_session(&SessionId::parse(session).unwrap()).unwrap()
    }

    /// A session's events, read from its log file (which must not end torn).
    pub fn events(&self, session: &str) -> Vec<Event> {
        let read = read_log(&self.log_path(session)).unwrap();
        assert!(read.torn.is_none(), "the log of {session} ends in a torn line");
        read.events
    }

    /// A session's log lines as JSON values.
    pub fn log_values(&self, session: &str) -> Vec<Value> {
        std::fs::read_to_string(self.log_path(session))
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    /// Runs `dsh args…` and fails the test unless it exits 0.
    pub async fn dsh_ok(&self, args: &[&str]) -> Output {
        let output = self.dsh(args).await;
        assert!(output.status.success(), "dsh {args:?} failed: {}", describe(&output));
        output
    }

    /// Runs `dsh prompt --yes TEXT` in a new session of the workspace; returns the session id.
    pub async fn prompt_new(&self, text: &str) -> (String, Output) {
        let workspace = self.workspace.to_str().unwrap().to_owned();
        let output = self.dsh(&["prompt", "--yes", "--workspace", &workspace, text]).await;
        (session_id_of(&output), output)
    }

    /// `dsh prompt --yes --workspace WORKSPACE TEXT`, to spawn (a turn a test acts on while it
    /// runs) or run with more environment.
    pub fn prompt_new_command(&self, text: &str) -> tokio::process::Command {
        let workspace = self.workspace.to_str().unwrap().to_owned();
        self.command(&["prompt", "--yes", "--workspace", &workspace, text])
    }

    /// Runs `dsh prompt --yes --session ID TEXT`.
    pub async fn prompt_in(&self, session: &str, text: &str) -> Output {
        self.dsh(&["prompt", "--yes", "--session", session, text]).await
    }

    /// Waits until the mock has recorded `count` chat requests; returns them.
    pub async fn wait_for_requests(&self, count: usize) -> Vec<RecordedRequest> {
        let started = Instant::now();
        loop {
            let requests = self.requests();
            if requests.len() >= count {
                return requests;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "the mock recorded {} requests, expected {count}",
                requests.len()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// `dsh saw SESSION --step N --wire`: the rebuilt wire body.
    pub async fn saw_wire(&self, session: &str, step: u64) -> Vec<u8> {
        let step = step.to_string();
        self.dsh_ok(&["saw", session, "--step", &step, "--wire"]).await.stdout
    }

    /// `dsh --json ARGS…`, parsed.
    pub async fn dsh_json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let output = self.dsh_ok(&all).await;
        serde_json::from_slice(&output.stdout).unwrap()
    }
    /// The pid of the daemon serving this environment's home (it writes it into its lock file).
    pub fn daemon_pid(&self) -> i32 {
        let text = std::fs::read_to_string(self.home.join("daemon.lock")).unwrap();
        text.trim().parse().unwrap()
    }

    /// Every file under `$DSH_HOME/workspaces` with its bytes: the session logs (not the
    /// workspaces' checkpoint stores).
    pub fn log_files(&self) -> Vec<(PathBuf, Vec<u8>)> {
        let mut files = Vec::new();
        collect_files(&self.home.join("workspaces"), &mut files);
        files.sort();
        files
    }

    /// `dsh audit SESSION` must exit 0 and say so.
    pub async fn assert_audit_ok(&self, session: &str) {
        let output = self.dsh(&["audit", session]).await;
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("audit ok"),
            "dsh audit {session} failed: {}\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        // Stop the daemon the test's `dsh` commands started, if one is still running.
        if self.home.join("daemon.lock").exists() {
            let _ = std::process::Command::new(env!("CARGO_BIN_EXE_dsh"))
                .arg("--home")
                .arg(&self.home)
                .arg("shutdown")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn collect_files(dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries {
        let path = entry.unwrap().path();
        // A workspace's checkpoint store (docs/rewind.md) holds no log.
        if path.file_name().is_some_and(|name| name == "checkpoints") {
            continue;
        }
        if path.is_dir() {
            collect_files(&path, out);
        } else {
            let bytes = std::fs::read(&path).unwrap();
            out.push((path, bytes));
        }
    }
}

/// A `dsh serve` child. Dropping it kills the daemon if a test failed before shutting it down.
pub struct Served {
    pub child: tokio::process::Child,
    pub home: PathBuf,
}

impl Served {
    /// The daemon's pid.
    pub fn pid(&self) -> u32 {
        self.child.id().unwrap()
    }

    /// Waits for the daemon to exit; returns whether it exited successfully.
    pub async fn wait(&mut self) -> std::process::ExitStatus {
        tokio::time::timeout(DEADLINE, self.child.wait())
            .await
            .expect("the daemon did not exit within the deadline")
            .unwrap()
    }

    /// `daemon/shutdown` over a fresh connection, then waits for a clean exit and checks that
    /// the socket file is gone.
    pub async fn shutdown(mut self) {
        let stream = tokio::net::UnixStream::connect(self.home.join("dsh.sock")).await.unwrap();
        let (reader, writer) = stream.into_split();
        let conn = Conn::new(reader, writer);
        let answer = conn.request_opt("daemon/shutdown", json!({})).await;
        let log = || std::fs::read_to_string(self.home.join("daemon.log")).unwrap_or_default();
        let Some(answer) = answer else {
            panic!(
                "the daemon closed the connection without answering daemon/shutdown (orphans {:?}, other {:?}):\n{}",
                conn.orphans(),
                conn.other(),
                log()
            )
        };
        assert_eq!(answer["result"], json!({"stopping": true}), "{answer}");
        let status = self.wait().await;
        assert!(status.success(), "the daemon exited with {status}");
        assert!(!self.home.join("dsh.sock").exists(), "the socket file outlived the daemon");
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// Kills the daemon whose pid `$DSH_HOME/daemon.lock` holds, if it still runs and is a `dsh`
/// serving this home (for daemons a client started; they are not our children).
pub fn kill_daemon_of(home: &Path) {
    let Some(pid) = lock_pid(home) else { return };
    if process_alive(pid) && process_cmdline(pid).contains(&home.display().to_string()) {
        let _ = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status();
    }
}

/// The pid in `$DSH_HOME/daemon.lock`.
pub fn lock_pid(home: &Path) -> Option<u32> {
    std::fs::read_to_string(home.join("daemon.lock")).ok()?.trim().parse().ok()
}

/// Whether `pid` runs (a zombie counts as gone).
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/status")) {
        Ok(status) => !status.lines().any(|l| l.starts_with("State:") && l.contains('Z')),
        Err(_) => false,
    }
}

fn process_cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

/// Waits until `pid` has exited.
pub async fn wait_gone(pid: u32) {
    let started = Instant::now();
    while process_alive(pid) {
        assert!(started.elapsed() < DEADLINE, "process {pid} did not exit in time");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Kills a client-started daemon when dropped (a failing test must not leave one behind).
pub struct DaemonGuard(pub PathBuf);

impl Drop for DaemonGuard {
    fn drop(&mut self) {
        kill_daemon_of(&self.0);
    }
}

/// What the collector task kept besides answers.
#[derive(Default)]
pub struct Inbox {
    /// `session/event` results per subscription id (as its JSON text).
    pub events: HashMap<String, Vec<Value>>,
    /// Answers whose id is null or unknown (errors to lines the daemon could not attribute).
    pub orphans: Vec<Value>,
    /// Notifications other than `session/event`, and lines that were not JSON (as strings).
    pub other: Vec<Value>,
    /// The peer closed the connection.
    pub closed: bool,
}

/// A connection to the daemon: the project's [`Client`], plus a task that keeps what arrives
/// unasked for in an [`Inbox`] the tests inspect.
pub struct Conn {
    client: Client,
    inbox: Arc<Mutex<Inbox>>,
    changed: watch::Receiver<u64>,
}

fn to_value(response: &Response) -> Value {
    serde_json::to_value(response).unwrap()
}

impl Conn {
    /// Wraps a reader and a writer.
    pub fn new(
        reader: impl AsyncRead + Unpin + Send + 'static,
        writer: impl AsyncWrite + Unpin + Send + 'static,
    ) -> Arc<Conn> {
        let (client, mut unsolicited) = Client::new(reader, writer);
        let inbox: Arc<Mutex<Inbox>> = Arc::default();
        let (bump, changed) = watch::channel(0u64);
        let collected = Arc::clone(&inbox);
        tokio::spawn(async move {
            while let Some(message) = unsolicited.recv().await {
                let mut inbox = collected.lock().unwrap();
                match message {
                    Unsolicited::Notification(notification) => {
                        match subscription_of(&notification) {
                            Some(params) if notification.method == "session/event" => {
                                let result = serde_json::from_str(params.result.get()).unwrap();
                                let key = params.subscription.to_string();
                                inbox.events.entry(key).or_default().push(result);
                            }
                            _ => inbox.other.push(serde_json::to_value(&notification).unwrap()),
                        }
                    }
                    Unsolicited::Orphan(response) => inbox.orphans.push(to_value(&response)),
                    Unsolicited::Unreadable(line) => inbox.other.push(Value::String(line)),
                }
                drop(inbox);
                bump.send_modify(|n| *n += 1);
            }
            collected.lock().unwrap().closed = true;
            bump.send_modify(|n| *n += 1);
        });
        Arc::new(Conn { client, inbox, changed })
    }

    /// Writes one raw line (a newline is appended).
    pub async fn send_line(&self, line: &str) {
        self.send_bytes(line.as_bytes()).await;
    }

    /// Writes raw bytes and a newline.
    pub async fn send_bytes(&self, line: &[u8]) {
        // A peer that already closed shows up as a missing answer, not here.
        let _ = self.client.send_line(line).await;
    }

    /// Sends a request with a fresh id; returns the whole answer object.
    pub async fn request(&self, method: &str, params: Value) -> Value {
        match self.request_opt(method, params.clone()).await {
            Some(answer) => answer,
            None => panic!("the connection closed before answering {method} {params}"),
        }
    }

    /// Sends `line`, which must carry id `id`, and waits for its answer.
    pub async fn raw_request(&self, id: u64, line: &str) -> Value {
        let answer = match self.client.send_line_for(Id::Number(id), line.as_bytes()).await {
            Ok(answer) => answer,
            Err(error) => panic!("sending {line:.200}: {error}"),
        };
        match tokio::time::timeout(DEADLINE, answer).await {
            Ok(Ok(answer)) => to_value(&answer),
            Ok(Err(_)) => panic!("the connection closed before answering {line:.200}"),
            Err(_) => panic!("no answer within the deadline to {line:.200}"),
        }
    }

    /// Writes a request and returns at once; the receiver gets its answer. Requests sent this
    /// way from one task reach the daemon in order.
    pub async fn send(&self, method: &str, params: Value) -> oneshot::Receiver<Value> {
        let answer = self.client.send(method, raw(&params)).await.unwrap();
        let (sender, receiver) = oneshot::channel();
        tokio::spawn(async move {
            if let Ok(answer) = answer.await {
                let _ = sender.send(to_value(&answer));
            }
        });
        receiver
    }

    /// Sends a request; its answer, or `None` when the connection closed first.
    pub async fn request_opt(&self, method: &str, params: Value) -> Option<Value> {
        let answer = match self.client.send(method, raw(&params)).await {
            Ok(answer) => answer,
            Err(ClientError::Closed | ClientError::Write(_)) => return None,
            Err(error) => panic!("sending {method}: {error}"),
        };
        match tokio::time::timeout(DEADLINE, answer).await {
            Ok(Ok(answer)) => Some(to_value(&answer)),
            Ok(Err(_)) => None,
            Err(_) => panic!("no answer within the deadline to {method} {params}"),
        }
    }

    /// A fresh request id (for hand-written lines).
    pub fn fresh_id(&self) -> u64 {
        self.client.fresh_id()
    }

    /// Calls `method`: its result, or its error.
    pub async fn call(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let answer = self.request(method, params).await;
        assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
        if let Some(error) = answer.get("error") {
            let message = error["message"].as_str().unwrap_or_default().to_owned();
            // Messages are for people: never a Debug dump.
            assert!(!message.contains("{ ") && !message.contains("Error {"), "{message}");
            return Err(RpcError { code: error["code"].as_i64().unwrap(), message });
        }
        Ok(answer["result"].clone())
    }

    /// Calls `method` and fails the test on an error.
    pub async fn ok(&self, method: &str, params: Value) -> Value {
        match self.call(method, params.clone()).await {
            Ok(result) => result,
            Err(error) => panic!("{method} {params} failed: {error:?}"),
        }
    }

    /// Calls `method` and expects the error `code`; returns the message.
    pub async fn err(&self, method: &str, params: Value, code: i64) -> String {
        match self.call(method, params.clone()).await {
            Ok(result) => panic!("{method} {params} succeeded ({result}); expected error {code}"),
            Err(error) => {
                assert_eq!(error.code, code, "{method} {params}: {}", error.message);
                error.message
            }
        }
    }

    /// `initialize` with the supported protocol version.
    pub async fn initialize(&self) -> Value {
        let result = self.client.initialize("dsh-tests").await.unwrap();
        serde_json::to_value(result).unwrap()
    }

    /// `session/subscribe`; returns the subscription id (as the key [`Conn::events`] takes).
    pub async fn subscribe(&self, session: &str, from_seq: Option<u64>) -> String {
        let mut params = json!({"sessionId": session});
        if let Some(from) = from_seq {
            params["fromSeq"] = json!(from);
        }
        self.ok("session/subscribe", params).await.to_string()
    }

    /// The events a subscription delivered so far.
    pub fn events(&self, subscription: &str) -> Vec<Value> {
        self.inbox.lock().unwrap().events.get(subscription).cloned().unwrap_or_default()
    }

    /// Answers with a null or unknown id, so far.
    pub fn orphans(&self) -> Vec<Value> {
        self.inbox.lock().unwrap().orphans.clone()
    }

    /// Notifications other than `session/event`, and unreadable lines, so far.
    pub fn other(&self) -> Vec<Value> {
        self.inbox.lock().unwrap().other.clone()
    }

    /// Whether the daemon closed the connection.
    pub fn closed(&self) -> bool {
        self.inbox.lock().unwrap().closed
    }

    /// Waits until `done` holds for the inbox; fails the test at the deadline.
    pub async fn wait_until(&self, what: &str, mut done: impl FnMut(&Inbox) -> bool) {
        let mut changed = self.changed.clone();
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            if done(&self.inbox.lock().unwrap()) {
                return;
            }
            match tokio::time::timeout_at(deadline, changed.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => {
                    assert!(
                        done(&self.inbox.lock().unwrap()),
                        "connection gone waiting for {what}"
                    );
                    return;
                }
                Err(_) => panic!("timed out waiting for {what}"),
            }
        }
    }

    /// Waits for an event of `kind` on `subscription` for which `matches` holds; returns it.
    pub async fn wait_event(
        &self,
        subscription: &str,
        kind: &str,
        matches: impl Fn(&Value) -> bool,
    ) -> Value {
        let mut found = None;
        self.wait_until(&format!("a `{kind}` event"), |inbox| {
            found = inbox
                .events
                .get(subscription)
                .and_then(|events| events.iter().find(|e| e["type"] == kind && matches(e)))
                .cloned();
            found.is_some()
        })
        .await;
        found.unwrap()
    }

    /// Waits for the `turn/end` of `turn`; returns every event of the subscription so far.
    pub async fn wait_turn_end(&self, subscription: &str, turn: u64) -> Vec<Value> {
        self.wait_event(subscription, "turn/end", |e| e["data"]["turn"] == turn).await;
        self.events(subscription)
    }

    /// Waits for the orphan answer number `n` (counting from 1); returns it.
    pub async fn wait_orphan(&self, n: usize) -> Value {
        self.wait_until(&format!("{n} answers with id null"), |inbox| inbox.orphans.len() >= n)
            .await;
        self.orphans()[n - 1].clone()
    }
}

/// `dsh stdio` (a bridge that starts the daemon when none runs) as a connection.
pub struct Bridge {
    pub child: tokio::process::Child,
    pub conn: Arc<Conn>,
}

impl Env {
    /// Spawns `dsh stdio ARGS…` with piped stdin/stdout.
    pub fn stdio(&self, args: &[&str]) -> Bridge {
        let mut all = vec!["stdio"];
        all.extend_from_slice(args);
        let mut command = self.command(&all);
        command.stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut child = command.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        Bridge { child, conn: Conn::new(stdout, stdin) }
    }
}

/// Asserts `events` are contiguous from `first` (no gap, no duplicate).
pub fn assert_contiguous(events: &[Value], first: u64) {
    for (i, event) in events.iter().enumerate() {
        assert_eq!(
            event["seq"].as_u64().unwrap(),
            first + i as u64,
            "event {i} breaks the sequence: {event}"
        );
    }
}

/// Asserts that delivered events equal the log's lines (same seq, time, type and data).
pub fn assert_same_as_log(events: &[Value], log: &[Value], session: &str) {
    assert_eq!(
        events.len(),
        log.len(),
        "delivered {} events, the log has {}",
        events.len(),
        log.len()
    );
    for (event, line) in events.iter().zip(log) {
        assert_eq!(event["sessionId"], session);
        assert_eq!(event["seq"], line["seq"]);
        assert_eq!(event["time"], line["time"]);
        assert_eq!(event["type"], line["type"]);
        assert_eq!(event["data"], line["data"], "seq {}", line["seq"]);
    }
}

/// Types of a list of events, for messages.
pub fn kinds(events: &[Value]) -> Vec<String> {
    events.iter().map(|e| format!("{}:{}", e["seq"], e["type"].as_str().unwrap_or("?"))).collect()
}

/// Runs a command to its end within the deadline.
pub async fn run(mut command: tokio::process::Command) -> Output {
    let args: Vec<_> =
        command.as_std().get_args().map(|a| a.to_string_lossy().into_owned()).collect();
    let output = tokio::time::timeout(DEADLINE, command.output()).await;
    output.unwrap_or_else(|_| panic!("dsh {args:?} did not finish within {DEADLINE:?}")).unwrap()
}

/// The process's stdout as text.
pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The process's stderr as text.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Status, stdout and stderr, for assertion messages.
pub fn describe(output: &Output) -> String {
    format!("{}\n--- stdout\n{}\n--- stderr\n{}", output.status, stdout(output), stderr(output))
}

/// The session id `dsh prompt` announces on stderr (`session ID (workspace …)`).
pub fn session_id_of(output: &Output) -> String {
    let text = stderr(output);
    let line = text
        .lines()
        .find_map(|line| line.strip_prefix("session "))
        .unwrap_or_else(|| panic!("no session line: {}", describe(output)));
    line.split_whitespace().next().unwrap().to_owned()
}

/// The events of one kind (`"step/start"`, …).
pub fn of_kind<'a>(events: &'a [Event], kind: &str) -> Vec<&'a Event> {
    events.iter().filter(|event| event.data.kind() == kind).collect()
}

/// A script reply with one tool call.
pub fn tool_reply(reasoning: &str, name: &str, arguments: serde_json::Value) -> serde_json::Value {
    serde_json::json!({
        "reasoning": reasoning,
        "tool_calls": [{ "name": name, "arguments": arguments.to_string() }],
    })
}

/// Splits a DeepSeek wire body into its messages part (`{"model":…,"messages":[…` without the
/// closing bracket) and the rest (`],"tools":[…]…}`: tools and call options).
pub fn split_body(body: &[u8]) -> (&[u8], &[u8]) {
    let marker = b"],\"tools\":[";
    let at = body
        .windows(marker.len())
        .rposition(|window| window == marker)
        .unwrap_or_else(|| panic!("no tools in body: {}", String::from_utf8_lossy(body)));
    body.split_at(at)
}

/// Asserts that `next` extends `previous`: the same model, system prompt and earlier messages
/// byte for byte, new messages only appended, and the same tools and call options.
pub fn assert_append_extension(previous: &[u8], next: &[u8]) {
    let (previous_messages, previous_rest) = split_body(previous);
    let (next_messages, next_rest) = split_body(next);
    assert!(
        next_messages.starts_with(previous_messages),
        "the later body does not extend the earlier one:\n{}\n---\n{}",
        String::from_utf8_lossy(previous_messages),
        String::from_utf8_lossy(next_messages)
    );
    assert_eq!(
        String::from_utf8_lossy(previous_rest),
        String::from_utf8_lossy(next_rest),
        "tools or call options changed"
    );
}

/// The `tool/result` events.
pub fn tool_results(events: &[Event]) -> Vec<&dsh_session::ToolResult> {
    events
        .iter()
        .filter_map(|event| match &event.data {
            EventData::ToolResult(result) => Some(result),
            _ => None,
        })
        .collect()
}

/// Writes `text` to `path` under `root`, creating directories.
pub fn write(root: &Path, path: &str, text: &str) {
    let path = root.join(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Waits for a spawned `dsh` to finish within the deadline and collects its output.
pub async fn run_child(child: tokio::process::Child) -> Output {
    let output = tokio::time::timeout(DEADLINE, child.wait_with_output()).await;
    output.expect("dsh did not finish within the deadline").unwrap()
}
