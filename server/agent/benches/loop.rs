//! Benchmarks of the agent loop against the in-process mock, printed as plain figures.
//!
//! 1. Harness overhead per step — the step's wall time minus its provider call
//!    ([`StepTiming::harness`]) — around step 10 and around step 1,000 of one session: with the
//!    reconstruction invariant off (with and without the context-pressure hook) and on. The
//!    session is one turn of 1,000 steps, each a `read_file` call the mock makes because the file
//!    it reads asks for it again (a `[[fake:tool …]]` directive), so the log grows by a step's
//!    events each time. Then two sessions brought to step 10 and to step 1,000 take turns side
//!    by side (paired, so the host's noise hits both alike): the harness per step near each, and
//!    a turn's own work outside its steps (opening and closing it) — once as fast as the mock
//!    answers, once with every answer delayed by a further 50 ms. The paced ratio is the figure
//!    for "harness at step 1,000 against step 10": the harness after a provider call costs more
//!    the longer the machine sat idle during it, and unpaced the mock takes about seven times
//!    longer to answer at step 1,000 (see [`paired_harness`]); the windows of the long turn mix
//!    both effects the same way. Then the per-step operations whose cost grows with the log
//!    are timed on the final log, to say where the growth comes from.
//! 2. Cache efficiency over a scripted 100-step session (10 turns of 9 tool steps and an
//!    answer, with an `AGENTS.md` edit before turn 4 and a new loop instance — a resume — at
//!    turn 7): Σ cache-hit tokens ÷ the theoretical maximum, overall and with the steps whose
//!    drop the log explains set aside; and the first request after the edit alone, under the
//!    `append` instruction policy (the edit joins as a note) and under `rewrite`.
//!
//! The mock runs on a runtime (a thread) of its own: its per-request work grows with the prompt
//! and, scheduled among the loop's tasks, it was counted as harness time (the ratio of step
//! 1,000 to step 10 went from ~1.1× to ~2.2× with the mock sharing the loop's runtime).
//!
//! Run with `cargo bench -p dsh-agent`. `DSH_BENCH_STEPS` overrides the 1,000 steps;
//! `DSH_BENCH_ONLY=harness` or `DSH_BENCH_ONLY=cache` runs one half.
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_agent::approval::{ApprovalPolicy, DenyAll};
use dsh_agent::prompt::InstructionPolicy;
use dsh_agent::tools::{ToolConfig, Toolbox, Workspace};
use dsh_agent::{Agent, AgentConfig, SessionHandle, StepTiming, spawn_owner};
use dsh_mock::{MockConfig, MockServer, RecordedRequest};
use dsh_provider::{ApiKey, DeepSeek, DeepSeekConfig};
use dsh_session::usage_rows;
use dsh_store::{DshHome, SyncPolicy};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const LOOP_FILE: &str = "loop.txt";
const LOOP_DIRECTIVE: &str = r#"[[fake:tool read_file {"path":"loop.txt"}]]"#;

struct Bench {
    mock: MockServer,
    /// Dropped with the bench: stops the mock's runtime.
    _mock_stop: tokio::sync::oneshot::Sender<()>,
    provider: Arc<DeepSeek>,
    home: DshHome,
    workspace: PathBuf,
    instructions: InstructionPolicy,
    _temp: tempfile::TempDir,
}

impl Bench {
    async fn new(config: MockConfig) -> Bench {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let temp = tempfile::tempdir().unwrap();
        let home = DshHome::new(temp.path().join("home"));
        let workspace = temp.path().join("workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        let workspace = workspace.canonicalize().unwrap();
        let (mock, mock_stop) = start_mock_apart(config);
        let provider = Arc::new(
            DeepSeek::new(DeepSeekConfig::new(mock.base_url(), ApiKey::new("sk-test").unwrap()))
                .unwrap(),
        );
        Bench {
            mock,
            _mock_stop: mock_stop,
            provider,
            home,
            workspace,
            instructions: InstructionPolicy::default(),
            _temp: temp,
        }
    }

    fn session(&self) -> SessionHandle {
        // No fsync: the figures measure the loop, not the disk.
        let log = self
            .home
            .workspace(&self.workspace)
            .unwrap()
            .create_new_session(SyncPolicy::Never)
            .unwrap();
        spawn_owner(log)
    }

    fn agent(&self, check_invariants: bool, max_steps: u32) -> Agent {
        self.agent_with(check_invariants, max_steps, true)
    }

    fn agent_with(&self, check_invariants: bool, max_steps: u32, context: bool) -> Agent {
        let mut config = AgentConfig::new("deepseek-v4-flash");
        if !context {
            config.context = dsh_agent::compact::ContextPolicy::Off;
        }
        config.approvals = ApprovalPolicy::allow_all();
        config.check_invariants = check_invariants;
        config.max_steps = max_steps;
        config.instructions = self.instructions;
        let toolbox =
            Arc::new(Toolbox::new(Workspace::new(&self.workspace).unwrap(), ToolConfig::default()));
        Agent::new(
            Arc::new((*self.provider).clone()),
            toolbox,
            Arc::new(DenyAll),
            config,
            &self.workspace,
        )
    }

    async fn script(&self, scripts: serde_json::Value) {
        let response = reqwest::Client::new()
            .post(format!("{}/_fake/script", self.mock.base_url()))
            .json(&scripts)
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success());
    }
}

