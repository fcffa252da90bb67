//! Context pressure against the mock: trims and compactions are logged surface rewrites, every
//! loop request (before, at and after each rewrite) rebuilds from the log byte for byte, the
//! summarize call rebuilds from the log plus code, and replaying the log reaches the same
//! decisions the live run took.

use std::sync::Arc;

use dsh_agent::approval::{ApprovalPolicy, DenyAll};
use dsh_agent::compact::{
    CompactOutcome, ContextConfig, ContextPolicy, Decision, compact_now, decide, plan_compaction,
    summarize_request,
};
use dsh_agent::tools::{ToolConfig, Toolbox, Workspace};
use dsh_agent::{Agent, AgentConfig, TurnOutcome};
use dsh_mock::MockConfig;
use dsh_provider::sha256_hex;
use dsh_provider::wire_body;
use dsh_session::{
    Event, EventData, PrefixCause, Session, Severity, StopReason, SurfaceNode, check_log,
    reconstruct_step, usage_rows, usage_totals,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::Fixture;

const MODEL: &str = "deepseek-v4-flash";
/// `max_tokens` of every loop request: small, so the window is mostly prompt.
const MAX_TOKENS: u32 = 256;

/// A context config for a small window, with small trim limits.
fn context(window: u64) -> ContextConfig {
    ContextConfig {
        trim_min_bytes: 2048,
        trim_keep_head_bytes: 400,
        trim_keep_tail_bytes: 200,
        summary_max_tokens: 256,
        keep_recent_turns: 1,
        trim_min_gain: 0.15,
        ..ContextConfig::with_window(window)
    }
}

fn agent(fixture: &Fixture, context: Option<ContextConfig>) -> Agent {
    let mut config = AgentConfig::new(MODEL);
    config.default_call.max_tokens = MAX_TOKENS;
    config.approvals = ApprovalPolicy::allow_all();
    config.check_invariants = true;
    config.date_context = false;
    config.context = context.map_or(ContextPolicy::Off, ContextPolicy::Fixed);
    let toolbox =
        Arc::new(Toolbox::new(Workspace::new(&fixture.workspace).unwrap(), ToolConfig::default()));
    Agent::new(
        Arc::new((*fixture.provider).clone()),
        toolbox,
        Arc::new(DenyAll),
        config,
        &fixture.workspace,
    )
}

/// Files to read: `big-N.txt` (`lines` lines, about 50 bytes each) and `small.txt`.
fn write_files(fixture: &Fixture, big: usize, lines: usize) {
    for index in 0..big {
        let text: String = (0..lines)
            .map(|line| format!("big file {index}, line {line}: the quick brown fox jumps\n"))
            .collect();
        std::fs::write(fixture.workspace.join(format!("big-{index}.txt")), text).unwrap();
    }
    std::fs::write(fixture.workspace.join("small.txt"), "a small file\n").unwrap();
}

/// Scripts one turn (one step per read, then a final answer) and runs it.
async fn turn(
    fixture: &Fixture,
    agent: &mut Agent,
    number: usize,
    reads: &[String],
) -> TurnOutcome {
    let mut scripts: Vec<Value> = reads
        .iter()
        .map(|path| {
            json!({"match": {"has_tools": true},
                   "tool_calls": [{"name": "read_file", "arguments": {"path": path}}]})
        })
        .collect();
    scripts
        .push(json!({"match": {"has_tools": true}, "content": format!("done with turn {number}")}));
    fixture.script(Value::Array(scripts)).await;
    let prompt = format!("turn {number}: read {}", reads.join(", "));
    agent.run_turn(&fixture.session, &prompt, &CancellationToken::new()).await.unwrap()
}

fn reads_for(turn: usize, big_files: usize) -> Vec<String> {
    // Alternate big and small reads so that trimming has something to do.
    (0..3)
        .map(|index| {
            if (turn + index).is_multiple_of(3) {
                "small.txt".to_owned()
            } else {
                format!("big-{}.txt", (turn + index) % big_files)
            }
        })
        .collect()
}

async fn events(fixture: &Fixture) -> Vec<Event> {
    fixture.session.query(|s| s.events().to_vec()).await.unwrap()
}

fn assert_well_formed(events: &[Event]) {
    let errors: Vec<String> = check_log(events)
        .into_iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| d.to_string())
        .collect();
    assert!(errors.is_empty(), "check_log: {errors:#?}");
}

