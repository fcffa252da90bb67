//! The rules of plans, the current plan's fold, and `check_log`'s rules for `plan/update`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::*;

fn entry(step: &str, status: PlanStatus) -> PlanEntry {
    PlanEntry { step: step.to_owned(), status }
}

fn event(seq: u64, data: EventData) -> Event {
    Event { seq, time: 1_000 + seq, data }
}

fn plan_update(call_id: &str, plan: Vec<PlanEntry>) -> EventData {
    EventData::PlanUpdate(PlanUpdate { call_id: call_id.to_owned(), explanation: None, plan })
}

fn plan_result(call_id: &str, is_error: bool) -> EventData {
    EventData::ToolResult(ToolResult {
        call_id: call_id.to_owned(),
        name: UPDATE_PLAN_TOOL.to_owned(),
        content: "Plan updated: 0 of 1 steps completed.".to_owned(),
        is_error,
        seen: None,
        images: Vec::new(),
    })
}

/// A turn whose one step calls `update_plan` (call `p1`), with `after_result` logged between
/// its result and the step's end.
fn turn(result_is_error: bool, after_result: Vec<EventData>) -> Vec<Event> {
    let config = LlmCallConfig {
        model: "m".to_owned(),
        profile: None,
        wire: None,
        max_tokens: 4096,
        thinking: false,
        reasoning_effort: None,
        temperature: None,
        top_p: None,
        response_format: None,
    };
    let header = EpochHeader::new(config, None, vec![]);
    let mut data = vec![
        EventData::SessionMeta(SessionMeta {
            format_version: FORMAT_VERSION,
            session_id: "s".to_owned(),
            workspace: "/w".to_owned(),
            forked_from: None,
            pin: None,
            parent: None,
        }),
        EventData::TurnStart(TurnStart { turn: 1 }),
        EventData::UserMessage(UserMessage {
            text: "plan it".to_owned(),
            command: None,
            images: Vec::new(),
        }),
        EventData::StepStart(StepStart { step: 1, turn: 1 }),
        EventData::RequestHeader(RequestHeader { reason: SnapshotReason::Initial, header }),
        EventData::AssistantMessage(AssistantTurn {
            step: 1,
            message: AssistantMessage {
                content: String::new(),
                reasoning_content: None,
                blocks: Vec::new(),
                tool_calls: vec![ToolCall {
                    id: "p1".to_owned(),
                    name: UPDATE_PLAN_TOOL.to_owned(),
                    arguments: "{}".to_owned(),
                }],
            },
        }),
        plan_result("p1", result_is_error),
    ];
    data.extend(after_result);
    data.push(EventData::StepEnd(StepEnd {
        step: 1,
        finish_reason: "tool_calls".to_owned(),
        usage: Usage::default(),
    }));
    data.push(EventData::TurnEnd(TurnEnd { turn: 1, reason: StopReason::Completed, error: None }));
    data.into_iter().enumerate().map(|(seq, data)| event(seq as u64, data)).collect()
}

#[test]
fn two_steps_in_progress_are_refused_with_the_rule() {
    let plan = [
        entry("read", PlanStatus::Completed),
        entry("edit", PlanStatus::InProgress),
        entry("test", PlanStatus::InProgress),
    ];
    let error = check_plan(None, &plan).unwrap_err();
    assert_eq!(
        error,
        "at most one step may be in_progress at a time, and steps 2, 3 are: mark the others \
         pending or completed"
    );
    assert_eq!(check_plan(None, &plan[..2]), Ok(()));
}

#[test]
fn empty_multi_line_and_long_steps_and_long_plans_are_refused() {
    let blank =
        check_plan(None, &[entry("a", PlanStatus::Pending), entry("  ", PlanStatus::Pending)]);
    assert_eq!(blank.unwrap_err(), "step 2 has no text: every step says what it is");
    let lines = check_plan(None, &[entry("a\nb", PlanStatus::Pending)]);
    assert_eq!(lines.unwrap_err(), "step 1 spans several lines: a step is one line");
    let long = "x".repeat(MAX_PLAN_STEP_CHARS + 1);
    let error = check_plan(None, &[entry(&long, PlanStatus::Pending)]).unwrap_err();
    assert!(error.starts_with("step 1 has 501 characters"), "{error}");
    assert_eq!(check_plan(None, &[entry(&long[1..], PlanStatus::Pending)]), Ok(()));
    let many = vec![entry("s", PlanStatus::Pending); MAX_PLAN_ENTRIES + 1];
    let error = check_plan(None, &many).unwrap_err();
    assert!(error.starts_with("a plan has at most 50 steps; this one has 51"), "{error}");
    assert_eq!(check_plan(None, &many[1..]), Ok(()));
    let explanation = "e".repeat(MAX_PLAN_EXPLANATION_CHARS + 1);
    assert!(check_plan(Some(&explanation), &[]).is_err());
    assert_eq!(check_plan(Some(&explanation[1..]), &[]), Ok(()));
}

#[test]
fn the_tool_result_counts_completed_steps() {
    let update = PlanUpdate {
        call_id: "p".to_owned(),
        explanation: None,
        plan: vec![
            entry("a", PlanStatus::Completed),
            entry("b", PlanStatus::InProgress),
            entry("c", PlanStatus::Pending),
        ],
    };
    assert_eq!(update.tool_result(), "Plan updated: 1 of 3 steps completed.");
    assert_eq!(update.in_progress().map(|e| e.step.as_str()), Some("b"));
    let cleared = PlanUpdate { plan: Vec::new(), ..update };
    assert_eq!(cleared.tool_result(), "Plan cleared.");
}

#[test]
fn the_current_plan_is_the_last_update() {
    assert_eq!(current_plan(&turn(false, vec![])), None);
    let first = plan_update("p1", vec![entry("a", PlanStatus::InProgress)]);
    let events = turn(false, vec![first.clone()]);
    assert_eq!(check_log(&events), vec![]);
    let current = current_plan(&events).unwrap();
    assert_eq!(current.seq, 7);
    assert_eq!(EventData::PlanUpdate(current.update), first);
    // The event round-trips through the line codec, spelled as the tool spells a status.
    let line = encode_event(&events[7]);
    assert!(line.contains(r#""type":"plan/update""#), "{line}");
    assert!(line.contains(r#"{"callId":"p1","plan":[{"step":"a","status":"in_progress"}]}"#));
    assert_eq!(decode_event(&line, 8).unwrap(), events[7]);
}

#[test]
fn a_plan_update_follows_its_successful_result_and_obeys_the_rules() {
    let ok = || plan_update("p1", vec![entry("a", PlanStatus::Pending)]);
    let found = |events: Vec<Event>| -> Vec<String> {
        check_log(&events).into_iter().map(|d| d.message).collect()
    };
    // After a refused call: no plan was set.
    let refused = found(turn(true, vec![ok()]));
    assert!(
        refused.iter().any(|m| m.contains("not the successful update_plan result")),
        "{refused:?}"
    );
    // Naming another call, or a second update for the same call.
    let other = found(turn(false, vec![plan_update("p2", vec![])]));
    assert!(other.iter().any(|m| m.contains("names call `p2`")), "{other:?}");
    let twice = found(turn(false, vec![ok(), ok()]));
    assert_eq!(twice.len(), 1, "{twice:?}");
    // A plan that breaks a rule.
    let two = vec![entry("a", PlanStatus::InProgress), entry("b", PlanStatus::InProgress)];
    let broken = found(turn(false, vec![plan_update("p1", two)]));
    assert!(
        broken.iter().any(|m| m.starts_with("plan/update breaks a rule of plans")),
        "{broken:?}"
    );
}