/// The mock on a runtime (one thread) of its own: its per-request work, which grows with the
/// prompt, must not be scheduled among the loop's tasks and counted as harness time. The
/// runtime, and with it the server, ends when the returned sender is dropped (the next
/// measurement must not share the machine with this one's mock either).
fn start_mock_apart(config: MockConfig) -> (MockServer, tokio::sync::oneshot::Sender<()>) {
    let (started, mock) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async move {
            started.send(MockServer::start(config).await.unwrap()).unwrap();
            let _ = stopped.await;
        });
    });
    (mock.recv().unwrap(), stop)
}

fn percentile(values: &mut [Duration], fraction: f64) -> Duration {
    values.sort();
    let index = ((values.len() - 1) as f64 * fraction).round() as usize;
    values[index]
}

fn window(timings: &[StepTiming], steps: std::ops::RangeInclusive<u64>) -> (Duration, Duration) {
    let mut harness: Vec<Duration> =
        timings.iter().filter(|t| steps.contains(&t.step)).map(StepTiming::harness).collect();
    let mut provider: Vec<Duration> =
        timings.iter().filter(|t| steps.contains(&t.step)).map(|t| t.provider).collect();
    (percentile(&mut harness, 0.5), percentile(&mut provider, 0.5))
}

fn micros(duration: Duration) -> String {
    format!("{:>9.1} µs", duration.as_secs_f64() * 1e6)
}

async fn harness_overhead(steps: u32, check_invariants: bool, context: bool) {
    let bench = Bench::new(MockConfig::default()).await;
    std::fs::write(bench.workspace.join(LOOP_FILE), format!("{LOOP_DIRECTIVE}\n")).unwrap();
    let session = bench.session();
    let mut agent = bench.agent_with(check_invariants, steps, context);
    let started = Instant::now();
    let outcome = agent
        .run_turn(&session, &format!("Loop: {LOOP_DIRECTIVE}"), &CancellationToken::new())
        .await
        .unwrap();
    let elapsed = started.elapsed();
    assert_eq!(outcome.steps, u64::from(steps), "{:?}", outcome.error);
    let events = session.query(|s| s.events().len()).await.unwrap();
    let last = bench.mock.requests().last().map_or(0, |r| r.body.len());
    println!(
        "harness overhead, invariant check {}, context management {}: {steps} steps, {events} events, last body {last} bytes, {:.1} s",
        if check_invariants { "ON " } else { "OFF" },
        if context { "ON " } else { "OFF" },
        elapsed.as_secs_f64()
    );
    let n = u64::from(steps);
    let mut windows = vec![(1, 20), (91, 110), (491, 510), (n - 19, n)];
    windows.retain(|(a, b)| *a >= 1 && *b <= n && a <= b);
    windows.dedup();
    // The windows are seconds apart and unpaced: the machine's other load and the mock's slower
    // answers both show in them (their ratio swung from 0.8× to 9.6× run to run); the paired
    // figures below are the ones to compare.
    for (from, to) in windows {
        let (harness, provider) = window(&outcome.timings, from..=to);
        println!(
            "  steps {from:>4}..={to:<4}  p50 harness {}   (p50 provider {})",
            micros(harness),
            micros(provider)
        );
    }
    paired_harness(steps, check_invariants, context, 0).await;
    paired_harness(steps, check_invariants, context, PACE_MS).await;
    if check_invariants {
        breakdown(&session).await;
    }
}

/// The further pause before every answer of the paced pairs (after the mock's own work, which
/// takes about 12 ms on a step-1,000 prompt): far shorter than any real provider's first token.
const PACE_MS: u64 = 50;

