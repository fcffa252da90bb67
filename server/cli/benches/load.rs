//! Load benchmark of the daemon, printed as plain figures: 8 clients × 4 sessions running turns
//! concurrently against the mock provider, through a real `dsh serve` process, each client the
//! project's typed client (`dsh_daemon::Client`).
//!
//! - **Events lost**: every session has two subscribers (its own client and the next one);
//!   each subscription must deliver the session's whole log, seq 0 to the end, with no gap and
//!   no duplicate. Lost = Σ (log length − distinct seqs delivered) + gaps + duplicates.
//! - **Added latency, mock chunk → subscribed client**: the daemon reaches the mock through a
//!   byte-forwarding TCP proxy inside this process. The proxy timestamps every SSE `data:` frame
//!   the moment it has handed the frame to the daemon's socket, keyed by the assistant text
//!   streamed so far in that response (each turn's text starts with a unique tag). A client,
//!   also in this process, timestamps each `assistant/chunk` text event when its line arrives
//!   and looks up the same key (the text so far in that session's step). The difference — one
//!   monotonic clock — is what the daemon adds: parse the SSE frame, append the event to the
//!   log (owner task), broadcast it, serialize the notification, write it to the socket. A
//!   second, coarser figure uses the event's logged `time` (Unix ms, stamped by the daemon)
//!   against the wall clock at arrival: the owner-append → client part alone.
//! - **Peak daemon memory**: `VmHWM` of the daemon process (`/proc/PID/status`), before the
//!   load and after it.
//!
//! Run with `cargo bench -p dsh --bench load` (release build of both this and `dsh`).
//! `DSH_BENCH_TURNS` sets the turns per session (default 5), `DSH_BENCH_CHUNK_DELAY_MS` the
//! mock's pause between frames (default 2).
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dsh_daemon::client::subscription_of;
use dsh_daemon::{ClientError, Unsolicited};
use dsh_protocol::method::{self, Method};
use dsh_protocol::{
    NoParams, SessionCreateParams, SessionEventsParams, SessionPromptParams,
    SessionSubscribeParams, StopReason,
};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const CLIENTS: usize = 8;
const SESSIONS_PER_CLIENT: usize = 4;
const DEADLINE: Duration = Duration::from_secs(600);

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(run());
}

/// When the proxy handed each frame to the daemon, by the text streamed so far.
type FrameTimes = Arc<Mutex<HashMap<String, Instant>>>;