/// What the log says about rewrites.
#[derive(Debug, Default)]
struct Rewrites {
    compactions: usize,
    trims: usize,
    abandoned: usize,
}

fn rewrites(events: &[Event]) -> Rewrites {
    let mut rewrites = Rewrites::default();
    let mut open_attempt = false;
    for event in events {
        match &event.data {
            EventData::CompactStart(_) => {
                if open_attempt {
                    rewrites.abandoned += 1;
                }
                open_attempt = true;
            }
            EventData::SurfaceReplace(replace) => match replace.node {
                SurfaceNode::Summary { .. } => {
                    rewrites.compactions += 1;
                    open_attempt = false;
                }
                SurfaceNode::ToolResult(_) => rewrites.trims += 1,
            },
            EventData::StepStart(_) | EventData::TurnEnd(_) if open_attempt => {
                rewrites.abandoned += 1;
                open_attempt = false;
            }
            _ => {}
        }
    }
    rewrites
}

/// The audit at the agent level: every step's rebuilt wire body matches its `request/sent`
/// and, in order, the body the mock recorded; every summarize body the mock recorded rebuilds
/// from the log plus code. Returns the number of steps.
fn assert_audit(
    events: &[Event],
    recorded: &[dsh_mock::RecordedRequest],
    context: &ContextConfig,
) -> u64 {
    let (loop_bodies, summarize_bodies): (Vec<&[u8]>, Vec<&[u8]>) = {
        let mut loop_bodies = Vec::new();
        let mut summarize_bodies = Vec::new();
        for request in recorded {
            if request.body.windows(9).any(|w| w == b"\"tools\":[") {
                loop_bodies.push(request.body.as_slice());
            } else {
                summarize_bodies.push(request.body.as_slice());
            }
        }
        (loop_bodies, summarize_bodies)
    };
    let last_step = Session::from_events(events.iter().cloned()).last_step();
    assert_eq!(loop_bodies.len() as u64, last_step, "one recorded loop request per step");
    for step in 1..=last_step {
        let rebuilt = reconstruct_step(events, step).unwrap();
        let body = wire_body(&rebuilt.request);
        let sent = rebuilt.sent.as_ref().expect("every step was sent");
        assert_eq!(sha256_hex(&body), sent.sha256, "step {step}: rebuilt body vs request/sent");
        assert!(
            body == loop_bodies[step as usize - 1],
            "step {step}: rebuilt body differs from the body the mock received"
        );
        assert_tool_messages_have_calls(&body, step);
    }
    // The summarize calls: region from the compaction plan over the log before `compact/start`
    // (and, when it succeeded, the logged `surface/replace`), scalars from `compact/summary`.
    let mut summarize_index = 0;
    for (index, event) in events.iter().enumerate() {
        let EventData::CompactStart(_) = event.data else { continue };
        let before = Session::from_events(events[..index].iter().cloned());
        let (mut start, mut end) = plan_compaction(&before, context).unwrap();
        let mut model = before.header().map(|h| h.config.model.clone()).unwrap();
        let mut max_tokens = context.summary_max_tokens;
        for later in &events[index + 1..] {
            match &later.data {
                EventData::CompactSummary(summary) => {
                    model = summary.model.clone();
                    max_tokens = summary.max_tokens;
                }
                EventData::SurfaceReplace(replace) => {
                    (start, end) = (replace.start, replace.end);
                    break;
                }
                _ => break,
            }
        }
        let request = summarize_request(
            &before,
            start,
            end,
            &AgentConfig::new(&model).default_call,
            max_tokens,
            context,
        )
        .unwrap();
        assert!(
            wire_body(&request) == summarize_bodies[summarize_index],
            "summarize call {summarize_index} does not rebuild from the log"
        );
        summarize_index += 1;
    }
    assert_eq!(summarize_index, summarize_bodies.len(), "every summarize call is in the log");
    last_step
}