/// Harness time per step near step 10 against near step `steps`, measured in pairs: two
/// sessions are brought to 10 and to `steps` steps, then take turns of two scripted steps (a
/// `read_file` call and an answer), alternately, the order swapped every round. Other load on
/// the machine comes and goes over seconds: measured side by side, both sides see the same,
/// which the windows of one long turn (seconds apart) do not. Each side grows by two steps a
/// round: the steps measured are printed.
///
/// Twice, on fresh sessions: as fast as the mock answers, then with every answer delayed by a
/// further [`PACE_MS`]. What the harness costs after a provider call depends on how long the
/// machine sat idle during it (measured near step 10: about 0.7 ms after a 2 ms answer,
/// 0.9 ms after a 20 ms one, 1.0 ms after a 50 ms one; cores to wake and caches gone cold,
/// most likely), and unpaced the mock answers a step-1,000 prompt about seven times slower
/// than a step-10 one (about 14 ms against 2 ms). Paced, both sides idle at least 50 ms, as
/// they would for any real provider (the step-1,000 side still about 12 ms longer, which if
/// anything counts against it): the paced ratio is the figure for the conversation's length.
async fn paired_harness(steps: u32, check_invariants: bool, context: bool, pace: u64) {
    const ROUNDS: usize = 120;
    let bench = Bench::new(MockConfig::default()).await;
    std::fs::write(bench.workspace.join(LOOP_FILE), format!("{LOOP_DIRECTIVE}\n")).unwrap();
    std::fs::write(bench.workspace.join("notes.txt"), "one\ntwo\nthree\nfour\n").unwrap();
    let prompt = format!("Loop: {LOOP_DIRECTIVE}");
    let cancel = CancellationToken::new();
    let mut sides = Vec::new();
    for at in [10, steps] {
        let session = bench.session();
        let mut agent = bench.agent_with(check_invariants, at, context);
        let outcome = agent.run_turn(&session, &prompt, &cancel).await.unwrap();
        assert_eq!(outcome.steps, u64::from(at), "{:?}", outcome.error);
        sides.push((session, agent));
    }
    let mut timings: [Vec<StepTiming>; 2] = Default::default();
    // A turn's own work outside its steps (opening and closing it), per side.
    let mut outside: [Vec<Duration>; 2] = Default::default();
    for round in 0..ROUNDS {
        for index in [round % 2, 1 - round % 2] {
            let (session, agent) = &mut sides[index];
            let mut call = tool_step(round, 1);
            call["delay_ms"] = json!(pace);
            let content = "The notes have four lines.";
            let answer = json!({ "reasoning": "Enough.", "content": content, "delay_ms": pace });
            bench.script(json!([call, answer])).await;
            let started = Instant::now();
            let outcome = agent.run_turn(session, "Once more.", &cancel).await.unwrap();
            let elapsed = started.elapsed();
            assert_eq!(outcome.steps, 2, "{:?}", outcome.error);
            let in_steps: Duration = outcome.timings.iter().map(|timing| timing.total).sum();
            outside[index].push(elapsed.saturating_sub(in_steps));
            timings[index].extend(outcome.timings);
        }
    }
    let paced = if pace == 0 { "unpaced".to_owned() } else { format!("paced (+{pace} ms)") };
    let [small, large] = timings.each_ref().map(|side| {
        let first = side.iter().map(|timing| timing.step).min().unwrap_or_default();
        let last = side.iter().map(|timing| timing.step).max().unwrap_or_default();
        let mut provider: Vec<Duration> = side.iter().map(|timing| timing.provider).collect();
        format!(
            "steps {first}..={last} (p50 provider {})",
            micros(percentile(&mut provider, 0.5)).trim()
        )
    });
    println!(
        "  paired, {ROUNDS} rounds of 2 steps each, interleaved, {paced}: near step 10 = {small}, near step {steps} = {large}"
    );
    let [small, large] = outside.map(|mut side| percentile(&mut side, 0.5));
    println!(
        "    p50 of a turn's work outside its steps near step 10 {}, near step {steps} {}: {:.2}×",
        micros(small),
        micros(large),
        large.as_secs_f64() / small.as_secs_f64().max(1e-9)
    );
    // The median, and the 25th percentile: other load only ever adds time, so the lower
    // quantile is the closer to what the step itself costs. The difference too: a cost both
    // sides pay alike (the idling above) makes the ratio smaller, not the difference.
    for (name, quantile) in [("p50", 0.5), ("p25", 0.25)] {
        let [small, large] = timings.each_ref().map(|side| {
            let mut harness: Vec<Duration> = side.iter().map(StepTiming::harness).collect();
            percentile(&mut harness, quantile)
        });
        let difference = (large.as_secs_f64() - small.as_secs_f64()) * 1e6;
        println!(
            "    {name} harness near step 10 {}, near step {steps} {}: {:.2}× ({difference:+.1} µs)",
            micros(small),
            micros(large),
            large.as_secs_f64() / small.as_secs_f64()
        );
    }
}