async fn run() {
    let turns: usize =
        std::env::var("DSH_BENCH_TURNS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let delay: u64 =
        std::env::var("DSH_BENCH_CHUNK_DELAY_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(2);
    let mut config = dsh_mock::MockConfig::default();
    config.stream.inter_chunk_delay_ms = delay;
    config.keys[0].concurrency = 256;
    let mock = dsh_mock::MockServer::start(config).await.unwrap();
    let frames: FrameTimes = Arc::default();
    let proxy = start_proxy(mock.addr(), Arc::clone(&frames)).await;

    let temp = tempfile::tempdir().unwrap();
    let root = temp.path().canonicalize().unwrap();
    let home = root.join("home");
    let workspace = root.join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let mut daemon = spawn_daemon(&home, &format!("http://{proxy}")).await;

    let clients: Vec<Arc<Client>> = {
        let mut clients = Vec::new();
        for _ in 0..CLIENTS {
            clients.push(Client::connect(&dsh_daemon::startup::DshHome::new(&home).socket()).await);
        }
        clients
    };
    let status = clients[0].call::<method::DaemonStatus>(NoParams {}).await.unwrap();
    let pid = status.pid;
    let idle_hwm = vm_kib(pid, "VmHWM");

    // Each client creates its sessions; every session is watched by its client and the next.
    let mut sessions: Vec<Vec<String>> = Vec::new();
    for client in &clients {
        let mut mine = Vec::new();
        for _ in 0..SESSIONS_PER_CLIENT {
            let params = SessionCreateParams {
                workspace: workspace.display().to_string(),
                model: None,
                config: None,
                mcp_servers: None,
                images: None,
            };
            let created = client.call::<method::SessionCreate>(params).await.unwrap();
            mine.push(created.session_id);
        }
        sessions.push(mine);
    }
    let mut subscriptions: Vec<(usize, String, String)> = Vec::new(); // (client, session, sub)
    for (index, client) in clients.iter().enumerate() {
        for owner in [index, (index + 1) % CLIENTS] {
            for session in &sessions[owner] {
                let params =
                    SessionSubscribeParams { session_id: session.clone(), from_seq: Some(0) };
                let sub = client.call::<method::SessionSubscribe>(params).await.unwrap();
                subscriptions.push((index, session.clone(), sub.to_string()));
            }
        }
    }

    let words = "the quick brown fox jumps over the lazy dog while the daemon streams every \
                 chunk to each subscriber and logs it first so that nothing is lost on the way \
                 and the latency stays small even when many sessions run at once";
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (index, client) in clients.iter().enumerate() {
        for (slot, session) in sessions[index].iter().enumerate() {
            let client = Arc::clone(client);
            let session = session.clone();
            tasks.push(tokio::spawn(async move {
                let mut outcomes = Vec::new();
                for turn in 0..turns {
                    let tag = format!("T{index}x{slot}x{turn}Z");
                    let text = format!("go [[fake:say {tag} {words}]]");
                    let params = SessionPromptParams {
                        session_id: session.clone(),
                        text,
                        when_busy: None,
                        limits: None,
                        output_schema: None,
                        attachments: Vec::new(),
                    };
                    let answer = client.call::<method::SessionPrompt>(params).await;
                    outcomes.push(answer);
                }
                outcomes
            }));
        }
    }
    let mut failed = 0;
    for task in tasks {
        for outcome in tokio::time::timeout(DEADLINE, task).await.unwrap().unwrap() {
            match outcome {
                Ok(result) if result.stop_reason == StopReason::Completed => {}
                other => {
                    failed += 1;
                    println!("turn failed: {other:?}");
                }
            }
        }
    }
    let elapsed = started.elapsed();
    let loaded_hwm = vm_kib(pid, "VmHWM");
    let loaded_rss = vm_kib(pid, "VmRSS");

    // Every subscription must deliver the whole log: wait until each has its last event.
    let mut lengths: HashMap<String, u64> = HashMap::new();
    for (index, mine) in sessions.iter().enumerate() {
        for session in mine {
            let params = SessionEventsParams { session_id: session.clone(), from_seq: 0, limit: 0 };
            let page = clients[index].call::<method::SessionEvents>(params).await.unwrap();
            lengths.insert(session.clone(), page.length);
        }
    }
    let (mut lost, mut delivered, mut gaps, mut duplicates) = (0u64, 0u64, 0u64, 0u64);
    for (index, session, sub) in &subscriptions {
        let length = lengths[session];
        let client = &clients[*index];
        client.wait_for(sub, length).await;
        let events = client.events(sub);
        delivered += events.len() as u64;
        let mut seen = std::collections::HashSet::new();
        let mut previous: Option<u64> = None;
        for event in &events {
            let seq = event.value["seq"].as_u64().unwrap();
            if !seen.insert(seq) {
                duplicates += 1;
            }
            if let Some(previous) = previous
                && seq != previous + 1
            {
                gaps += 1;
            }
            previous = Some(seq);
        }
        lost += length.saturating_sub(seen.len() as u64);
    }

    // Latency: mock frame handed to the daemon → notification line at a client.
    let frames = frames.lock().unwrap().clone();
    let mut added: Vec<Duration> = Vec::new();
    let mut stamped: Vec<f64> = Vec::new();
    let mut unmatched = 0u64;
    for (index, _, sub) in &subscriptions {
        let mut text: HashMap<u64, String> = HashMap::new();
        for event in clients[*index].events(sub) {
            let value = &event.value;
            if value["type"] != "assistant/chunk" || value["data"]["delta"]["kind"] != "text" {
                continue;
            }
            let step = value["data"]["step"].as_u64().unwrap();
            let so_far = text.entry(step).or_default();
            so_far.push_str(value["data"]["delta"]["text"].as_str().unwrap());
            let wall = event.wall_ms - value["time"].as_u64().unwrap() as f64;
            stamped.push(wall);
            // Keys shorter than a tag could belong to any session.
            if so_far.len() < 8 {
                continue;
            }
            match frames.get(so_far.as_str()) {
                Some(sent) => added.push(event.at.saturating_duration_since(*sent)),
                None => unmatched += 1,
            }
        }
    }
    added.sort();
    stamped.sort_by(f64::total_cmp);

    let total_turns = CLIENTS * SESSIONS_PER_CLIENT * turns;
    println!(
        "dsh daemon load: {CLIENTS} clients × {SESSIONS_PER_CLIENT} sessions, {turns} turns each"
    );
    println!("  mock inter-chunk delay         {delay} ms");
    println!("  turns                          {total_turns} ({failed} failed) in {elapsed:.2?}");
    println!("  subscriptions                  {} (2 per session)", subscriptions.len());
    println!("  events delivered               {delivered}");
    println!("  events lost                    {lost} (gaps {gaps}, duplicates {duplicates})");
    println!(
        "  delivery rate                  {:.0} events/s",
        delivered as f64 / elapsed.as_secs_f64()
    );
    println!(
        "  added latency, mock frame → client (n={}, unmatched {unmatched}): p50 {:.2?} p90 {:.2?} p99 {:.2?} max {:.2?}",
        added.len(),
        percentile(&added, 0.50),
        percentile(&added, 0.90),
        percentile(&added, 0.99),
        added.last().copied().unwrap_or_default()
    );
    println!(
        "  logged time → client (ms, 1 ms resolution, n={}): p50 {:.1} p99 {:.1}",
        stamped.len(),
        percentile_f(&stamped, 0.50),
        percentile_f(&stamped, 0.99)
    );
    println!("  daemon VmHWM idle               {} KiB", idle_hwm);
    println!("  daemon VmHWM after the load     {} KiB (VmRSS {} KiB)", loaded_hwm, loaded_rss);

    clients[0].call::<method::DaemonShutdown>(NoParams {}).await.unwrap();
    let status = tokio::time::timeout(DEADLINE, daemon.wait()).await.unwrap().unwrap();
    assert!(status.success(), "the daemon exited with {status}");
    assert_eq!(lost + gaps + duplicates, 0, "events were lost");
    assert_eq!(failed, 0, "turns failed");
    mock.shutdown().await;
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn percentile_f(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn vm_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
        .unwrap_or(0)
}

async fn spawn_daemon(home: &Path, base_url: &str) -> tokio::process::Child {
    let log = std::fs::File::create(dsh_daemon::startup::DshHome::new(home).daemon_log()).unwrap();
    let child = tokio::process::Command::new(dsh_binary())
        .arg("--home")
        .arg(home)
        .args(["--base-url", base_url, "serve"])
        .env("DEEPSEEK_API_KEY", "sk-test")
        .env_remove("DSH_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let started = Instant::now();
    while tokio::net::UnixStream::connect(dsh_daemon::startup::DshHome::new(home).socket())
        .await
        .is_err()
    {
        assert!(started.elapsed() < Duration::from_secs(30), "the daemon did not listen");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    child
}

fn dsh_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_dsh"))
}

/// A TCP proxy to the mock that timestamps every SSE frame it forwards to the daemon.
async fn start_proxy(mock: std::net::SocketAddr, frames: FrameTimes) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((daemon_side, _)) = listener.accept().await {
            let frames = Arc::clone(&frames);
            tokio::spawn(async move {
                let Ok(mock_side) = TcpStream::connect(mock).await else { return };
                daemon_side.set_nodelay(true).ok();
                mock_side.set_nodelay(true).ok();
                let (mut from_daemon, mut to_daemon) = daemon_side.into_split();
                let (mut from_mock, mut to_mock) = mock_side.into_split();
                let upstream = tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut from_daemon, &mut to_mock).await;
                    let _ = to_mock.shutdown().await;
                });
                let mut buffer = vec![0u8; 64 * 1024];
                let mut pending = Vec::new();
                let mut text = String::new();
                while let Ok(read) = from_mock.read(&mut buffer).await {
                    if read == 0 {
                        break;
                    }
                    if to_daemon.write_all(&buffer[..read]).await.is_err() {
                        break;
                    }
                    let at = Instant::now();
                    pending.extend_from_slice(&buffer[..read]);
                    while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                        let line: Vec<u8> = pending.drain(..=end).collect();
                        let line = String::from_utf8_lossy(&line);
                        let Some(data) = line.trim().strip_prefix("data: ") else { continue };
                        let Ok(frame) = serde_json::from_str::<Value>(data) else { continue };
                        let choice = &frame["choices"][0];
                        if let Some(piece) = choice["delta"]["content"].as_str()
                            && !piece.is_empty()
                        {
                            text.push_str(piece);
                            frames.lock().unwrap().entry(text.clone()).or_insert(at);
                        }
                        if !choice["finish_reason"].is_null() {
                            text.clear();
                        }
                    }
                }
                upstream.abort();
            });
        }
    });
    addr
}