/// Every tool message in a request body answers a call of an earlier assistant message.
fn assert_tool_messages_have_calls(body: &[u8], step: u64) {
    let value: Value = serde_json::from_slice(body).unwrap();
    let mut calls = std::collections::HashSet::new();
    for message in value["messages"].as_array().unwrap() {
        if let Some(tool_calls) = message["tool_calls"].as_array() {
            calls.extend(tool_calls.iter().map(|c| c["id"].as_str().unwrap().to_owned()));
        }
        if message["role"] == "tool" {
            let id = message["tool_call_id"].as_str().unwrap();
            assert!(calls.contains(id), "step {step}: tool message {id} without its call");
        }
    }
}

/// Replays the decisions: at every step's pre-step point (just before the rewrite events that
/// precede its `step/start`), [`decide`] over the log prefix names exactly what the log shows.
fn assert_decisions_replay(events: &[Event], context: &ContextConfig) -> usize {
    let mut checked = 0;
    for (index, event) in events.iter().enumerate() {
        let EventData::StepStart(_) = event.data else { continue };
        let mut point = index;
        while point > 0
            && matches!(
                events[point - 1].data,
                EventData::CompactStart(_)
                    | EventData::CompactSummary(_)
                    | EventData::SurfaceReplace(_)
            )
        {
            point -= 1;
        }
        let prefix = Session::from_events(events[..point].iter().cloned());
        let hook = &events[point..index];
        match decide(&prefix, context) {
            Decision::None => assert!(hook.is_empty(), "seq {point}: rewrites without a decision"),
            Decision::Trim(ids) => {
                let replaced: Vec<u64> = hook
                    .iter()
                    .map(|e| match &e.data {
                        EventData::SurfaceReplace(r) if r.start == r.end => r.start,
                        other => panic!("seq {}: a trim batch holds {other:?}", e.seq),
                    })
                    .collect();
                assert_eq!(replaced, ids, "seq {point}: trimmed nodes");
            }
            Decision::Compact { start, end } => {
                assert!(matches!(hook.first().map(|e| &e.data), Some(EventData::CompactStart(_))));
                if let Some(EventData::SurfaceReplace(replace)) = hook.last().map(|e| &e.data) {
                    assert_eq!((replace.start, replace.end), (start, end), "seq {point}");
                }
            }
        }
        checked += 1;
    }
    checked
}

/// The first step after every rewrite names it as the cause of its cache drop.
fn assert_rewrites_attributed(events: &[Event]) {
    let rows = usage_rows(events);
    for event in events {
        let EventData::SurfaceReplace(replace) = &event.data else { continue };
        let Some(row) = rows.iter().find(|row| row.seq > event.seq) else { continue };
        let expected = match replace.node {
            SurfaceNode::Summary { .. } => PrefixCause::Compaction { seq: event.seq },
            SurfaceNode::ToolResult(_) => PrefixCause::Trim { seq: event.seq },
        };
        assert!(row.causes.contains(&expected), "step {}: {:?} not attributed", row.step, expected);
    }
}

