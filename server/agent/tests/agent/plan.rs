//! `update_plan` in the loop: a valid call's result is followed by its `plan/update`, a refused
//! one (two steps in progress) is a tool error the model sees and sets no plan, the tool never
//! asks even where every class of tool asks, and every request rebuilds byte for byte.

use dsh_agent::approval::{ApprovalPolicy, Policy};
use dsh_session::{
    EventData, PlanStatus, Severity, StopReason, UPDATE_PLAN_TOOL, check_log, current_plan,
    reconstruct,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::support::Fixture;

fn plan_call(plan: serde_json::Value) -> serde_json::Value {
    let call = json!({"name": UPDATE_PLAN_TOOL, "arguments": plan.to_string()});
    json!({"reasoning": "Plan.", "tool_calls": [call]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_is_logged_after_its_result_and_a_refused_one_is_a_tool_error() {
    let fixture = Fixture::new().await;
    fixture
        .script(json!([
            plan_call(json!({"explanation": "Two things.", "plan": [
                {"step": "Read", "status": "in_progress"},
                {"step": "Answer", "status": "pending"}]})),
            plan_call(json!({"plan": [
                {"step": "Read", "status": "in_progress"},
                {"step": "Answer", "status": "in_progress"}]})),
            plan_call(json!({"plan": [
                {"step": "Read", "status": "completed"},
                {"step": "Answer", "status": "in_progress"}]})),
            {"reasoning": "Done.", "content": "All done."},
        ]))
        .await;
    // Every class asks, and nobody answers yes: the plan still runs.
    let mut agent = fixture.agent_with(|config| {
        config.approvals = ApprovalPolicy {
            read: Policy::Ask,
            write: Policy::Ask,
            command: Policy::Ask,
            ..ApprovalPolicy::default()
        };
    });
    let outcome = agent.run_turn(&fixture.session, "Go.", &CancellationToken::new()).await.unwrap();
    assert_eq!(outcome.stop_reason, StopReason::Completed, "{outcome:?}");

    let events = fixture.session.query(|s| s.events().to_vec()).await.unwrap();
    let errors: Vec<_> =
        check_log(&events).into_iter().filter(|d| d.severity == Severity::Error).collect();
    assert!(errors.is_empty(), "{errors:?}");
    assert!(!events.iter().any(|e| matches!(e.data, EventData::ApprovalRequest(_))));
    let results: Vec<(String, bool)> = events
        .iter()
        .filter_map(|e| match &e.data {
            EventData::ToolResult(r) => Some((r.content.clone(), r.is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(results[0], ("Plan updated: 0 of 2 steps completed.".to_owned(), false));
    assert!(results[1].1, "{results:?}");
    assert!(results[1].0.contains("at most one step may be in_progress"), "{results:?}");
    assert!(results[1].0.contains("the plan is unchanged"), "{results:?}");
    assert_eq!(results[2], ("Plan updated: 1 of 2 steps completed.".to_owned(), false));
    // Two plans, each right after its result.
    let updates: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e.data, EventData::PlanUpdate(_)))
        .map(|(index, _)| index)
        .collect();
    assert_eq!(updates.len(), 2);
    for index in &updates {
        assert!(matches!(&events[index - 1].data, EventData::ToolResult(r) if !r.is_error));
    }
    let current = current_plan(&events).unwrap();
    assert_eq!(current.seq, updates[1] as u64);
    let statuses: Vec<PlanStatus> = current.update.plan.iter().map(|e| e.status).collect();
    assert_eq!(statuses, [PlanStatus::Completed, PlanStatus::InProgress]);
    // The model saw the refusal; the requests rebuild byte for byte.
    let requests = fixture.mock.requests();
    assert_eq!(requests.len(), 4);
    let third = String::from_utf8(requests[2].body.clone()).unwrap();
    assert!(third.contains("at most one step may be in_progress"));
    for (index, request) in requests.iter().enumerate() {
        let rebuilt = reconstruct(&events, index as u64 + 1).unwrap();
        assert!(dsh_provider::wire_body(&rebuilt) == request.body, "step {}", index + 1);
    }
}