/// What the per-step work that grows with the log costs on the final log: each of these runs
/// once (or more) per step.
async fn breakdown(session: &SessionHandle) {
    let (events, header, messages) = session
        .query(|s| (s.events().to_vec(), s.header().cloned().unwrap(), s.messages()))
        .await
        .unwrap();
    let step = session.query(|s| s.last_step()).await.unwrap();
    let request = dsh_session::GenerateRequest { images: Default::default(), header, messages };
    let time = |what: &str, run: &mut dyn FnMut()| {
        run();
        let started = Instant::now();
        for _ in 0..20 {
            run();
        }
        println!("    {what:<62} {}", micros(started.elapsed() / 20));
    };
    println!("  per-step costs on the final log ({} events, step {step}):", events.len());
    let mut cache = dsh_provider::WireCache::new();
    let mut earlier = request.clone();
    earlier.messages.truncate(earlier.messages.len().saturating_sub(2));
    let _ = cache.body(&earlier);
    time("WireCache::body, 2 new messages (agent.rs step 7: body + sha256)", &mut || {
        let mut step_cache = cache.clone();
        std::hint::black_box(step_cache.body(&request));
    });
    time("  of which cloning the cache for the measurement (not in the loop)", &mut || {
        std::hint::black_box(cache.clone());
    });
    let mut body = Vec::new();
    time("wire_body(request) from scratch (invariant check, audit only)", &mut || {
        body = dsh_provider::wire_body(&request);
    });
    time("sha256_hex(body) from scratch (audit only)", &mut || {
        std::hint::black_box(dsh_provider::sha256_hex(&body));
    });
    let full_snapshot = "Session::messages() (a full snapshot: a new loop, after a replace)";
    time_query(session, full_snapshot, |s| s.messages().len()).await;
    let mut allow = dsh_agent::approval::AllowAlways::default();
    allow.fold(&events[..events.len().saturating_sub(40)]);
    time("AllowAlways::fold, 40 new events (agent.rs run_tool, ask policy)", &mut || {
        let mut step_allow = allow.clone();
        step_allow.fold(&events);
        std::hint::black_box(step_allow.allows("write_file"));
    });
    time_query(session, "compact::decide (pre-step context-pressure hook)", |s| {
        let config = dsh_agent::ContextConfig::for_model("deepseek-v4-flash");
        std::hint::black_box(dsh_agent::compact::decide(s, &config));
    })
    .await;
    let check = "reconstruct_session_step + wire_body (invariant check only)";
    time_query(session, check, move |s| {
        let rebuilt = dsh_session::reconstruct_session_step(s, step).unwrap();
        std::hint::black_box(dsh_provider::wire_body(&rebuilt.request));
    })
    .await;
}

/// The `time` of `breakdown` for work done in the session's owner task, as the loop does it:
/// a query to warm up, then the mean of 20.
async fn time_query<R: Send + 'static>(
    session: &SessionHandle,
    what: &str,
    run: impl Fn(&dsh_session::Session) -> R + Clone + Send + 'static,
) {
    session.query(run.clone()).await.unwrap();
    let started = Instant::now();
    for _ in 0..20 {
        std::hint::black_box(session.query(run.clone()).await.unwrap());
    }
    println!("    {what:<62} {}", micros(started.elapsed() / 20));
}

fn tool_step(turn: usize, step: usize) -> serde_json::Value {
    json!({
        "reasoning": format!("Turn {turn}, step {step}: look at the notes again to be sure."),
        "tool_calls": [{ "name": "read_file", "arguments": format!("{{\"path\":\"notes.txt\",\"start_line\":{}}}", 1 + step % 3) }],
    })
}