#[tokio::test]
async fn compactions_and_trims_rebuild_every_request_byte_for_byte() {
    let window = 9000;
    let fixture = Fixture::with_mock(MockConfig::default().with_model_limits(window, 4096)).await;
    write_files(&fixture, 4, 100);
    let context = context(window);
    let mut agent = agent(&fixture, Some(context.clone()));
    let mut number = 0;
    while rewrites(&events(&fixture).await).compactions < 2 {
        number += 1;
        assert!(number <= 30, "no second compaction after 30 turns");
        let outcome = turn(&fixture, &mut agent, number, &reads_for(number, 4)).await;
        assert_eq!(outcome.stop_reason, StopReason::Completed, "{outcome:?}");
    }
    // One more turn so that the steps after the last rewrite are covered too.
    number += 1;
    turn(&fixture, &mut agent, number, &reads_for(number, 4)).await;

    let events = events(&fixture).await;
    // The log on disk is the one folded in memory.
    let id = dsh_store::SessionId::parse(fixture.session.session_id()).unwrap();
    let stored = dsh_store::read_log(&fixture.home.find_session(&id).unwrap()).unwrap();
    assert!(stored.events == events, "the stored log differs from the live one");
    assert_well_formed(&events);
    let found = rewrites(&events);
    assert!(found.compactions >= 2 && found.trims >= 3, "{found:?}");
    let steps = assert_audit(&events, &fixture.mock.requests(), &context);
    assert!(assert_decisions_replay(&events, &context) as u64 == steps);
    assert_rewrites_attributed(&events);
    // The usage view says it in words.
    let rows = usage_rows(&events);
    let explained: Vec<String> = rows
        .iter()
        .flat_map(|row| row.causes.iter().map(ToString::to_string))
        .filter(|text| {
            text.starts_with("compaction at seq") || text.starts_with("tool result trimmed at seq")
        })
        .collect();
    assert!(explained.len() >= found.compactions + found.trims, "{explained:?}");
}

#[tokio::test]
async fn manual_compaction_replaces_the_older_turns_with_a_summary() {
    let fixture = Fixture::new().await;
    write_files(&fixture, 2, 100);
    let context = context(1_000_000);
    let mut agent = agent(&fixture, None);
    for number in 1..=3 {
        turn(&fixture, &mut agent, number, &reads_for(number, 2)).await;
    }
    fixture
        .script(json!([{"match": {"has_tools": false}, "content": "the user read files"}]))
        .await;
    let outcome = compact_now(
        &fixture.provider,
        &fixture.session,
        &context,
        &AgentConfig::new(MODEL).default_call,
        &CancellationToken::new(),
    )
    .await
    .unwrap();
    let CompactOutcome::Compacted { replace_seq, nodes, .. } = outcome else {
        panic!("expected a compaction: {outcome:?}")
    };
    assert!(nodes >= 8, "{nodes}");
    turn(&fixture, &mut agent, 4, &["small.txt".to_owned()]).await;

    let events = events(&fixture).await;
    assert_well_formed(&events);
    assert_audit(&events, &fixture.mock.requests(), &context);
    assert_rewrites_attributed(&events);
    // The next request opens with the summary, then turn 3 verbatim.
    let step = usage_rows(&events).iter().find(|row| row.seq > replace_seq).unwrap().step;
    let rebuilt = reconstruct_step(&events, step).unwrap();
    assert_eq!(rebuilt.surface[0].id, replace_seq);
    let body = String::from_utf8(wire_body(&rebuilt.request)).unwrap();
    assert!(body.contains("Summary of the earlier conversation (older messages were compacted):\\n\\nthe user read files"));
    assert!(body.contains("turn 3: read") && !body.contains("turn 2: read"));
    // A step before the compaction still rebuilds as it was sent: raw events are never deleted.
    let first = reconstruct_step(&events, 1).unwrap();
    assert!(String::from_utf8(wire_body(&first.request)).unwrap().contains("turn 1: read"));
}

