//! The end-to-end fixture: a mock, a temporary home and workspace, and the `dsh` binary.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use dsh_mock::{MockConfig, MockServer, RecordedRequest};
use dsh_session::{Event, EventData};
use dsh_store::{DshHome, SessionId, read_log};

/// How long any wait in these tests may take before it fails.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// The API key the mock accepts.
pub const KEY: &str = "sk-test";

/// A running mock, a temporary state directory and workspace.
pub struct Env {
    pub mock: MockServer,
    pub home: PathBuf,
    pub workspace: PathBuf,
    pub root: PathBuf,
    _temp: tempfile::TempDir,
}

impl Env {
    /// An environment whose mock is configured by `config`.
    pub async fn with_mock(config: MockConfig) -> Env {
        // reqwest is built without a default TLS provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let temp = tempfile::tempdir().unwrap();
        let root = temp.path().canonicalize().unwrap();
        let home = root.join("home");
        let workspace = root.join("workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        let mock = MockServer::start(config).await.unwrap();
        Env { mock, home, workspace, root, _temp: temp }
    }

    /// An environment with the default mock.
    pub async fn new() -> Env {
        Env::with_mock(MockConfig::default()).await
    }

    /// `dsh` with the global options pointing at this environment, not yet spawned.
    pub fn command(&self, args: &[&str]) -> tokio::process::Command {
        self.command_with_key(KEY, args)
    }

    /// Like [`Env::command`] with another API key.
    pub fn command_with_key(&self, key: &str, args: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_dsh"));
        command
            .arg("--home")
            .arg(&self.home)
            .arg("--base-url")
            .arg(self.mock.base_url())
            .args(args)
            .current_dir(&self.workspace)
            .env("DEEPSEEK_API_KEY", key)
            .env_remove("DSH_HOME")
            .env_remove("DSH_MODEL")
            .env_remove("DEEPSEEK_BASE_URL")
            .env_remove("DSH_LOG")
            // The daemon `dsh` starts on demand exits soon after its last client; each test also
            // shuts it down when it ends (see `Drop`).
            .env("DSH_DAEMON_IDLE_EXIT", "0.2")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        command
    }

    /// Runs `dsh args…` to its end.
    pub async fn dsh(&self, args: &[&str]) -> Output {
        run(self.command(args)).await
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

    /// Runs `dsh prompt --yes --session ID TEXT`.
    pub async fn prompt_in(&self, session: &str, text: &str) -> Output {
        self.dsh(&["prompt", "--yes", "--session", session, text]).await
    }

    /// Queues mock replies (as `POST /_fake/script`).
    pub async fn script(&self, scripts: serde_json::Value) {
        self.mock.script(scripts).unwrap();
    }

    /// Queues a mock fault (as `POST /_fake/fault`).
    pub async fn fault(&self, fault: serde_json::Value) {
        self.mock.fault(fault).unwrap();
    }

    /// The chat requests the mock recorded.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.mock.requests()
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

    /// The path of a session's log.
    pub fn log_path(&self, session: &str) -> PathBuf {
        DshHome::new(&self.home).find_session(&SessionId::parse(session).unwrap()).unwrap()
    }

    /// A session's events, read from its log file.
    pub fn events(&self, session: &str) -> Vec<Event> {
        let read = read_log(&self.log_path(session)).unwrap();
        assert!(read.torn.is_none(), "the log of {session} ends in a torn line");
        read.events
    }

    /// `dsh audit SESSION` must exit 0 and say so.
    pub async fn assert_audit_ok(&self, session: &str) {
        let output = self.dsh(&["audit", session]).await;
        assert!(output.status.success(), "dsh audit {session} failed: {}", describe(&output));
        assert!(stdout(&output).contains("audit ok"), "{}", describe(&output));
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
}

impl Env {
    /// The pid of the daemon serving this environment's home (it writes it into its lock file).
    pub fn daemon_pid(&self) -> i32 {
        let text = std::fs::read_to_string(self.home.join("daemon.lock")).unwrap();
        text.trim().parse().unwrap()
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
