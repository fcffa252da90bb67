//! A turn's budgets (`TurnLimits`): steps, tokens and cost stop the turn between steps, each
//! with a logged `turn/limit` and the stop reason `limit`; the timeout cancels the turn as
//! `session/cancel` does; a cost budget on a model without a price runs nothing.

use std::sync::Arc;
use std::time::Duration;

use dsh_agent::approval::DenyAll;
use dsh_agent::tools::{ToolConfig, Toolbox, Workspace};
use dsh_agent::{
    Agent, AgentConfig, Endpoint, Endpoints, TurnLimits, TurnOutcome, approval::ApprovalPolicy,
};
use dsh_mock::MockConfig;
use dsh_provider::DeepSeek;
use dsh_session::{
    Event, EventData, LimitKind, LlmCallConfig, Price, Severity, StopReason, TurnLimit, check_log,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::support::Fixture;

/// Three steps: two tool calls, then an answer.
fn three_steps() -> serde_json::Value {
    json!([read("a.txt"), read("b.txt"), {"reasoning": "Done.", "content": "Both read."}])
}

/// A step that reads a file.
fn read(path: &str) -> serde_json::Value {
    let call = json!({"name": "read_file", "arguments": {"path": path}});
    json!({"reasoning": "Look.", "tool_calls": [call]})
}

async fn events(fixture: &Fixture) -> Vec<Event> {
    fixture.session.query(|s| s.events().to_vec()).await.unwrap()
}

/// The `turn/limit` events of the log, and that each is followed by a `turn/end` with reason
/// `limit`; the log is well-formed.
async fn logged_limits(fixture: &Fixture) -> Vec<TurnLimit> {
    let events = events(fixture).await;
    let errors: Vec<_> =
        check_log(&events).into_iter().filter(|d| d.severity == Severity::Error).collect();
    assert!(errors.is_empty(), "{errors:?}");
    let mut limits = Vec::new();
    for (index, event) in events.iter().enumerate() {
        if let EventData::TurnLimit(limit) = &event.data {
            let next = events.get(index + 1).map(|event| &event.data);
            assert!(
                matches!(next, Some(EventData::TurnEnd(end)) if end.reason == StopReason::Limit),
                "turn/limit is followed by {next:?}"
            );
            limits.push(limit.clone());
        }
    }
    limits
}

async fn run(fixture: &Fixture, agent: &mut Agent, limits: TurnLimits) -> TurnOutcome {
    let cancel = CancellationToken::new();
    agent.run_turn_within(&fixture.session, "Read a and b.", &cancel, &limits).await.unwrap()
}

async fn with_files(config: MockConfig) -> Fixture {
    let fixture = Fixture::with_mock(config).await;
    std::fs::write(fixture.workspace.join("a.txt"), "alpha\n").unwrap();
    std::fs::write(fixture.workspace.join("b.txt"), "beta\n").unwrap();
    fixture
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_budget_stops_the_turn_after_that_many_steps_with_its_tools_answered() {
    let fixture = with_files(MockConfig::default()).await;
    fixture.script(three_steps()).await;
    let mut agent = fixture.agent();
    let limits = TurnLimits { max_steps: Some(1), ..TurnLimits::default() };
    let outcome = run(&fixture, &mut agent, limits).await;
    assert_eq!((outcome.stop_reason, outcome.steps), (StopReason::Limit, 1), "{outcome:?}");
    assert_eq!(fixture.mock.requests().len(), 1);
    let limit = outcome.limit.unwrap();
    assert_eq!(
        (limit.limit, limit.value.to_string(), limit.spent.to_string()),
        (LimitKind::MaxSteps, "1".to_owned(), "1".to_owned())
    );
    assert_eq!(logged_limits(&fixture).await, vec![limit]);
    // The step ran whole: its call was answered before the turn stopped.
    let events = events(&fixture).await;
    assert!(events.iter().any(|e| matches!(&e.data, EventData::ToolResult(r) if !r.is_error)));

    // The next turn has budgets of its own: none here, and it runs the rest of the script.
    let outcome =
        agent.run_turn(&fixture.session, "Go on.", &CancellationToken::new()).await.unwrap();
    assert_eq!((outcome.stop_reason, outcome.steps), (StopReason::Completed, 2));
    assert_eq!(outcome.limit, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_budget_counts_prompt_and_output_tokens_of_the_finished_steps() {
    let fixture = with_files(MockConfig::default()).await;
    // Only the steps each turn should take are scripted: one more would get the mock's echo
    // and complete the turn.
    fixture.script(json!([read("a.txt")])).await;
    let mut agent = fixture.agent();
    // One token: the first step passes it, the second never starts.
    let limits = TurnLimits { max_tokens: Some(1), ..TurnLimits::default() };
    let outcome = run(&fixture, &mut agent, limits).await;
    assert_eq!((outcome.stop_reason, outcome.steps), (StopReason::Limit, 1), "{outcome:?}");
    let spent = outcome.usage.prompt_tokens + outcome.usage.completion_tokens;
    let limit = outcome.limit.clone().unwrap();
    assert_eq!((limit.limit, limit.spent.as_u64()), (LimitKind::MaxTokens, Some(spent)));
    assert_eq!(logged_limits(&fixture).await, vec![limit]);

    // Measured in another session of the same workspace (the first request of each is the same
    // text): a budget of exactly the first step's tokens stops the turn after it; one token
    // more lets the second step run.
    for (budget, steps) in [(spent, 1), (spent + 1, 2)] {
        let session = fixture.another_session();
        let reads: Vec<_> = ["a.txt", "b.txt"].into_iter().take(steps).map(read).collect();
        fixture.script(json!(reads)).await;
        let limits = TurnLimits { max_tokens: Some(budget), ..TurnLimits::default() };
        let cancel = CancellationToken::new();
        let outcome = fixture
            .agent()
            .run_turn_within(&session, "Read a and b.", &cancel, &limits)
            .await
            .unwrap();
        let expected = (StopReason::Limit, steps as u64);
        assert_eq!((outcome.stop_reason, outcome.steps), expected, "budget {budget}");
    }
}

/// The fixture's provider with a price, as the daemon's configuration gives one.
struct Priced(DeepSeek, Option<Price>);

impl Endpoints for Priced {
    fn endpoint(&self, call: &LlmCallConfig) -> Result<Endpoint, String> {
        let mut endpoint = self.0.endpoint(call)?;
        endpoint.price = self.1.clone();
        Ok(endpoint)
    }
}

fn priced_agent(fixture: &Fixture, price: Option<Price>) -> Agent {
    let mut config = AgentConfig::new("deepseek-v4-flash");
    config.approvals = ApprovalPolicy::allow_all();
    config.date_context = false;
    let toolbox =
        Arc::new(Toolbox::new(Workspace::new(&fixture.workspace).unwrap(), ToolConfig::default()));
    let endpoints = Arc::new(Priced((*fixture.provider).clone(), price));
    Agent::new(endpoints, toolbox, Arc::new(DenyAll), config, &fixture.workspace)
}

fn usd(cache_hit: f64, cache_miss: f64, output: f64) -> Price {
    Price { cache_hit, cache_miss, output, cache_write: None, currency: "USD".to_owned() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cost_budget_stops_the_turn_once_the_steps_cost_that_much() {
    let fixture = with_files(MockConfig::default()).await;
    fixture.script(three_steps()).await;
    // A dollar per million tokens of every kind: the cost is the tokens over a million.
    let mut agent = priced_agent(&fixture, Some(usd(1.0, 1.0, 1.0)));
    let limits = TurnLimits { max_cost: Some(1e-9), ..TurnLimits::default() };
    let outcome = run(&fixture, &mut agent, limits).await;
    assert_eq!((outcome.stop_reason, outcome.steps), (StopReason::Limit, 1), "{outcome:?}");
    let tokens = outcome.usage.prompt_tokens + outcome.usage.completion_tokens;
    let limit = outcome.limit.clone().unwrap();
    assert_eq!(limit.limit, LimitKind::MaxCost);
    let spent = limit.spent.as_f64().unwrap();
    assert!((spent - tokens as f64 / 1e6).abs() < 1e-12, "{spent} for {tokens} tokens");
    assert_eq!(logged_limits(&fixture).await, vec![limit]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cost_budget_on_a_model_without_a_price_in_usd_runs_no_step() {
    for price in [None, Some(Price { currency: "CNY".to_owned(), ..usd(0.2, 2.0, 3.0) })] {
        let fixture = with_files(MockConfig::default()).await;
        fixture.script(three_steps()).await;
        let mut agent = priced_agent(&fixture, price);
        let limits = TurnLimits { max_cost: Some(1.0), ..TurnLimits::default() };
        let outcome = run(&fixture, &mut agent, limits).await;
        assert_eq!(outcome.stop_reason, StopReason::Error, "{outcome:?}");
        assert!(outcome.error.as_deref().unwrap().contains("cost is unknown"), "{outcome:?}");
        assert!(fixture.mock.requests().is_empty(), "no request was sent");
        let events = events(&fixture).await;
        assert!(!events.iter().any(|e| matches!(e.data, EventData::StepStart(_))));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_cancels_the_streaming_step_and_names_the_limit() {
    let mut config = MockConfig::default();
    config.stream.inter_chunk_delay_ms = 50;
    let fixture = with_files(config).await;
    let long = "A long answer, streamed slowly, one piece at a time, far longer than the timeout. "
        .repeat(20);
    fixture.script(json!([{ "reasoning": "Think.", "content": long }])).await;
    let mut agent = fixture.agent();
    let timeout = Duration::from_millis(300);
    let limits = TurnLimits { timeout: Some(timeout), ..TurnLimits::default() };
    let outcome = run(&fixture, &mut agent, limits).await;
    assert_eq!(outcome.stop_reason, StopReason::Limit, "{outcome:?}");
    let limit = outcome.limit.clone().unwrap();
    assert_eq!((limit.limit, limit.value.to_string()), (LimitKind::Timeout, "0.3".to_owned()));
    assert!(limit.spent.as_f64().unwrap() >= 0.3, "{limit:?}");
    assert_eq!(logged_limits(&fixture).await, vec![limit]);
    // Logged as a cancellation, as `session/cancel` would have: no half message.
    let events = events(&fixture).await;
    assert!(events.iter().any(|e| matches!(&e.data, EventData::StepError(s) if s.cancelled)));
    assert!(!events.iter().any(|e| matches!(e.data, EventData::AssistantMessage(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_from_the_caller_under_a_timeout_is_a_plain_cancellation() {
    let mut config = MockConfig::default();
    config.stream.inter_chunk_delay_ms = 50;
    let fixture = with_files(config).await;
    fixture.script(json!([{ "reasoning": "Think.", "content": "Slow. ".repeat(100) }])).await;
    let mut agent = fixture.agent();
    let cancel = CancellationToken::new();
    let limits = TurnLimits { timeout: Some(Duration::from_secs(600)), ..TurnLimits::default() };
    let (session, token) = (fixture.session.clone(), cancel.clone());
    let turn = tokio::spawn(async move {
        agent.run_turn_within(&session, "Talk.", &token, &limits).await.unwrap()
    });
    // Once the step streams, the caller cancels.
    let (stored, mut live) = fixture.session.subscribe(0).await.unwrap();
    let streaming = |event: &Event| matches!(event.data, EventData::AssistantChunk(_));
    if !stored.iter().any(streaming) {
        while !streaming(&live.recv().await.unwrap()) {}
    }
    cancel.cancel();
    let outcome = turn.await.unwrap();
    assert_eq!((outcome.stop_reason, outcome.limit), (StopReason::Cancelled, None));
    assert!(logged_limits(&fixture).await.is_empty());
}
