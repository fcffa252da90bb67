//! Steering: a message appended while a step streams joins the next request of the same turn and
//! not the current one; appended while idle, it joins the next turn's first request.

use std::time::Duration;

use dsh_mock::MockConfig;
use dsh_session::{EventData, SteeringMessage, StopReason, reconstruct};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::support::Fixture;

const STEER: &str = "Also mention the tests, please.";

/// A mock that pauses between frames, so that a step streams for a while.
fn slow_stream() -> MockConfig {
    let mut config = MockConfig::default();
    config.stream.inter_chunk_delay_ms = 20;
    config
}

/// Waits (with a deadline) until the session logs an `assistant/chunk` with text: the step is
/// streaming.
async fn wait_for_streaming(fixture: &Fixture) {
    let (stored, mut live) = fixture.session.subscribe(0).await.unwrap();
    if stored.iter().any(|event| matches!(event.data, EventData::AssistantChunk(_))) {
        return;
    }
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let event = live.recv().await.unwrap();
            if matches!(event.data, EventData::AssistantChunk(_)) {
                return;
            }
        }
    })
    .await
    .expect("no chunk streamed");
}

fn body(request: &dsh_mock::RecordedRequest) -> String {
    String::from_utf8(request.body.clone()).unwrap()
}

async fn assert_every_step_rebuilds(fixture: &Fixture) {
    let events = fixture.session.query(|s| s.events().to_vec()).await.unwrap();
    for (index, request) in fixture.mock.requests().iter().enumerate() {
        let rebuilt = reconstruct(&events, index as u64 + 1).unwrap();
        assert!(dsh_provider::wire_body(&rebuilt) == request.body, "step {}", index + 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steering_sent_while_a_step_streams_joins_the_next_request_not_the_current_one() {
    let fixture = Fixture::with_mock(slow_stream()).await;
    std::fs::write(fixture.workspace.join("notes.txt"), "hello\n").unwrap();
    fixture
        .script(json!([
            { "reasoning": "I will read the notes file and then summarize it for the user.",
              "tool_calls": [{ "name": "read_file", "arguments": "{\"path\":\"notes.txt\"}" }] },
            { "reasoning": "Summarize.", "content": "The notes say hello; no tests yet." },
        ]))
        .await;
    let mut agent = fixture.agent();
    let session = fixture.session.clone();
    let turn = tokio::spawn(async move {
        agent.run_turn(&session, "What do the notes say?", &CancellationToken::new()).await
    });
    wait_for_streaming(&fixture).await;
    let steering = EventData::SteeringMessage(SteeringMessage { text: STEER.to_owned() });
    let steered = fixture.session.append(steering).await.unwrap();
    let outcome = turn.await.unwrap().unwrap();
    assert_eq!(outcome.stop_reason, StopReason::Completed);
    assert_eq!(outcome.steps, 2);

    let requests = fixture.mock.requests();
    assert_eq!(requests.len(), 2);
    assert!(!body(&requests[0]).contains(STEER), "the streaming step's request is not changed");
    let next = body(&requests[1]);
    assert!(next.contains(STEER), "the next request carries the steering");
    // It follows the exchange it arrived during: the tool call and its result come first.
    let result = next.find("\"role\":\"tool\"").unwrap();
    assert!(result < next.find(STEER).unwrap(), "steering wedged into the tool exchange: {next}");
    let events = fixture.session.query(|s| s.events().to_vec()).await.unwrap();
    let starts: Vec<u64> = events
        .iter()
        .filter(|e| matches!(e.data, EventData::StepStart(_)))
        .map(|e| e.seq)
        .collect();
    assert!(starts[0] < steered.seq && steered.seq < starts[1]);
    assert_every_step_rebuilds(&fixture).await;
}

/// The model answers without tools while steering arrives: the turn does not end there, the
/// steering gets its own request in the same turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steering_during_a_final_answer_gets_another_step_in_the_same_turn() {
    let fixture = Fixture::with_mock(slow_stream()).await;
    fixture
        .script(json!([
            { "reasoning": "A short answer will do for this question, no tools needed.",
              "content": "Here is a short answer about the project layout." },
            { "reasoning": "The user asked for tests too.", "content": "And the tests live in tests/." },
        ]))
        .await;
    let mut agent = fixture.agent();
    let session = fixture.session.clone();
    let turn = tokio::spawn(async move {
        agent.run_turn(&session, "Describe the layout.", &CancellationToken::new()).await
    });
    wait_for_streaming(&fixture).await;
    let steering = EventData::SteeringMessage(SteeringMessage { text: STEER.to_owned() });
    fixture.session.append(steering).await.unwrap();
    let outcome = turn.await.unwrap().unwrap();
    assert_eq!(outcome.stop_reason, StopReason::Completed, "{:?}", outcome.error);
    assert_eq!(outcome.steps, 2);

    let requests = fixture.mock.requests();
    assert_eq!(requests.len(), 2);
    assert!(!body(&requests[0]).contains(STEER));
    let second = body(&requests[1]);
    assert!(second.contains(STEER));
    // The model sees its own answer before the steering it has not answered yet: the steering
    // is the last message of the request, not wedged before the answer it arrived during.
    let answer = second.find("Here is a short answer").unwrap();
    let steer = second.find(STEER).unwrap();
    assert!(answer < steer, "the steering message comes before the answer it followed: {second}");
    assert_every_step_rebuilds(&fixture).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steering_sent_while_idle_joins_the_next_turns_first_request() {
    let fixture = Fixture::new().await;
    let mut agent = fixture.agent();
    let cancel = CancellationToken::new();
    let first = agent.run_turn(&fixture.session, "First question.", &cancel).await.unwrap();
    assert_eq!(first.stop_reason, StopReason::Completed);
    let steering = EventData::SteeringMessage(SteeringMessage { text: STEER.to_owned() });
    fixture.session.append(steering).await.unwrap();
    assert_eq!(fixture.mock.requests().len(), 1, "idle steering sends nothing by itself");

    let second = agent.run_turn(&fixture.session, "Second question.", &cancel).await.unwrap();
    assert_eq!(second.stop_reason, StopReason::Completed);
    assert_eq!(second.steps, 1);
    let requests = fixture.mock.requests();
    assert_eq!(requests.len(), 2);
    assert!(!body(&requests[0]).contains(STEER));
    let next = body(&requests[1]);
    assert!(next.contains(STEER) && next.contains("Second question."), "{next}");
    assert!(requests[1].hit > 0);
    assert_every_step_rebuilds(&fixture).await;
}

/// Under an output schema, steering that arrives while the model gives an invalid answer asks
/// for a new answer without spending the turn's one correction: a second invalid answer is still
/// corrected, and the third, valid, completes the turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steering_during_an_invalid_answer_does_not_spend_the_correction() {
    let fixture = Fixture::with_mock(slow_stream()).await;
    fixture
        .script(json!([
            { "reasoning": "A long thought before a wrong answer, long enough to steer during it.",
              "content": "Not JSON at all, but a long enough sentence to stream for a while." },
            { "reasoning": "Still wrong.", "content": "{\"tests\": \"none\"}" },
            { "reasoning": "Right.", "content": "{\"tests\": 0}" },
        ]))
        .await;
    let schema = dsh_agent::OutputSchema::new(json!({
        "type": "object",
        "properties": {"tests": {"type": "integer"}},
        "required": ["tests"]
    }))
    .unwrap();
    let mut agent = fixture.agent();
    let session = fixture.session.clone();
    let turn = tokio::spawn(async move {
        let limits = dsh_agent::TurnLimits::default();
        let cancel = CancellationToken::new();
        agent.run_turn_shaped(&session, "Count the tests.", &cancel, &limits, Some(schema)).await
    });
    wait_for_streaming(&fixture).await;
    let steering = EventData::SteeringMessage(SteeringMessage { text: STEER.to_owned() });
    fixture.session.append(steering).await.unwrap();
    let outcome = turn.await.unwrap().unwrap();
    assert_eq!(outcome.stop_reason, StopReason::Completed, "{:?}", outcome.error);
    assert_eq!((outcome.steps, outcome.output), (3, Some(json!({"tests": 0}))));

    let events = fixture.session.query(|s| s.events().to_vec()).await.unwrap();
    let corrections: Vec<&str> = events
        .iter()
        .filter_map(|event| match &event.data {
            EventData::ContextMessage(note)
                if note.source.as_deref() == Some(dsh_agent::OUTPUT_INVALID_SOURCE) =>
            {
                Some(note.text.as_str())
            }
            _ => None,
        })
        .collect();
    assert_eq!(corrections.len(), 1, "{corrections:?}");
    assert!(corrections[0].contains("/tests: \"none\" is not of type \"integer\""));
    let requests = fixture.mock.requests();
    assert_eq!(requests.len(), 3);
    assert!(body(&requests[1]).contains(STEER) && !body(&requests[1]).contains("is not of type"));
    assert!(body(&requests[2]).contains("is not of type"));
    assert_every_step_rebuilds(&fixture).await;
}