#[tokio::test]
async fn a_failed_summarize_call_leaves_the_surface_untouched_and_the_session_usable() {
    let window = 9000;
    let fixture = Fixture::with_mock(MockConfig::default().with_model_limits(window, 4096)).await;
    write_files(&fixture, 4, 100);
    let context = context(window);
    let mut agent = agent(&fixture, Some(context.clone()));
    // The first summarize call (the only requests without tools) fails: a content filter.
    fixture
        .script(json!([{"match": {"has_tools": false}, "finish_reason": "content_filter"}]))
        .await;
    // Without its compaction the turn may outgrow the window (a logged step error); the next
    // turn retries the compaction and the session carries on.
    let mut number = 0;
    let mut outcome = None;
    while rewrites(&events(&fixture).await).compactions == 0 {
        number += 1;
        assert!(number <= 30, "no compaction after 30 turns");
        outcome = Some(turn(&fixture, &mut agent, number, &reads_for(number, 4)).await);
    }
    number += 1;
    let last = turn(&fixture, &mut agent, number, &reads_for(number, 4)).await;
    assert_eq!(last.stop_reason, StopReason::Completed, "{outcome:?} then {last:?}");
    let events = events(&fixture).await;
    assert_well_formed(&events);
    let found = rewrites(&events);
    assert_eq!(found.abandoned, 1, "{found:?}");
    // The step after the abandoned attempt saw the surface as it was before it.
    let attempt = events.iter().position(|e| matches!(e.data, EventData::CompactStart(_))).unwrap();
    assert!(matches!(events[attempt + 1].data, EventData::StepStart(_)), "only compact/start");
    let EventData::StepStart(start) = &events[attempt + 1].data else { unreachable!() };
    let rebuilt = reconstruct_step(&events, start.step).unwrap();
    let before = Session::from_events(events[..attempt].iter().cloned());
    assert_eq!(rebuilt.surface, before.surface());
    assert_audit(&events, &fixture.mock.requests(), &context);
    assert_decisions_replay(&events, &context);

    // A manual compaction whose call fails at the HTTP level changes nothing either.
    fixture.fault(json!({"http": {"status": 400, "message": "summarize refused"}})).await;
    let generation = fixture.session.query(|s| s.surface_generation()).await.unwrap();
    let outcome = compact_now(
        &fixture.provider,
        &fixture.session,
        &context,
        &AgentConfig::new(MODEL).default_call,
        &CancellationToken::new(),
    )
    .await
    .unwrap();
    assert!(matches!(outcome, CompactOutcome::Failed { cancelled: false, .. }), "{outcome:?}");
    assert_eq!(fixture.session.query(|s| s.surface_generation()).await.unwrap(), generation);
    number += 1;
    let outcome = turn(&fixture, &mut agent, number, &["small.txt".to_owned()]).await;
    assert_eq!(outcome.stop_reason, StopReason::Completed, "{outcome:?}");
    let events = self::events(&fixture).await;
    assert_well_formed(&events);
    assert_audit(&events, &fixture.mock.requests(), &context);
}

#[tokio::test]
async fn a_cancelled_summarize_call_ends_the_turn_and_leaves_an_auditable_session() {
    let fixture = Fixture::new().await;
    write_files(&fixture, 2, 100);
    let context = context(1_000_000);
    let mut agent = agent(&fixture, None);
    for number in 1..=3 {
        turn(&fixture, &mut agent, number, &reads_for(number, 2)).await;
    }
    // A slow summarize reply, cancelled while it is awaited.
    fixture
        .script(json!([{"match": {"has_tools": false}, "content": "late", "delay_ms": 10_000}]))
        .await;
    let cancel = CancellationToken::new();
    let canceller = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            cancel.cancel();
        })
    };
    let outcome = compact_now(
        &fixture.provider,
        &fixture.session,
        &context,
        &AgentConfig::new(MODEL).default_call,
        &cancel,
    )
    .await
    .unwrap();
    canceller.await.unwrap();
    assert!(matches!(outcome, CompactOutcome::Failed { cancelled: true, .. }), "{outcome:?}");
    let surface_generation = fixture.session.query(|s| s.surface_generation()).await.unwrap();
    assert_eq!(surface_generation, 0);
    // Still usable, and a later compaction succeeds.
    turn(&fixture, &mut agent, 4, &["small.txt".to_owned()]).await;
    fixture.script(json!([{"match": {"has_tools": false}, "content": "summary"}])).await;
    let outcome = compact_now(
        &fixture.provider,
        &fixture.session,
        &context,
        &AgentConfig::new(MODEL).default_call,
        &CancellationToken::new(),
    )
    .await
    .unwrap();
    assert!(matches!(outcome, CompactOutcome::Compacted { .. }), "{outcome:?}");

    let events = events(&fixture).await;
    assert_well_formed(&events);
    assert_eq!(rewrites(&events).abandoned, 1);
    assert_audit(&events, &fixture.mock.requests(), &context);
}

