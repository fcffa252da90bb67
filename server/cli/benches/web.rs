//! The browser viewer on a long session, printed as plain figures: a 2,000-step session is
//! written with the store's writer (the fixture the other benches use, a header change every
//! 97 steps), then — against one real daemon — the time of `dsh usage` on it beside the time
//! to first render of its page in headless Chromium (`web/test/bench.mjs`: the chart of every
//! step and the first screen of the transcript, from navigation to both drawn). Each figure is
//! the median of five runs after one that loads the session.
//!
//! `cargo bench -p dsh --bench web` (needs `node`, the web/ npm packages and `/usr/bin/chromium`:
//! `web/scripts/test.sh` installs them and runs this bench in the dev profile).
//! `DSH_BENCH_STEPS` (default 2000) changes the size.
#![allow(clippy::print_stdout, clippy::print_stderr, clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)]
#[path = "../../store/tests/store/fixture.rs"]
mod fixture;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use dsh_store::{DshHome, SessionId, SyncPolicy};
use fixture::{Shape, session_events};

const DSH: &str = env!("CARGO_BIN_EXE_dsh");
const RUNS: usize = 5;

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn dsh(home: &Path, args: &[&str]) -> std::process::Output {
    let output = Command::new(DSH)
        .arg("--home")
        .arg(home)
        .args(args)
        .env("DEEPSEEK_API_KEY", "sk-bench")
        .env_remove("DSH_HOME")
        .output()
        .expect("running dsh");
    assert!(output.status.success(), "dsh {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    output
}

fn main() {
    let steps: u64 =
        std::env::var("DSH_BENCH_STEPS").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
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
    let id = SessionId::parse("bench-web").unwrap();
    let mut log = workspace.create_session(&id, SyncPolicy::Never).unwrap();
    let events = session_events(shape);
    for data in &events {
        log.append(data.clone()).unwrap();
    }
    let bytes = log.len_bytes();
    drop(log);
    println!(
        "dsh web bench: one session of {steps} steps, {} events, {:.1} MB",
        events.len(),
        bytes as f64 / 1e6
    );

    // The daemon `dsh web` starts serves both.
    let url = String::from_utf8(dsh(&home_dir, &["web", "--no-open"]).stdout).unwrap();
    let cold = Instant::now();
    dsh(&home_dir, &["usage", "bench-web"]);
    let cold = cold.elapsed();
    let usage = median(
        (0..RUNS)
            .map(|_| {
                let started = Instant::now();
                dsh(&home_dir, &["usage", "bench-web"]);
                started.elapsed()
            })
            .collect(),
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../web/test/bench.mjs");
    let page = Command::new("node")
        .env("DSH_BIN", DSH)
        .arg(script)
        .arg(url.trim())
        .arg("bench-web")
        .arg(steps.to_string())
        .arg(RUNS.to_string())
        .output();
    dsh(&home_dir, &["shutdown"]);
    let page = match page {
        Ok(output) if output.status.success() => output,
        Ok(output) => {
            eprintln!("web/test/bench.mjs failed: {}", String::from_utf8_lossy(&output.stderr));
            std::process::exit(1);
        }
        Err(error) => {
            eprintln!("SKIPPED: the page's time (node: {error})");
            std::process::exit(1);
        }
    };
    let page_ms: f64 = String::from_utf8_lossy(&page.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("median_ms ")?.trim().parse().ok())
        .expect("bench.mjs prints `median_ms N`");
    print!(
        "{}",
        String::from_utf8_lossy(&page.stdout)
            .lines()
            .filter(|l| !l.starts_with("median_ms"))
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    );
    println!(
        "dsh usage (warm, median of {RUNS}): {:.0} ms (the first, loading the session: {:.0} ms)",
        usage.as_secs_f64() * 1e3,
        cold.as_secs_f64() * 1e3
    );
    println!(
        "page first render (chart of {steps} steps + first screen of transcript, median of {RUNS}): {page_ms:.0} ms = {:.2} × dsh usage",
        page_ms / (usage.as_secs_f64() * 1e3)
    );
}
