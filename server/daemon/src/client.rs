//! The CLI's side of the daemon: find the user's daemon through its socket, start it when none
//! runs, and speak JSON-RPC to it (requests out, responses and `session/event` notifications in).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::{Mutex, mpsc, oneshot};

use crate::daemon::serve::{LOG_FILE, SOCKET_FILE, prepare_home};

/// How long a client waits for a daemon it started to listen.
const START_DEADLINE: Duration = Duration::from_secs(15);

/// A JSON-RPC error the daemon answered with.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct RpcError {
    /// The code.
    pub code: i64,
    /// The message, for people.
    pub message: String,
}

/// How to start a daemon when none runs.
#[derive(Clone, Debug, Default)]
pub struct SpawnOptions {
    /// Flags passed before `serve` (`--base-url`, `--model`).
    pub global_args: Vec<String>,
}

/// Connects to the daemon of `home`, starting one when none listens.
pub async fn connect_or_start(home: &Path, spawn: &SpawnOptions) -> anyhow::Result<UnixStream> {
    let socket = home.join(SOCKET_FILE);
    if let Ok(stream) = UnixStream::connect(&socket).await {
        return Ok(stream);
    }
    prepare_home(home)?;
    let log_path = home.join(LOG_FILE);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("opening {}", log_path.display()))?;
    let exe = std::env::current_exe().context("finding the dsh binary")?;
    let idle = std::env::var("DSH_DAEMON_IDLE_EXIT").unwrap_or_else(|_| "30".to_owned());
    let mut command = tokio::process::Command::new(exe);
    command
        .arg("--home")
        .arg(home)
        .args(&spawn.global_args)
        .args(["serve", "--idle-exit", &idle])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        // Its own process group: a Ctrl-C in the terminal that started it does not stop it.
        .process_group(0)
        .kill_on_drop(false);
    let mut child = command.spawn().context("starting the dsh daemon")?;
    let started = tokio::time::Instant::now();
    loop {
        if let Ok(stream) = UnixStream::connect(&socket).await {
            return Ok(stream);
        }
        if let Ok(Some(status)) = child.try_wait() {
            // Another client may have started one at the same time: its socket wins.
            tokio::time::sleep(Duration::from_millis(100)).await;
            if let Ok(stream) = UnixStream::connect(&socket).await {
                return Ok(stream);
            }
            bail!(
                "the dsh daemon exited ({status}) before listening; its log {} ends with:\n{}",
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

fn tail(path: &PathBuf, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

type Pending = Arc<std::sync::Mutex<HashMap<u64, oneshot::Sender<Result<Value, RpcError>>>>>;

/// A JSON-RPC connection to the daemon.
pub struct Client {
    writer: Mutex<OwnedWriteHalf>,
    pending: Pending,
    next_id: AtomicU64,
}

/// A `session/event` notification: the subscription id and its result.
pub type Notification = (Value, Value);

impl Client {
    /// Wraps a connected stream; notifications arrive on the returned receiver.
    pub fn new(stream: UnixStream) -> (Client, mpsc::Receiver<Notification>) {
        let (reader, writer) = stream.into_split();
        let pending: Pending = Arc::default();
        let (notify, notifications) = mpsc::channel(4096);
        let routes = Arc::clone(&pending);
        tokio::spawn(async move {
            let mut lines = BufReader::new(reader).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let Ok(message) = serde_json::from_str::<Value>(&line) else { continue };
                if let Some(id) = message.get("id").and_then(Value::as_u64) {
                    let sender = routes
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .remove(&id);
                    if let Some(sender) = sender {
                        let _ = sender.send(response(message));
                    }
                } else if message.get("method").is_some() {
                    let params = message.get("params").cloned().unwrap_or_default();
                    let subscription = params.get("subscription").cloned().unwrap_or_default();
                    let result = params.get("result").cloned().unwrap_or_default();
                    if notify.send((subscription, result)).await.is_err() {
                        // Nobody listens for notifications: keep routing responses.
                    }
                }
            }
            // The daemon closed the connection: fail whatever still waits.
            let mut routes = routes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            for (_, sender) in routes.drain() {
                let _ = sender.send(Err(RpcError {
                    code: -1,
                    message: "the daemon closed the connection".to_owned(),
                }));
            }
        });
        (Client { writer: Mutex::new(writer), pending, next_id: AtomicU64::new(1) }, notifications)
    }

    /// Calls `method` and waits for its result.
    pub async fn call<P: Serialize, R: DeserializeOwned>(
        &self,
        method: &str,
        params: P,
    ) -> anyhow::Result<R> {
        let value = self.call_value(method, serde_json::to_value(params)?).await?;
        serde_json::from_value(value).with_context(|| format!("reading the answer to {method}"))
    }

    /// Calls `method` with raw params.
    pub async fn call_value(&self, method: &str, params: Value) -> anyhow::Result<Value> {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (sender, answer) = oneshot::channel();
        self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(id, sender);
        let mut line =
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        line.push('\n');
        {
            let mut writer = self.writer.lock().await;
            writer.write_all(line.as_bytes()).await.context("writing to the daemon")?;
        }
        match answer.await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(error.into()),
            Err(_) => bail!("the daemon closed the connection"),
        }
    }
}

fn response(message: Value) -> Result<Value, RpcError> {
    if let Some(error) = message.get("error") {
        return Err(RpcError {
            code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("unknown error")
                .to_owned(),
        });
    }
    Ok(message.get("result").cloned().unwrap_or_default())
}
