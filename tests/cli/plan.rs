//! Plans end to end (docs/plans.md): a turn of `dsh prompt` whose model keeps a plan with
//! `update_plan` — twice, the second time with a step completed, and once refused for two steps
//! in progress, which the model reads as a tool error — printed as it changes, logged as
//! `plan/update` after each valid call's result, answered by `session/plan`, in the lines of
//! `dsh prompt --json` (valid against the published schema); `dsh audit` passes and every
//! request rebuilds byte for byte.

use std::path::Path;

use dsh_session::EventData;
use serde_json::{Value, json};

use crate::support::{Env, stdout, tool_reply};

const RULE: &str = "at most one step may be in_progress at a time";

fn plan(steps: &[(&str, &str)]) -> Value {
    let steps: Vec<Value> =
        steps.iter().map(|(step, status)| json!({"step": step, "status": status})).collect();
    json!({"plan": steps})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_keeps_its_plan_and_every_front_of_the_cli_shows_it() {
    let env = Env::new().await;
    let mut first =
        plan(&[("Read the code", "in_progress"), ("Fix it", "pending"), ("Test", "pending")]);
    first["explanation"] = json!("Three steps.");
    env.script(json!([
        tool_reply("Plan first.", "update_plan", first),
        tool_reply("Both now.", "update_plan", plan(&[("Read the code", "in_progress"), ("Fix it", "in_progress")])),
        tool_reply("Progress.", "update_plan", plan(&[("Read the code", "completed"), ("Fix it", "in_progress"), ("Test", "pending")])),
        {"reasoning": "Done.", "content": "Planned."},
    ]))
    .await;
    let (session, output) = env.prompt_new("plan the fix").await;
    assert!(output.status.success(), "{}", stdout(&output));
    let printed = stdout(&output);
    // Each change printed: the headline and one marked line per step.
    assert!(printed.contains("plan (0 of 3 completed): Three steps."), "{printed}");
    assert!(
        printed.contains("plan (1 of 3 completed)\n  [x] Read the code\n  [>] Fix it\n  [ ] Test"),
        "{printed}"
    );
    assert!(printed.contains("← update_plan error"), "{printed}");

    // The log: each valid call's result, then its plan; the refused one sets none.
    let events = env.events(&session);
    let results: Vec<(usize, bool, String)> = events
        .iter()
        .enumerate()
        .filter_map(|(index, event)| match &event.data {
            EventData::ToolResult(result) => Some((index, result.is_error, result.content.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 3);
    assert_eq!(results[0].2, "Plan updated: 0 of 3 steps completed.");
    assert!(results[1].1 && results[1].2.contains(RULE), "{results:?}");
    assert_eq!(results[2].2, "Plan updated: 1 of 3 steps completed.");
    let updates: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, event)| matches!(event.data, EventData::PlanUpdate(_)))
        .map(|(index, _)| index)
        .collect();
    assert_eq!(updates, [results[0].0 + 1, results[2].0 + 1]);

    // The model saw the refusal, with the rule, in its next request; the tool was offered.
    let requests = env.requests();
    assert_eq!(requests.len(), 4);
    let body = |index: usize| String::from_utf8(requests[index].body.clone()).unwrap();
    assert!(body(0).contains(r#""name":"update_plan""#));
    assert!(!body(1).contains(RULE) && body(2).contains(RULE));
    for (index, request) in requests.iter().enumerate() {
        let rebuilt = env.saw_wire(&session, index as u64 + 1).await;
        assert!(rebuilt == request.body, "step {} does not rebuild byte for byte", index + 1);
    }
    env.assert_audit_ok(&session).await;

    // session/plan: the last plan, with where it was logged.
    let conn = env.client().await;
    let current = conn.ok("session/plan", json!({"sessionId": session})).await;
    let last = updates[1] as u64;
    let expected = json!({
        "plan": [
            {"step": "Read the code", "status": "completed"},
            {"step": "Fix it", "status": "in_progress"},
            {"step": "Test", "status": "pending"},
        ],
        "seq": last,
        "callId": current["callId"].clone(),
    });
    assert_eq!(current, expected);
    assert!(current["callId"].as_str().is_some_and(|id| !id.is_empty()), "{current}");

    // Another turn through `dsh prompt --json`: the plan/update line is in the stream and
    // valid against the published schema; session/plan follows.
    env.script(json!([
        tool_reply("Finish.", "update_plan", plan(&[("Read the code", "completed"), ("Fix it", "completed"), ("Test", "completed")])),
        {"reasoning": "Done.", "content": "All done."},
    ]))
    .await;
    let output = env.dsh(&["prompt", "--yes", "--json", "--session", &session, "finish"]).await;
    assert!(output.status.success(), "{}", stdout(&output));
    let schema_path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../protocol/schema/dsh-prompt-json.schema.json");
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(schema_path).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let lines: Vec<Value> =
        stdout(&output).lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    for line in &lines {
        assert!(validator.is_valid(line), "{line}");
    }
    let planned: Vec<&Value> = lines.iter().filter(|line| line["type"] == "plan/update").collect();
    assert_eq!(planned.len(), 1, "{lines:?}");
    assert_eq!(planned[0]["data"]["plan"][2], json!({"step": "Test", "status": "completed"}));
    let current = conn.ok("session/plan", json!({"sessionId": session})).await;
    assert_eq!(current["seq"], planned[0]["seq"]);
    env.assert_audit_ok(&session).await;

    // A session without a plan answers an empty one.
    env.script(json!([{"reasoning": "Hi.", "content": "Hello."}])).await;
    let (plain, _) = env.prompt_new("hello").await;
    assert_eq!(conn.ok("session/plan", json!({"sessionId": plain})).await, json!({"plan": []}));
}
