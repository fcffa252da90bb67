//! The per-command cost of the sandbox, printed as plain figures: `sh -c true` started the way
//! `run_command` starts it — unconfined (the built environment, nothing else), then through
//! `dsh sandbox-exec` in each mode this machine supports (everything; Landlock only; namespaces
//! only) — spawned and waited for, one at a time. Prints the mean, median and 95th percentile
//! of each and the ratio of each confined mean to the unconfined one.
//!
//! Run with `cargo bench -p dsh --bench sandbox` (a release build of `dsh`, which is the
//! helper). `DSH_BENCH_SPAWNS` sets the spawns per mode (default 200).
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_sandbox::{CommandSandbox, Feature, Sandbox, SandboxConfig};

fn main() {
    let spawns: usize =
        std::env::var("DSH_BENCH_SPAWNS").ok().and_then(|v| v.parse().ok()).unwrap_or(200);
    let helper = PathBuf::from(env!("CARGO_BIN_EXE_dsh"));
    let scratch = tempfile::tempdir().unwrap();
    let workspace = scratch.path().join("workspace");
    let state = scratch.path().join("state");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    let workspace = workspace.canonicalize().unwrap();

    let sandbox = |without: &[Feature]| {
        let config =
            SandboxConfig { without: without.iter().copied().collect(), ..Default::default() };
        Arc::new(Sandbox::new(config, Some(helper.clone()), vec![state.clone()]))
    };
    let full = sandbox(&[]);
    let support = full.support();
    println!(
        "sandbox spawn benchmark: {spawns} spawns of `sh -c true` per mode; landlock: {}; user namespaces: {}",
        support.landlock.detail, support.userns.detail
    );
    let unconfined = measure(&full.session(&workspace).unwrap(), true, spawns);
    report("unconfined (built environment)", &unconfined, None);
    let modes: [(&str, &[Feature]); 3] = [
        ("confined: landlock + namespaces", &[]),
        ("confined: landlock only", &[Feature::Userns]),
        ("confined: namespaces only", &[Feature::Landlock]),
    ];
    for (name, without) in modes {
        let sandbox = sandbox(without);
        let session = sandbox.session(&workspace).unwrap();
        if !session.confines() {
            println!("{name:<34} not available here");
            continue;
        }
        let times = measure(&session, false, spawns);
        report(name, &times, Some(mean(&unconfined)));
    }
}

/// Spawns and waits for `sh -c true` `spawns` times (after a few warm-up runs).
fn measure(session: &CommandSandbox, unconfined: bool, spawns: usize) -> Vec<Duration> {
    let run = || {
        let started = Instant::now();
        let status = session
            .shell("true", unconfined)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "`sh -c true` failed ({status})");
        started.elapsed()
    };
    for _ in 0..5 {
        run();
    }
    (0..spawns).map(|_| run()).collect()
}

fn mean(times: &[Duration]) -> Duration {
    times.iter().sum::<Duration>() / u32::try_from(times.len().max(1)).unwrap()
}

fn report(name: &str, times: &[Duration], baseline: Option<Duration>) {
    let mut sorted = times.to_vec();
    sorted.sort();
    let median = sorted[sorted.len() / 2];
    let p95 = sorted[(sorted.len() * 95 / 100).min(sorted.len() - 1)];
    let mean = mean(times);
    let ratio = baseline
        .map(|baseline| format!("  ratio {:.1}×", mean.as_secs_f64() / baseline.as_secs_f64()))
        .unwrap_or_default();
    println!(
        "{name:<34} mean {:>7.2} ms  median {:>7.2} ms  p95 {:>7.2} ms{ratio}",
        ms(mean),
        ms(median),
        ms(p95)
    );
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