/// A notification and when it arrived.
#[derive(Clone)]
struct Received {
    value: Value,
    at: Instant,
    wall_ms: f64,
}

/// The project's typed client, with a task that timestamps every `session/event` as it comes
/// off the connection.
struct Client {
    client: dsh_daemon::Client,
    events: Arc<Mutex<HashMap<String, Vec<Received>>>>,
}

impl Client {
    async fn connect(socket: &Path) -> Arc<Client> {
        let (client, mut unsolicited) = dsh_daemon::Client::connect(socket).await.unwrap();
        let events: Arc<Mutex<HashMap<String, Vec<Received>>>> = Arc::default();
        let inbox = Arc::clone(&events);
        tokio::spawn(async move {
            while let Some(message) = unsolicited.recv().await {
                let at = Instant::now();
                let wall_ms =
                    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64() * 1000.0;
                let Unsolicited::Notification(notification) = message else { continue };
                let Some(params) = subscription_of(&notification) else { continue };
                let value: Value = serde_json::from_str(params.result.get()).unwrap();
                let key = params.subscription.to_string();
                inbox.lock().unwrap().entry(key).or_default().push(Received { value, at, wall_ms });
            }
        });
        client.initialize("load-bench").await.unwrap();
        Arc::new(Client { client, events })
    }

    async fn call<M: Method>(&self, params: M::Params) -> Result<M::Result, ClientError> {
        tokio::time::timeout(DEADLINE, self.client.call::<M>(params)).await.unwrap()
    }

    fn events(&self, sub: &str) -> Vec<Received> {
        self.events.lock().unwrap().get(sub).cloned().unwrap_or_default()
    }

    /// Waits until subscription `sub` has delivered an event with seq `length - 1`.
    async fn wait_for(&self, sub: &str, length: u64) {
        let started = Instant::now();
        loop {
            let done = self.events.lock().unwrap().get(sub).is_some_and(|events| {
                events.iter().any(|e| e.value["seq"].as_u64() == Some(length - 1))
            });
            if done {
                return;
            }
            if started.elapsed() > Duration::from_secs(30) {
                println!("subscription {sub} never delivered seq {}", length - 1);
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