async fn cache_efficiency(granularity: u64, instructions: InstructionPolicy) {
    let mut config = MockConfig::default();
    config.cache.granularity = granularity;
    let mut bench = Bench::new(config).await;
    bench.instructions = instructions;
    std::fs::write(bench.workspace.join("notes.txt"), "one\ntwo\nthree\nfour\n").unwrap();
    std::fs::write(bench.workspace.join("AGENTS.md"), "# Notes\n\nKeep it short.\n").unwrap();
    let session = bench.session();
    let mut agent = bench.agent(true, 50);
    for turn in 1..=10 {
        let mut scripts: Vec<serde_json::Value> =
            (1..=9).map(|step| tool_step(turn, step)).collect();
        scripts.push(json!({ "reasoning": "Enough.", "content": format!("Turn {turn} done: the notes have four lines.") }));
        bench.script(json!(scripts)).await;
        if turn == 4 {
            // A logged note (`append`) or a system prompt change (`rewrite`: a header delta).
            std::fs::write(
                bench.workspace.join("AGENTS.md"),
                "# Notes\n\nKeep it short.\nAnd plain.\n",
            )
            .unwrap();
        }
        if turn == 7 {
            // A new loop instance over the same session: a `resume` snapshot.
            agent = bench.agent(true, 50);
        }
        let outcome = agent
            .run_turn(
                &session,
                &format!("Turn {turn}: read the notes a few times."),
                &CancellationToken::new(),
            )
            .await
            .unwrap();
        assert_eq!(outcome.steps, 10, "{:?}", outcome.error);
    }
    let events = session.query(|s| s.events().to_vec()).await.unwrap();
    let rows = usage_rows(&events);
    let requests: Vec<RecordedRequest> = bench.mock.requests();
    assert_eq!(rows.len(), 100);
    assert_eq!(requests.len(), 100);
    let g = granularity;
    let (mut hit_all, mut max_all, mut hit_clean, mut max_clean) = (0u64, 0u64, 0u64, 0u64);
    let mut short: Vec<String> = Vec::new();
    for n in 1..requests.len() {
        let (previous, current) = (&requests[n - 1], &requests[n]);
        // The provider never serves the prompt's last token from cache (withheld final block).
        let ceiling = (current.prompt_tokens - 1) / g * g;
        let theoretical =
            ((previous.prompt_tokens + previous.completion_tokens) / g * g).min(ceiling);
        hit_all += current.hit;
        max_all += theoretical;
        let attributed = !rows[n].causes.is_empty();
        if !attributed {
            hit_clean += current.hit;
            max_clean += theoretical;
        }
        if current.hit < theoretical {
            short.push(format!(
                "step {}: hit {} of {theoretical}{}",
                n + 1,
                current.hit,
                if attributed {
                    format!(
                        " (explained: {})",
                        rows[n]
                            .causes
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join("; ")
                    )
                } else {
                    String::new()
                }
            ));
        }
    }
    // The first request after the AGENTS.md edit: step 31, turn 4's first.
    let edited = &requests[30];
    let ceiling = (edited.prompt_tokens - 1) / g * g;
    let theoretical =
        ((requests[29].prompt_tokens + requests[29].completion_tokens) / g * g).min(ceiling);
    println!(
        "instructions {instructions:?}: the first request after the AGENTS.md edit (step 31) hit {} of its theoretical maximum {theoretical} = {:.1}%",
        edited.hit,
        100.0 * edited.hit as f64 / theoretical as f64,
    );
    println!(
        "cache efficiency, 100 steps, block mode G={g}, instructions {instructions:?}: overall {:.2}% ({hit_all}/{max_all}), explained drops set aside {:.2}% ({hit_clean}/{max_clean})",
        100.0 * hit_all as f64 / max_all as f64,
        100.0 * hit_clean as f64 / max_clean as f64,
    );
    for line in short {
        println!("  below the maximum: {line}");
    }
}

fn main() {
    let steps: u32 =
        std::env::var("DSH_BENCH_STEPS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    // `DSH_BENCH_ONLY=harness` or `=cache` runs one half (e.g. under a profiler).
    let only = std::env::var("DSH_BENCH_ONLY").unwrap_or_default();
    runtime.block_on(async {
        if only != "cache" {
            // The default configuration (context management on) first, then without it, then
            // with the invariant check on.
            harness_overhead(steps, false, true).await;
            harness_overhead(steps, false, false).await;
            harness_overhead(steps, true, true).await;
        }
        if only != "harness" {
            cache_efficiency(64, InstructionPolicy::Append).await;
            cache_efficiency(64, InstructionPolicy::Rewrite).await;
            cache_efficiency(128, InstructionPolicy::Append).await;
        }
    });
}
