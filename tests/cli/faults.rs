//! Provider faults leave the session well-formed and auditable, and the user sees a clear
//! message: a 429 is retried with the same bytes, a 401 is not, a cut stream fails the step.

use dsh_mock::MockConfig;
use dsh_session::{EventData, StopReason};
use serde_json::json;

use crate::support::{Env, describe, of_kind, stderr, stdout};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_is_retried_with_the_same_bytes_and_the_turn_completes() {
    let env = Env::new().await;
    env.fault(json!({ "http": { "status": 429 } })).await;
    env.script(json!([{ "reasoning": "Easy.", "content": "Hello back." }])).await;
    let (session, output) = env.prompt_new("Say hello.").await;
    assert!(output.status.success(), "{}", describe(&output));
    assert!(stdout(&output).contains("retrying"), "the retry is shown: {}", describe(&output));

    let requests = env.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].status, 429);
    assert_eq!(requests[1].outcome, "ok");
    assert!(requests[0].body == requests[1].body, "the retried body is byte-identical");
    let events = env.events(&session);
    let retries = of_kind(&events, "llm/retry");
    assert_eq!(retries.len(), 1);
    let EventData::LlmRetry(retry) = &retries[0].data else { unreachable!() };
    assert_eq!((retry.step, retry.attempt), (1, 1));
    assert!(retry.error.contains("429"), "{retry:?}");
    let end = of_kind(&events, "turn/end");
    assert!(matches!(&end[0].data, EventData::TurnEnd(e) if e.reason == StopReason::Completed));
    assert_eq!(env.saw_wire(&session, 1).await, requests[1].body);
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_401_fails_the_turn_with_a_clear_message_that_does_not_leak_the_key() {
    let env = Env::new().await;
    let key = "sk-wrong-0123456789abcdef-XYZW";
    let workspace = env.workspace.to_str().unwrap().to_owned();
    let output = crate::support::run(
        env.command_with_key(key, &["prompt", "--yes", "--workspace", &workspace, "Hi."]),
    )
    .await;
    assert!(!output.status.success(), "{}", describe(&output));
    let requests = env.requests();
    assert_eq!(requests.len(), 1, "a 401 is not retried");
    assert_eq!(requests[0].status, 401);

    let (out, err) = (stdout(&output), stderr(&output));
    assert!(!out.contains(key) && !err.contains(key), "the key leaked: {}", describe(&output));
    assert!(
        err.contains("401") && err.to_lowercase().contains("auth"),
        "stderr explains the failure: {}",
        describe(&output)
    );
    let session = crate::support::session_id_of(&output);
    let log = std::fs::read_to_string(env.log_path(&session)).unwrap();
    assert!(!log.contains(key), "the key is in the log");
    let events = env.events(&session);
    assert_eq!(of_kind(&events, "step/error").len(), 1);
    assert!(of_kind(&events, "assistant/message").is_empty());
    let end = of_kind(&events, "turn/end");
    assert!(matches!(&end[0].data, EventData::TurnEnd(e) if e.reason == StopReason::Error));
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_midway_fails_the_step_without_a_half_message() {
    let mut config = MockConfig::default();
    config.stream.inter_chunk_delay_ms = 5;
    let env = Env::with_mock(config).await;
    env.fault(json!({ "drop_after_frames": 6 })).await;
    env.script(json!([{
        "reasoning": "Let me think about this for quite a few words before answering you.",
        "content": "This answer is long enough to be cut off in the middle of the stream.",
    }]))
    .await;
    let (session, output) = env.prompt_new("Tell me something.").await;
    assert!(!output.status.success(), "{}", describe(&output));
    let all = format!("{}{}", stdout(&output), stderr(&output));
    assert!(all.contains("cut off"), "the user is told the stream was cut: {}", describe(&output));

    let requests = env.requests();
    assert_eq!(requests.len(), 1, "a stream that delivered deltas is not retried");
    assert_eq!(requests[0].outcome, "dropped");
    let events = env.events(&session);
    assert!(!of_kind(&events, "assistant/chunk").is_empty(), "frames were delivered and logged");
    assert!(of_kind(&events, "assistant/message").is_empty(), "no half message on the surface");
    let errors = of_kind(&events, "step/error");
    assert_eq!(errors.len(), 1);
    let EventData::StepError(error) = &errors[0].data else { unreachable!() };
    assert!(!error.cancelled && error.error.contains("cut off"), "{error:?}");
    let end = of_kind(&events, "turn/end");
    assert!(matches!(&end[0].data, EventData::TurnEnd(e) if e.reason == StopReason::Error));
    env.assert_audit_ok(&session).await;

    // The session goes on: the next turn's request does not carry the half answer.
    let output = env.prompt_in(&session, "Try again.").await;
    assert!(output.status.success(), "{}", describe(&output));
    let requests = env.requests();
    let body = String::from_utf8_lossy(&requests.last().unwrap().body);
    assert!(!body.contains("This answer"), "{body}");
    assert!(requests.last().unwrap().hit > 0);
    env.assert_audit_ok(&session).await;
}