/// At least 300 steps in a window small enough to force several compactions. The figures are
/// printed (`--nocapture`); set `DSH_LONG_TURNS` for a longer run.
#[tokio::test]
#[allow(clippy::print_stdout)] // the figures are this test's report
async fn a_long_session_stays_in_its_window_and_recovers_its_cache_after_each_rewrite() {
    let window = 12_000;
    let fixture = Fixture::with_mock(MockConfig::default().with_model_limits(window, 4096)).await;
    write_files(&fixture, 6, 40);
    let context = ContextConfig {
        trim_min_bytes: 1500,
        trim_keep_head_bytes: 300,
        trim_keep_tail_bytes: 150,
        ..context(window)
    };
    let mut agent = agent(&fixture, Some(context.clone()));
    let turns: usize =
        std::env::var("DSH_LONG_TURNS").ok().and_then(|v| v.parse().ok()).unwrap_or(75);
    for number in 1..=turns {
        let outcome = turn(&fixture, &mut agent, number, &reads_for(number, 6)).await;
        assert_eq!(outcome.stop_reason, StopReason::Completed, "turn {number}: {outcome:?}");
    }
    let events = events(&fixture).await;
    let recorded = fixture.mock.requests();
    // Never over the window: no request was rejected.
    let rejected: Vec<_> = recorded.iter().filter(|r| r.status != 200).map(|r| r.seq).collect();
    assert!(rejected.is_empty(), "rejected requests: {rejected:?}");
    assert_well_formed(&events);
    let steps = assert_audit(&events, &recorded, &context);
    assert!(steps >= 300, "{steps} steps");
    assert_decisions_replay(&events, &context);
    assert_rewrites_attributed(&events);

    // The step after a rewrite pays for the new prefix; the one after it hits the cache again.
    let rows = usage_rows(&events);
    let mut saved = 0u64;
    for (index, row) in rows.iter().enumerate() {
        let rewritten = row
            .causes
            .iter()
            .any(|c| matches!(c, PrefixCause::Compaction { .. } | PrefixCause::Trim { .. }));
        if !rewritten || index == 0 {
            continue;
        }
        let before = rows[index - 1].usage.unwrap();
        let after = row.usage.unwrap();
        saved +=
            (before.prompt_tokens + before.completion_tokens).saturating_sub(after.prompt_tokens);
        if let Some(next) = rows.get(index + 1) {
            let around: Vec<String> = rows[index.saturating_sub(2)..(index + 2).min(rows.len())]
                .iter()
                .map(|r| format!("{} {:?} {:?}", r.step, r.usage, r.causes))
                .collect();
            assert!(!next.dropped, "step {}: the cache did not recover: {around:#?}", next.step);
            assert!(next.hit_percent >= 50.0, "step {}: hit {:.1}%", next.step, next.hit_percent);
        }
    }
    let found = rewrites(&events);
    let trim_batches = rows
        .iter()
        .filter(|row| row.causes.iter().any(|c| matches!(c, PrefixCause::Trim { .. })))
        .count();
    let totals = usage_totals(&rows);
    let peak = rows.iter().filter_map(|r| r.usage).map(|u| u.prompt_tokens).max().unwrap();
    println!(
        "long session: {steps} steps in {turns} turns, window {window} tokens, peak prompt {peak}; \
         {} compactions, {} tool results trimmed in {trim_batches} batches; at least {saved} \
         prompt tokens saved; \
         cache hit {:.1}% overall ({} of {} prompt tokens)",
        found.compactions,
        found.trims,
        totals.hit_ratio() * 100.0,
        totals.cache_hit_tokens,
        totals.prompt_tokens
    );
    assert!(found.compactions >= 3, "{found:?}");
}

