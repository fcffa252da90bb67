//! The harness overhead of a `task` call, printed beside a plain tool call's: a real `dsh serve`
//! against the in-process mock, each figure the mean over `DSH_BENCH_RUNS` turns (default 30).
//!
//! - **plain tool call**: `read_file` of a small file — from its `tool/call` to its
//!   `tool/result` (deciding, running and logging the call).
//! - **task call**: a `fresh` child whose model answers at once — from the parent's `tool/call`
//!   to the child's first `request/sent`: creating the child session (its log, its
//!   registration, its `task/spawn` in the parent), starting its turn and assembling and
//!   logging its first request. The provider's time is in neither figure.
//! - **task call, fork**: the same for a `fork` child (the parent's log copied up to the step's
//!   boundary).
//!
//! Times are the daemon's logged event times (milliseconds), so a single figure is coarse; the
//! means over the runs are what is printed. Run with `cargo bench -p dsh --bench subagents`.
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use dsh_protocol::method;
use dsh_protocol::{
    EventData, SessionCreateParams, SessionEventsParams, SessionPromptParams, StopReason,
};
use serde_json::json;

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(run());
}

async fn run() {
    let runs: usize =
        std::env::var("DSH_BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(30);
    let mut config = dsh_mock::MockConfig::default();
    config.stream.inter_chunk_delay_ms = 0;
    let mock = dsh_mock::MockServer::start(config).await.unwrap();
    let temp = tempfile::tempdir().unwrap();
    let root = temp.path().canonicalize().unwrap();
    let home = root.join("home");
    let workspace = root.join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("a.txt"), "alpha\n").unwrap();
    std::fs::create_dir_all(&home).unwrap();
    std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let mut daemon = spawn_daemon(&home, &mock.base_url()).await;
    let socket = dsh_daemon::startup::DshHome::new(&home).socket();
    let (client, _unsolicited) = dsh_daemon::Client::connect(&socket).await.unwrap();

    let mut plain = Vec::new();
    let mut fresh = Vec::new();
    let mut fork = Vec::new();
    for run in 0..runs {
        // A plain tool call.
        let marker = format!("PLAIN{run}");
        mock.script(json!([
            when(
                &marker,
                json!({"reasoning": "Read.", "tool_calls": [
                    {"name": "read_file", "arguments": json!({"path": "a.txt"}).to_string()}
                ]})
            ),
            when(&marker, json!({"reasoning": "Done.", "content": "ok"})),
        ]))
        .unwrap();
        let session = turn(&client, &workspace, &marker).await;
        let logged = events(&client, &session).await;
        let call = time_of(&logged, |data| matches!(data, EventData::ToolCall(_)));
        let result = time_of(&logged, |data| matches!(data, EventData::ToolResult(_)));
        plain.push(result - call);

        for (context, into) in [("fresh", &mut fresh), ("fork", &mut fork)] {
            let marker = format!("TASK{context}{run}");
            let child = format!("CHILD{context}{run}");
            let arguments =
                json!({"description": "answer", "prompt": child, "context": context}).to_string();
            mock.script(json!([
                when(
                    &marker,
                    json!({"reasoning": "Delegate.", "tool_calls": [
                        {"name": "task", "arguments": arguments}
                    ]})
                ),
                when(&child, json!({"reasoning": "Answer.", "content": "the answer"})),
                when(&marker, json!({"reasoning": "Done.", "content": "ok"})),
            ]))
            .unwrap();
            let session = turn(&client, &workspace, &marker).await;
            let parent = events(&client, &session).await;
            let call = time_of(&parent, |data| matches!(data, EventData::ToolCall(_)));
            let spawned = parent
                .iter()
                .find_map(|data| match data.1 {
                    EventData::TaskSpawn(ref spawn) => Some(spawn.session_id.clone()),
                    _ => None,
                })
                .unwrap();
            let child = events(&client, &spawned).await;
            let sent = time_of(&child, |data| matches!(data, EventData::RequestSent(_)));
            into.push(sent - call);
        }
    }
    let _ = daemon.kill().await;

    let mean = |figures: &[u64]| figures.iter().sum::<u64>() as f64 / figures.len() as f64;
    let (plain, fresh, fork) = (mean(&plain), mean(&fresh), mean(&fork));
    println!("sub-agents: harness overhead per call, mean of {runs} turns (logged times, ms)");
    println!("  plain tool call (read_file, tool/call → tool/result):        {plain:>7.2} ms");
    println!("  task call, fresh (tool/call → the child's first request):   {fresh:>7.2} ms");
    println!("  task call, fork  (tool/call → the child's first request):   {fork:>7.2} ms");
    if plain > 0.0 {
        println!("  ratio task/plain: fresh {:.1}×, fork {:.1}×", fresh / plain, fork / plain);
    }
}

/// A script answering only requests whose last user message contains `marker`.
fn when(marker: &str, mut reply: serde_json::Value) -> serde_json::Value {
    reply["match"] = json!({"last_user_contains": marker});
    reply
}

/// Runs one turn of a new session for `text`; its id.
async fn turn(client: &dsh_daemon::Client, workspace: &Path, text: &str) -> String {
    let params = SessionCreateParams {
        workspace: workspace.display().to_string(),
        model: None,
        config: None,
        mcp_servers: None,
        images: None,
    };
    let session = client.call::<method::SessionCreate>(params).await.unwrap().session_id;
    let params = SessionPromptParams {
        session_id: session.clone(),
        text: text.to_owned(),
        when_busy: None,
        limits: None,
        output_schema: None,
        attachments: Vec::new(),
    };
    let result = client.call::<method::SessionPrompt>(params).await.unwrap();
    assert_eq!(result.stop_reason, StopReason::Completed, "{result:?}");
    session
}

/// The session's events: (time, data).
async fn events(client: &dsh_daemon::Client, session: &str) -> Vec<(u64, EventData)> {
    let params = SessionEventsParams { session_id: session.to_owned(), from_seq: 0, limit: 10_000 };
    let page = client.call::<method::SessionEvents>(params).await.unwrap();
    page.events.into_iter().map(|event| (event.event.time, event.event.data)).collect()
}

fn time_of(events: &[(u64, EventData)], what: impl Fn(&EventData) -> bool) -> u64 {
    events.iter().find(|(_, data)| what(data)).map(|(time, _)| *time).unwrap()
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
