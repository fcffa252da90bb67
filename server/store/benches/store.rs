//! Store benchmark: builds a synthetic session log (~100 MB, 2,000 steps by default) in a
//! temporary directory and prints load + fold throughput, reconstruct latency of the first and
//! last step, and append throughput under each [`SyncPolicy`].
//!
//! `cargo bench -p dsh-store`. Environment: `DSH_BENCH_STEPS` (default 2000) shrinks the log;
//! `DSH_BENCH_APPEND_SECS` (default 8) bounds each synced append run; `DSH_BENCH_DIR` picks the
//! directory the temporary files go in (default: the system temp dir).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[allow(dead_code)]
#[path = "../tests/store/fixture.rs"]
mod fixture;

use std::time::{Duration, Instant};

use dsh_session::{EventData, GenerateRequest, Session, reconstruct};
use dsh_store::{DshHome, SessionId, SyncPolicy, Workspace, is_boundary, read_log};
use fixture::{Shape, session_events};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// The median of five runs of `run`, which returns the time it measured (what it sets up or
/// checks around that is not counted).
fn median_of_five(mut run: impl FnMut() -> Duration) -> Duration {
    median((0..5).map(|_| run()).collect())
}

/// How long `work` took.
fn timed(work: impl FnOnce()) -> Duration {
    let start = Instant::now();
    work();
    start.elapsed()
}

struct AppendRun {
    events: u64,
    bytes: u64,
    syncs: u64,
    elapsed: Duration,
}

/// Appends `stream` to a new session under `policy` until done or `budget` is spent.
fn append_run(
    workspace: &Workspace,
    name: &str,
    policy: SyncPolicy,
    stream: &[EventData],
    budget: Duration,
) -> AppendRun {
    let mut log = workspace.create_session(&SessionId::parse(name).unwrap(), policy).unwrap();
    let start_len = log.len_bytes();
    let start = Instant::now();
    let mut events = 0u64;
    let mut syncs = 0;
    for data in stream {
        let sync = match policy {
            SyncPolicy::Always => true,
            SyncPolicy::Boundaries => is_boundary(data),
            SyncPolicy::Never => false,
        };
        log.append(data.clone()).unwrap();
        events += 1;
        syncs += u64::from(sync);
        // Check the clock only now and then: `Instant::now` is cheap, but not free.
        if events.is_multiple_of(64) && start.elapsed() > budget {
            break;
        }
    }
    let elapsed = start.elapsed();
    AppendRun { events, bytes: log.len_bytes() - start_len, syncs, elapsed }
}