#[tokio::test]
async fn a_summarize_call_cancelled_before_a_step_ends_the_turn_and_the_next_turn_compacts() {
    let window = 9000;
    let fixture = Fixture::with_mock(MockConfig::default().with_model_limits(window, 4096)).await;
    write_files(&fixture, 4, 100);
    let context = context(window);
    let mut agent = agent(&fixture, Some(context.clone()));
    // The first summarize call hangs until it is cancelled.
    fixture
        .script(json!([{"match": {"has_tools": false}, "content": "late", "delay_ms": 30_000}]))
        .await;
    let mut number = 0;
    let cancelled_turn = loop {
        number += 1;
        assert!(number <= 30, "no compaction was attempted in 30 turns");
        let reads = reads_for(number, 4);
        let mut scripts: Vec<Value> = reads
            .iter()
            .map(|path| {
                json!({"match": {"has_tools": true},
                       "tool_calls": [{"name": "read_file", "arguments": {"path": path}}]})
            })
            .collect();
        scripts.push(json!({"match": {"has_tools": true}, "content": "done"}));
        fixture.script(Value::Array(scripts)).await;
        let cancel = CancellationToken::new();
        let (session, turn_cancel) = (fixture.session.clone(), cancel.clone());
        let task = tokio::spawn(async move {
            let outcome = agent.run_turn(&session, "go on", &turn_cancel).await;
            (agent, outcome)
        });
        // Cancel as soon as the summarize call (the only request without tools) is in flight.
        while !task.is_finished() {
            let summarizing = fixture.mock.requests().iter().any(|request| {
                !request.body.windows(9).any(|w| w == b"\"tools\":[")
                    && request.outcome == "in_progress"
            });
            if summarizing {
                cancel.cancel();
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let (returned, outcome) = task.await.unwrap();
        agent = returned;
        let outcome = outcome.unwrap();
        if cancel.is_cancelled() {
            break outcome;
        }
    };
    assert_eq!(cancelled_turn.stop_reason, StopReason::Cancelled, "{cancelled_turn:?}");
    let events = events(&fixture).await;
    let turn_start =
        events.iter().rposition(|e| matches!(e.data, EventData::TurnStart(_))).unwrap();
    let started =
        events[turn_start..].iter().filter(|e| matches!(e.data, EventData::StepStart(_))).count();
    assert_eq!(cancelled_turn.steps, started as u64, "{cancelled_turn:?}");
    assert_eq!(cancelled_turn.timings.len(), started, "{cancelled_turn:?}");
    assert_well_formed(&events);
    // compact/start, then the turn ends: no step was started, the surface is untouched.
    let attempt =
        events.iter().rposition(|e| matches!(e.data, EventData::CompactStart(_))).unwrap();
    assert!(matches!(events[attempt + 1].data, EventData::TurnEnd(_)), "{:?}", events[attempt + 1]);
    assert_eq!(attempt + 2, events.len());
    assert_eq!(rewrites(&events).compactions, 0);

    // The next turn retries the compaction, which now succeeds.
    number += 1;
    let outcome = turn(&fixture, &mut agent, number, &["small.txt".to_owned()]).await;
    assert_eq!(outcome.stop_reason, StopReason::Completed, "{outcome:?}");
    let events = self::events(&fixture).await;
    assert_well_formed(&events);
    let found = rewrites(&events);
    assert_eq!((found.abandoned, found.compactions), (1, 1), "{found:?}");
    assert_audit(&events, &fixture.mock.requests(), &context);
    assert_decisions_replay(&events, &context);
}
