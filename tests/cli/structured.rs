//! Structured answers (docs/scripting.md, "Structured answers"): `dsh prompt --output-schema
//! FILE` holds the turn's final answer to a JSON Schema — the schema logged as a context note,
//! DeepSeek's JSON mode in the logged call config, one logged correction naming what is wrong,
//! then exit status 4 — and every request of such a turn is rebuilt byte for byte from the log.

use std::path::PathBuf;

use dsh_mock::MockConfig;
use dsh_session::{Event, EventData, LimitKind, StopReason};
use serde_json::{Value, json};

use super::scripting::{prompt, valid_lines};
use crate::support::{Env, describe, of_kind, session_id_of, stderr, stdout};

const LIMIT: i32 = 3;
const USAGE: i32 = 2;
const OUTPUT_INVALID: i32 = 4;
const INVALID_PARAMS: i64 = -32602;

fn person_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": false
    })
}

/// `schema` written to a file beside the workspace; its path.
fn schema_file(env: &Env, name: &str, text: &str) -> String {
    let path: PathBuf = env.root.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

fn answer(text: &str) -> Value {
    json!({"reasoning": "Answer.", "content": text})
}

/// The context notes of the session with `source`.
fn notes<'a>(events: &'a [Event], source: &str) -> Vec<&'a str> {
    events
        .iter()
        .filter_map(|event| match &event.data {
            EventData::ContextMessage(note) if note.source.as_deref() == Some(source) => {
                Some(note.text.as_str())
            }
            _ => None,
        })
        .collect()
}

fn turn_end(events: &[Event]) -> dsh_session::TurnEnd {
    events
        .iter()
        .rev()
        .find_map(|event| match &event.data {
            EventData::TurnEnd(end) => Some(end.clone()),
            _ => None,
        })
        .unwrap()
}

