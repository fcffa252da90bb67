//! Daemon memory with many sessions touched, printed as plain figures: 100 sessions of 1,000
//! steps each are written, then a real `dsh serve` is asked for each one's usage (which loads
//! it), once with unloading off (every session stays loaded, as before idle sessions were
//! unloaded) and once with a loaded-log budget of 64 MiB (idle sessions unloaded, least recently
//! used first). Figures: the daemon's VmRSS after all 100 were touched, and its peak (VmHWM).
//!
//! `cargo bench -p dsh --bench sessions`. `DSH_BENCH_SESSIONS` (default 100) and
//! `DSH_BENCH_STEPS` (default 1000) change the size.
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)]
#[path = "../../store/tests/store/fixture.rs"]
mod fixture;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use dsh_daemon::Client;
use dsh_protocol::method;
use dsh_protocol::{NoParams, SessionParams};
use dsh_store::{DshHome, SessionId, SyncPolicy};
use fixture::{Shape, session_events};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn vm_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|line| line.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(run());
}

async fn run() {
    let sessions = env_u64("DSH_BENCH_SESSIONS", 100);
    let steps = env_u64("DSH_BENCH_STEPS", 1000).max(10);
    let temp = tempfile::tempdir().unwrap();
    let root = temp.path().canonicalize().unwrap();
    let project = root.join("project");
    std::fs::create_dir(&project).unwrap();
    let home_dir = root.join("home");
    let home = DshHome::new(&home_dir);
    let workspace = home.workspace(&project).unwrap();
    let shape = Shape {
        turns: steps / 10,
        steps_per_turn: 10,
        chunks_per_step: 4,
        chunk_bytes: 48,
        tool_result_bytes: 1_000,
        delta_every: 97,
    };
    let started = Instant::now();
    let stream = session_events(shape);
    let mut ids = Vec::new();
    let mut bytes = 0;
    for n in 0..sessions {
        let id = SessionId::parse(&format!("bench-{n:04}")).unwrap();
        let mut log = workspace.create_session(&id, SyncPolicy::Never).unwrap();
        for data in &stream {
            log.append(data.clone()).unwrap();
        }
        bytes += log.len_bytes();
        ids.push(id.to_string());
    }
    println!(
        "dsh sessions bench: {sessions} sessions × {steps} steps ({:.1} MB of logs) written in {:.1} s",
        bytes as f64 / 1e6,
        started.elapsed().as_secs_f64()
    );
    for (label, flags) in [
        ("unloading off", ["--unload-after", "525600", "--loaded-budget", "1000000"]),
        ("loaded budget 64 MiB", ["--unload-after", "10", "--loaded-budget", "64"]),
    ] {
        let (rss, hwm, loaded) = touch_all(&home_dir, &ids, &flags).await;
        println!(
            "  {label:<22} VmRSS after touching all {} KiB, peak VmHWM {} KiB, sessions still loaded {loaded}",
            rss, hwm
        );
    }
}

/// Starts `dsh serve FLAGS`, asks for every session's usage, and returns the daemon's VmRSS and
/// VmHWM (KiB) and how many sessions it holds afterwards.
async fn touch_all(home: &Path, ids: &[String], flags: &[&str]) -> (u64, u64, usize) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_dsh"))
        .arg("--home")
        .arg(home)
        .args(["--base-url", "http://127.0.0.1:9", "serve"])
        .args(flags)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let socket = DshHome::new(home).socket();
    let started = Instant::now();
    let (client, _) = loop {
        if let Ok(connected) = Client::connect(&socket).await {
            break connected;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "the daemon did not listen");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    client.initialize("sessions-bench").await.unwrap();
    for id in ids {
        let usage =
            client.call::<method::SessionUsage>(SessionParams { session_id: id.clone() }).await;
        assert!(!usage.unwrap().rows.is_empty());
    }
    // Let the unloader run (it checks every few seconds at most).
    tokio::time::sleep(Duration::from_secs(6)).await;
    let status = client.call::<method::DaemonStatus>(NoParams {}).await.unwrap();
    let pid = status.pid;
    let (rss, hwm) = (vm_kib(pid, "VmRSS"), vm_kib(pid, "VmHWM"));
    client.call::<method::DaemonShutdown>(NoParams {}).await.unwrap();
    drop(client);
    let _ = tokio::time::timeout(Duration::from_secs(30), child.wait()).await;
    (rss, hwm, status.sessions.len())
}
