//! `dsh lsp` as a child process, driven by a minimal LSP client (`Content-Length` framing, a
//! reader task that keeps every message and answers the front's own requests with `null`), and
//! connected to the daemon through [`Recorder`], a proxy socket that records the method of every
//! request the front sends.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use dsh_protocol::jsonrpc::{Id, Notification, Request, Response, Version, null, raw};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::watch;

use crate::support::{DEADLINE, Env};

/// The methods of the requests that went through the proxy, in order.
#[derive(Clone, Default)]
pub struct Recorder(Arc<Mutex<Vec<String>>>);

impl Recorder {
    /// Listens on `socket` and forwards each connection to `upstream`, recording requests.
    pub fn start(socket: &Path, upstream: PathBuf) -> Recorder {
        let recorder = Recorder::default();
        let listener = UnixListener::bind(socket).unwrap();
        let methods = recorder.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let daemon = UnixStream::connect(&upstream).await.unwrap();
                let (from_client, mut to_client) = client.into_split();
                let (mut from_daemon, mut to_daemon) = daemon.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut from_daemon, &mut to_client).await;
                });
                let methods = methods.clone();
                tokio::spawn(async move {
                    let mut lines = BufReader::new(from_client).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        let request: Value = serde_json::from_str(&line).unwrap_or_default();
                        let method = request["method"].as_str().unwrap_or("(not a request)");
                        methods.0.lock().unwrap().push(method.to_owned());
                        let sent = to_daemon.write_all(format!("{line}\n").as_bytes()).await;
                        if sent.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        recorder
    }

    /// Every method so far.
    pub fn methods(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// A running `dsh lsp` and what it said.
pub struct Front {
    child: Child,
    stdin: Arc<tokio::sync::Mutex<ChildStdin>>,
    received: Arc<Mutex<Vec<Value>>>,
    changed: watch::Receiver<u64>,
    ids: AtomicU64,
    /// The requests the front sent the daemon.
    pub daemon: Recorder,
}

impl Front {
    /// Starts `dsh lsp` with a home of its own whose socket is a [`Recorder`] in front of the
    /// daemon of `env` (which must be running), and initializes it on `env`'s workspace.
    pub async fn start(env: &Env) -> Front {
        let home = env.root.join("front-home");
        std::fs::create_dir_all(&home).unwrap();
        let daemon = Recorder::start(&home.join("dsh.sock"), env.socket());
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_dsh"))
            .arg("--home")
            .arg(&home)
            .arg("lsp")
            .current_dir(&env.workspace)
            .env("DSH_CONFIG", env.user_config())
            .env_remove("DSH_HOME")
            .env_remove("DSH_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = Arc::new(tokio::sync::Mutex::new(child.stdin.take().unwrap()));
        let received: Arc<Mutex<Vec<Value>>> = Arc::default();
        let (bump, changed) = watch::channel(0);
        let stdout = child.stdout.take().unwrap();
        tokio::spawn(read(stdout, Arc::clone(&stdin), Arc::clone(&received), bump));
        let front = Front { child, stdin, received, changed, ids: AtomicU64::new(1), daemon };
        let root = uri(&env.workspace);
        let capabilities = json!({
            "window": {"workDoneProgress": true, "showDocument": {"support": true}},
            "workspace": {"codeLens": {"refreshSupport": true}},
        });
        let params = json!({
            "processId": null,
            "rootUri": root,
            "workspaceFolders": [{"uri": root, "name": "workspace"}],
            "capabilities": capabilities,
        });
        front.request("initialize", params).await;
        front.notify("initialized", json!({})).await;
        front
    }

    /// Sends a notification.
    pub async fn notify(&self, method: &str, params: Value) {
        let method = method.to_owned();
        let notification = Notification { jsonrpc: Version, method, params: Some(raw(&params)) };
        write(&self.stdin, &serde_json::to_string(&notification).unwrap()).await;
    }

    /// Sends a request and waits for its result (an error fails the test).
    pub async fn request(&self, method: &str, params: Value) -> Value {
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        write(&self.stdin, &Request::new(Id::Number(id), method, raw(&params)).to_line()).await;
        let answer = self
            .wait_for(&format!("the answer to {method}"), |message| {
                message["id"] == id && message.get("method").is_none()
            })
            .await;
        assert!(answer.get("error").is_none(), "{method}: {answer}");
        answer["result"].clone()
    }

    /// Waits for a message from the front that `matches`.
    pub async fn wait_for(&self, what: &str, matches: impl Fn(&Value) -> bool) -> Value {
        let mut changed = self.changed.clone();
        let started = Instant::now();
        loop {
            if let Some(found) = self.received.lock().unwrap().iter().find(|m| matches(m)) {
                return found.clone();
            }
            let left = DEADLINE.saturating_sub(started.elapsed());
            let waited = tokio::time::timeout(left, changed.changed()).await;
            assert!(matches!(waited, Ok(Ok(()))), "timed out waiting for {what}");
        }
    }

    /// The `window/showMessage` texts so far.
    pub fn messages(&self) -> Vec<String> {
        let received = self.received.lock().unwrap();
        let shown = received.iter().filter(|m| m["method"] == "window/showMessage");
        shown.map(|m| m["params"]["message"].as_str().unwrap_or_default().to_owned()).collect()
    }

    /// Ends the front as an editor does: `shutdown`, `exit`.
    pub async fn stop(mut self) {
        self.request("shutdown", Value::Null).await;
        self.notify("exit", Value::Null).await;
        let status = tokio::time::timeout(DEADLINE, self.child.wait()).await.unwrap().unwrap();
        assert!(status.success(), "dsh lsp exited with {status}");
    }
}

/// A path's `file://` URI.
pub fn uri(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// Writes one message with LSP's framing.
async fn write(stdin: &tokio::sync::Mutex<ChildStdin>, body: &str) {
    let framed = format!("Content-Length: {}\r\n\r\n{body}", body.len());
    stdin.lock().await.write_all(framed.as_bytes()).await.unwrap();
}

/// Reads the front's messages; answers its requests (progress tokens, lens refreshes, shown
/// documents and messages) with `null`.
async fn read(
    stdout: ChildStdout,
    stdin: Arc<tokio::sync::Mutex<ChildStdin>>,
    received: Arc<Mutex<Vec<Value>>>,
    bump: watch::Sender<u64>,
) {
    let mut stdout = BufReader::new(stdout);
    loop {
        let mut length = None;
        loop {
            let mut header = String::new();
            if stdout.read_line(&mut header).await.unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some(value) = header.strip_prefix("Content-Length: ") {
                length = value.parse::<usize>().ok();
            }
        }
        let mut body = vec![0; length.unwrap()];
        stdout.read_exact(&mut body).await.unwrap();
        let message: Value = serde_json::from_slice(&body).unwrap();
        if message.get("method").is_some()
            && let Some(id) = message.get("id")
        {
            let id = serde_json::from_value(id.clone()).unwrap();
            write(&stdin, &Response::result(id, null()).to_line()).await;
        }
        received.lock().unwrap().push(message);
        bump.send_modify(|n| *n += 1);
    }
}