fn print_append(label: &str, run: &AppendRun) {
    let secs = run.elapsed.as_secs_f64();
    println!(
        "append {label:<11} {:>8} events {:>8.1} MB in {:>6.2} s: {:>10.0} events/s {:>8.1} MB/s ({} fdatasyncs, {:.0} syncs/s)",
        run.events,
        mb(run.bytes),
        secs,
        run.events as f64 / secs,
        mb(run.bytes) / secs,
        run.syncs,
        run.syncs as f64 / secs,
    );
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is accepted and ignored.
    let steps = env_u64("DSH_BENCH_STEPS", 2000).max(10);
    let budget = Duration::from_secs(env_u64("DSH_BENCH_APPEND_SECS", 8));
    let temp = match std::env::var_os("DSH_BENCH_DIR") {
        Some(dir) => tempfile::tempdir_in(dir).unwrap(),
        None => tempfile::tempdir().unwrap(),
    };
    let project = temp.path().join("project");
    std::fs::create_dir(&project).unwrap();
    let home = DshHome::new(temp.path().join("home"));
    let workspace = home.workspace(&project).unwrap();

    let shape = Shape {
        turns: steps / 10,
        steps_per_turn: 10,
        chunks_per_step: 160,
        chunk_bytes: 48,
        tool_result_bytes: 16_000,
        delta_every: 97,
    };
    let started = Instant::now();
    let stream = session_events(shape);
    println!(
        "dsh-store bench: {} steps, {} events generated in {:.2} s, files in {}",
        shape.turns * shape.steps_per_turn,
        stream.len() + 1,
        started.elapsed().as_secs_f64(),
        temp.path().display()
    );

    // 1. Write the whole log without syncing: the `Never` figure, and the log for the rest.
    let never = append_run(&workspace, "big", SyncPolicy::Never, &stream, Duration::MAX);
    print_append("Never", &never);
    let path = workspace.session_path(&SessionId::parse("big").unwrap());
    let size = std::fs::metadata(&path).unwrap().len();
    println!(
        "log: {:.1} MB, {} events, {:.0} bytes/event",
        mb(size),
        never.events + 1,
        size as f64 / (never.events + 1) as f64
    );

    // 2. Load + fold: read the file, decode every line, fold into a Session. Best of 3 (the file
    // is in the page cache after the first write, as it is for a session reopened soon after).
    let mut best = (Duration::MAX, Duration::ZERO, Duration::ZERO);
    let mut events = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        let read = read_log(&path).unwrap();
        let decoded = start.elapsed();
        // The fold consumes its events; copy them outside the timed region.
        let copy = read.events.clone();
        let fold_start = Instant::now();
        let session = Session::from_events(copy);
        let total = decoded + fold_start.elapsed();
        assert_eq!(session.last_step(), shape.turns * shape.steps_per_turn);
        if total < best.0 {
            best = (total, decoded, total - decoded);
        }
        events = read.events;
    }
    let (total, decoded, folded) = best;
    println!(
        "load+fold: {:.3} s = {:.1} MB/s (read+decode {:.3} s = {:.1} MB/s; fold {:.3} s)",
        total.as_secs_f64(),
        mb(size) / total.as_secs_f64(),
        decoded.as_secs_f64(),
        mb(size) / decoded.as_secs_f64(),
        folded.as_secs_f64(),
    );

    // 2b. The same file parsed into plain `serde_json::Value`s, line by line: what any JSON
    // reader pays, as a yardstick for load+fold.
    let mut parse_best = Duration::MAX;
    for _ in 0..3 {
        let start = Instant::now();
        let bytes = std::fs::read(&path).unwrap();
        let mut values = 0usize;
        for line in bytes.split(|b| *b == b'\n').filter(|line| !line.is_empty()) {
            let value: serde_json::Value = serde_json::from_slice(line).unwrap();
            std::hint::black_box(&value);
            values += 1;
        }
        assert_eq!(values as u64, never.events + 1);
        parse_best = parse_best.min(start.elapsed());
    }
    println!(
        "serde_json::Value parse of the same file: {:.3} s = {:.1} MB/s; load+fold takes {:.2}× that",
        parse_best.as_secs_f64(),
        mb(size) / parse_best.as_secs_f64(),
        total.as_secs_f64() / parse_best.as_secs_f64()
    );

    // 3. Reconstruct the first and the last step's request from the whole log.
    let last_step = shape.turns * shape.steps_per_turn;
    for step in [1, last_step] {
        let time = median_of_five(|| {
            timed(|| {
                std::hint::black_box(reconstruct(&events, step).unwrap());
            })
        });
        let request = reconstruct(&events, step).unwrap();
        println!(
            "reconstruct step {step:>5}: median {:>8.2} ms over 5 runs ({} messages)",
            time.as_secs_f64() * 1e3,
            request.messages.len()
        );
    }
    // 3b. What `session/request` does for the last step of a loaded session: rebuild it from
    // the session in memory (a fresh fold over the events that can shape a request, found by
    // the session's step index, its messages shared with the session's surface) and serialize
    // its wire body with its sha256 — against what loading the session costs in the first
    // place. Nothing of it was serialized before: the session was loaded and nobody looked at
    // it yet, nor did a turn run in this daemon.
    let session = Session::from_events(events.clone());
    let full_fold = median_of_five(|| {
        timed(|| {
            std::hint::black_box(dsh_session::reconstruct_step(&events, last_step).unwrap());
        })
    });
    // The same rebuild projecting every message afresh, as the loop's invariant check does.
    let projecting = median_of_five(|| {
        timed(|| {
            std::hint::black_box(
                dsh_session::reconstruct_session_step(&session, last_step).unwrap(),
            );
        })
    });
    let mut parts = Vec::new();
    let cold = median_of_five(|| {
        let start = Instant::now();
        let rebuilt = dsh_session::reconstruct_session_step_shared(&session, last_step).unwrap();
        let rebuilt_at = start.elapsed();
        // What the daemon does with a view memo that holds nothing yet.
        let (body, sha) = dsh_provider::WireCache::new().body(&rebuilt.request);
        let total = start.elapsed();
        std::hint::black_box(sha);
        parts.push((rebuilt_at, total - rebuilt_at, body.len()));
        total
    });
    let (rebuild, body_and_hash, body_len) = parts[parts.len() / 2];
    // The same body written and hashed one after the other, for comparison.
    let rebuilt = dsh_session::reconstruct_session_step_shared(&session, last_step).unwrap();
    let (mut serialize, mut hash) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        let start = Instant::now();
        let body = dsh_provider::wire_body(&rebuilt.request);
        let written = start.elapsed();
        std::hint::black_box(dsh_provider::sha256_hex(&body));
        serialize.push(written);
        hash.push(start.elapsed() - written);
    }
    let (serialize, hash) = (median(serialize), median(hash));
    let rebuilt_len = rebuilt.request.messages.len();
    drop(rebuilt);
    let share = |time: Duration| 100.0 * time.as_secs_f64() / total.as_secs_f64();
    println!(
        "session/request of step {last_step}, nothing serialized before: median {:.2} ms = {:.1}% of load+fold (rebuild {:.1} ms — projecting every message afresh {:.1} ms, over every event {:.1} ms; wire body of {:.1} MB with its sha256 {:.1} ms, hashed beside the writing — one after the other: writing {:.1} ms, sha256 {:.1} ms)",
        cold.as_secs_f64() * 1e3,
        share(cold),
        rebuild.as_secs_f64() * 1e3,
        projecting.as_secs_f64() * 1e3,
        full_fold.as_secs_f64() * 1e3,
        mb(body_len as u64),
        body_and_hash.as_secs_f64() * 1e3,
        serialize.as_secs_f64() * 1e3,
        hash.as_secs_f64() * 1e3,
    );
    // 3c. The step a turn of this daemon just sent: the loop's memo holds its body (with the
    // live fold's messages, the very ones the rebuild shares); `session/request` reads it
    // (compares and copies) instead of serializing (`handlers::session_request`).
    let mut loop_wire = dsh_provider::WireCache::new();
    let sent_request = GenerateRequest {
        images: Default::default(),
        header: session.header().unwrap().clone(),
        messages: session.messages()[..rebuilt_len].to_vec(),
    };
    let _ = loop_wire.body(&sent_request);
    drop(sent_request);
    let sent = median_of_five(|| {
        let start = Instant::now();
        let rebuilt = dsh_session::reconstruct_session_step_shared(&session, last_step).unwrap();
        let mut copy = loop_wire.clone();
        assert!(copy.adopt(&rebuilt.request));
        let (body, sha) = copy.body(&rebuilt.request);
        let elapsed = start.elapsed();
        assert_eq!(sha, dsh_provider::sha256_hex(&dsh_provider::wire_body(&rebuilt.request)));
        std::hint::black_box(body);
        elapsed
    });
    println!(
        "session/request of step {last_step} just sent by this daemon's loop (read from its memo): median {:.2} ms = {:.1}% of load+fold",
        sent.as_secs_f64() * 1e3,
        share(sent),
    );
    // 3d. The step after the one looked at last, or the last step again — as after a client
    // subscribed to the session, which prepares the view's memo with the last step in the
    // background (`handlers::prime_view`): only the new messages are serialized and hashed;
    // the rest is compared.
    let mut memo = dsh_provider::WireCache::new();
    let before = dsh_session::reconstruct_session_step_shared(&session, last_step - 1).unwrap();
    let _ = memo.body(&before.request);
    let warm = median_of_five(|| {
        let start = Instant::now();
        let rebuilt = dsh_session::reconstruct_session_step_shared(&session, last_step).unwrap();
        assert!(memo.adopt(&rebuilt.request));
        let (body, sha) = memo.body(&rebuilt.request);
        let elapsed = start.elapsed();
        assert_eq!(sha, dsh_provider::sha256_hex(&dsh_provider::wire_body(&rebuilt.request)));
        std::hint::black_box(body);
        elapsed
    });
    println!(
        "session/request of step {last_step} after step {} or again, or once a client subscribed (the view's memo): median {:.2} ms = {:.1}% of load+fold",
        last_step - 1,
        warm.as_secs_f64() * 1e3,
        share(warm),
    );
    // 3e. `session/usage`: the usage view folded over the whole log (what a session read from
    // its file costs, and what every call of a loaded session cost before it kept its fold).
    let usage = median_of_five(|| {
        timed(|| {
            std::hint::black_box(dsh_session::usage_rows(&events));
        })
    });
    // What a loaded session's usage view costs after a step (`handlers::session_usage`): its
    // fold advanced over that step's events, the rows copied out.
    let last_start = session.steps().last().map_or(0, |index| index.start_seq as usize);
    let mut before = dsh_session::UsageFold::default();
    before.advance(&events[..last_start]);
    let after_step = median_of_five(|| {
        let mut fold = before.clone();
        let mut rows = Vec::new();
        let elapsed = timed(|| {
            fold.advance(&events);
            rows = fold.rows().to_vec();
        });
        assert_eq!(rows, dsh_session::usage_rows(&events));
        elapsed
    });
    println!(
        "session/usage, folded over every event: median {:.2} ms = {:.1}% of load+fold; a loaded session's after a step (its fold advanced over the step, the rows copied): {:.3} ms",
        usage.as_secs_f64() * 1e3,
        share(usage),
        after_step.as_secs_f64() * 1e3,
    );
    drop(session);
    drop(events);

    // 4. Appends with syncing, each bounded by the time budget, from the start of the stream.
    let boundaries =
        append_run(&workspace, "sync-boundaries", SyncPolicy::Boundaries, &stream, budget);
    print_append("Boundaries", &boundaries);
    let always = append_run(&workspace, "sync-always", SyncPolicy::Always, &stream, budget);
    print_append("Always", &always);
    println!("total bench time {:.1} s", started.elapsed().as_secs_f64());
}