/// Every step's request, as the mock received it, is what `dsh saw --wire` rebuilds.
async fn assert_rebuilt(env: &Env, session: &str) {
    let requests = env.requests();
    for (index, request) in requests.iter().enumerate() {
        let rebuilt = env.saw_wire(session, index as u64 + 1).await;
        assert_eq!(
            String::from_utf8_lossy(&rebuilt),
            String::from_utf8_lossy(&request.body),
            "step {}",
            index + 1
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_answer_is_corrected_once_and_the_valid_value_is_the_turn_end_output() {
    let env = Env::with_mock(MockConfig::default()).await;
    let schema = schema_file(&env, "person.json", &person_schema().to_string());
    env.script(json!([
        answer(r#"{"name": "Ada", "age": "thirty-six"}"#),
        answer("```json\n{\"name\": \"Ada\", \"age\": 36}\n```"),
    ]))
    .await;
    let output =
        prompt(&env, &["--json", "--output-schema", &schema], "Who wrote the first program?").await;
    assert!(output.status.success(), "{}", describe(&output));
    let session = session_id_of(&output);

    // The last line carries the validated value, and validates against the published schema.
    let lines = valid_lines(&stdout(&output));
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "turn/end");
    assert_eq!((&last["stopReason"], &last["steps"]), (&json!("completed"), &json!(2)), "{last}");
    assert_eq!(last["output"], json!({"name": "Ada", "age": 36}), "{last}");
    assert!(last.get("outputErrors").is_none(), "{last}");

    // The log: the schema's note after the prompt, the correction between the two answers.
    let events = env.events(&session);
    let shape = notes(&events, "outputSchema");
    assert_eq!(shape.len(), 1, "{shape:?}");
    assert!(shape[0].contains("JSON Schema") && shape[0].contains("\"additionalProperties\""));
    let corrections = notes(&events, "outputInvalid");
    assert_eq!(corrections.len(), 1, "{corrections:?}");
    assert!(corrections[0].contains("/age: \"thirty-six\" is not of type \"integer\""));
    let kinds: Vec<&str> = events.iter().map(|event| event.data.kind()).collect();
    let correction_at = events
        .iter()
        .position(|event| matches!(&event.data, EventData::ContextMessage(note) if note.source.as_deref() == Some("outputInvalid")))
        .unwrap();
    assert_eq!(kinds[correction_at - 1], "step/end", "{kinds:?}");
    assert_eq!(kinds[correction_at + 1], "step/start", "{kinds:?}");
    assert!(
        lines
            .iter()
            .any(|line| line["type"] == "context/message"
                && line["data"]["source"] == "outputInvalid")
    );
    assert_eq!(turn_end(&events).reason, StopReason::Completed);

    // What the model saw: DeepSeek's JSON mode on both requests, the note and then the
    // correction as user messages, each request rebuilt from the log byte for byte.
    let requests = env.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        let body: Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!(body["response_format"], json!({"type": "json_object"}), "{body}");
    }
    let second: Value = serde_json::from_slice(&requests[1].body).unwrap();
    let messages = second["messages"].as_array().unwrap();
    let last_message = messages.last().unwrap();
    assert_eq!(last_message["role"], "user");
    assert_eq!(last_message["content"], corrections[0]);
    assert_rebuilt(&env, &session).await;
    let saw = env.dsh_ok(&["saw", &session, "--step", "2"]).await;
    assert!(stdout(&saw).contains("is not of type"), "{}", stdout(&saw));
    env.assert_audit_ok(&session).await;

    // The next turn of the session, without a schema, drops the JSON mode (a logged config
    // change), and its request is rebuilt as well.
    env.script(json!([answer("Plain text again.")])).await;
    let next = env.prompt_in(&session, "Say it in words.").await;
    assert!(next.status.success(), "{}", describe(&next));
    let third: Value = serde_json::from_slice(&env.requests()[2].body).unwrap();
    assert!(third.get("response_format").is_none(), "{third}");
    assert_rebuilt(&env, &session).await;
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_never_valid_exits_4_with_the_problems_after_one_correction() {
    let env = Env::with_mock(MockConfig::default()).await;
    let schema = schema_file(&env, "person.json", &person_schema().to_string());
    env.script(json!([
        answer("Ada Lovelace, 36."),
        answer(r#"{"name": "Ada"}"#),
        answer("never asked for"),
    ]))
    .await;
    let output = prompt(&env, &["--json", "--output-schema", &schema], "Who?").await;
    assert_eq!(output.status.code(), Some(OUTPUT_INVALID), "{}", describe(&output));
    let error = stderr(&output);
    assert!(error.contains("does not match the output schema"), "{error}");
    assert!(error.contains("\"age\" is a required property"), "{error}");
    let session = session_id_of(&output);

    let lines = valid_lines(&stdout(&output));
    let last = lines.last().unwrap();
    assert_eq!(last["stopReason"], "outputInvalid", "{last}");
    assert!(last.get("output").is_none(), "{last}");
    let problems = last["outputErrors"].as_array().unwrap();
    assert!(problems.iter().any(|p| p.as_str().unwrap().contains("required property")));

    // Both answers and the one correction are logged; no third request.
    let events = env.events(&session);
    assert_eq!(of_kind(&events, "assistant/message").len(), 2);
    let corrections = notes(&events, "outputInvalid");
    assert_eq!(corrections.len(), 1, "{corrections:?}");
    assert!(corrections[0].contains("not a JSON value"), "{}", corrections[0]);
    let end = turn_end(&events);
    assert_eq!(end.reason, StopReason::OutputInvalid);
    assert!(end.error.unwrap().contains("required property"));
    assert_eq!(env.requests().len(), 2);
    assert_rebuilt(&env, &session).await;
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_reached_before_a_valid_answer_exits_3_without_a_correction() {
    let env = Env::with_mock(MockConfig::default()).await;
    let schema = schema_file(&env, "person.json", &person_schema().to_string());
    env.script(json!([answer("not json")])).await;
    let output = prompt(&env, &["--output-schema", &schema, "--max-steps", "1"], "Who?").await;
    assert_eq!(output.status.code(), Some(LIMIT), "{}", describe(&output));
    let session = session_id_of(&output);
    let events = env.events(&session);
    let limits: Vec<LimitKind> = events
        .iter()
        .filter_map(|event| match &event.data {
            EventData::TurnLimit(limit) => Some(limit.limit),
            _ => None,
        })
        .collect();
    assert_eq!(limits, [LimitKind::MaxSteps]);
    assert_eq!(turn_end(&events).reason, StopReason::Limit);
    // The correction is owed to a step that never runs: it is not logged.
    assert!(notes(&events, "outputInvalid").is_empty());
    assert_eq!(env.requests().len(), 1);
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_schema_that_is_not_a_json_schema_is_refused_before_anything_is_logged() {
    let env = Env::with_mock(MockConfig::default()).await;
    let missing = env.root.join("missing.json").to_str().unwrap().to_owned();
    for (name, text, expected) in [
        ("prose.json", "an object with a name", "is not JSON"),
        ("type.json", r#"{"type": "integr"}"#, "not a valid JSON Schema"),
        ("remote.json", r#"{"$ref": "https://example.invalid/s.json"}"#, "not a valid JSON Schema"),
        ("array.json", "[1, 2]", "is an object"),
    ] {
        let path = schema_file(&env, name, text);
        let output = prompt(&env, &["--json", "--output-schema", &path], "Hi.").await;
        assert_eq!(output.status.code(), Some(USAGE), "{name}: {}", describe(&output));
        let error = stderr(&output);
        assert!(error.contains("--output-schema") && error.contains(expected), "{name}: {error}");
        assert!(stdout(&output).is_empty(), "{name}");
    }
    let output = prompt(&env, &["--output-schema", &missing], "Hi.").await;
    assert_eq!(output.status.code(), Some(USAGE), "{}", describe(&output));
    // Nothing started: no daemon, no session, no request.
    assert!(!env.home.join("daemon.lock").exists());
    assert!(env.log_files().is_empty());
    assert!(env.requests().is_empty());

    // Over the API: invalid params, and the session's log holds no turn.
    let _served = env.serve(&[]).await;
    let conn = env.client().await;
    let workspace = env.workspace.display().to_string();
    let created = conn.ok("session/create", json!({"workspace": workspace})).await;
    let session = created["sessionId"].as_str().unwrap().to_owned();
    let before = env.log_values(&session).len();
    for schema in [json!({"type": 7}), json!({"$ref": "file:///etc/passwd"}), json!("object")] {
        let params = json!({"sessionId": session, "text": "x", "outputSchema": schema});
        let message = conn.err("session/prompt", params, INVALID_PARAMS).await;
        assert!(message.starts_with("outputSchema: "), "{schema}: {message}");
    }
    assert_eq!(env.log_values(&session).len(), before);
    assert!(env.requests().is_empty());
    // A schema made valid is taken on the same session.
    env.script(json!([answer(r#"{"name": "Ada", "age": 36}"#)])).await;
    let params = json!({"sessionId": session, "text": "Who?", "outputSchema": person_schema()});
    let result = conn.ok("session/prompt", params).await;
    assert_eq!(result["output"], json!({"name": "Ada", "age": 36}), "{result}");
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_text_transcript_shows_the_correction_between_the_answers() {
    let env = Env::with_mock(MockConfig::default()).await;
    let schema = schema_file(&env, "person.json", &person_schema().to_string());
    env.script(json!([
        answer(r#"{"name": "Ada", "age": 36.5}"#),
        answer(r#"{"name": "Ada", "age": 36}"#)
    ]))
    .await;
    let output = prompt(&env, &["--output-schema", &schema], "Who?").await;
    assert!(output.status.success(), "{}", describe(&output));
    let text = stdout(&output);
    let first = text.find("36.5").unwrap();
    let correction = text.find("↻ the answer does not match the output schema").unwrap();
    let problem = text.find("/age: 36.5 is not of type \"integer\"").unwrap();
    let second = text.rfind("\"age\": 36}").unwrap();
    assert!(first < correction && correction < problem && problem < second, "{text}");
}
