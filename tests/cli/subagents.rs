//! Sub-agents end to end (docs/subagents.md): a parent step whose two `task` calls — one
//! `fresh`, one `fork` — run two child sessions at once, each doing a tool call; both children
//! audit clean, name their parent in `session/meta`, and the parent's next request carries both
//! answers; the `fork` child's first request hits the parent's cached prefix; `session/usage`
//! of the parent lists each child and a total that includes them, checked by hand. Budgets
//! (`[subagents]` in the user's configuration) stop looping children with the reason logged in
//! the child (`turn/limit`) and named in the parent's tool result; bad calls get tool errors;
//! a child whose provider fails is an error result and the parent's turn goes on.
//!
//! The mock's scripts match each request by its last user message, so the two children's
//! requests, which interleave, take their own answers.

use dsh_session::{EventData, LimitKind, TaskContext, TurnLimit, Usage};
use serde_json::{Value, json};

use crate::support::{Env, describe, of_kind, stdout, tool_results};

fn task(description: &str, prompt: &str, context: &str) -> Value {
    json!({"name": "task", "arguments": json!({
        "description": description,
        "prompt": prompt,
        "context": context,
    }).to_string()})
}

fn call(name: &str, arguments: Value) -> Value {
    json!({"name": name, "arguments": arguments.to_string()})
}

/// A script answering only requests whose last user message contains `marker`.
fn when(marker: &str, mut reply: Value) -> Value {
    reply["match"] = json!({"last_user_contains": marker});
    reply
}

/// The children the parent's log spawned: (call id, child session, context).
fn spawned(events: &[dsh_session::Event]) -> Vec<(String, String, TaskContext)> {
    events
        .iter()
        .filter_map(|event| match &event.data {
            EventData::TaskSpawn(spawn) => {
                Some((spawn.call_id.clone(), spawn.session_id.clone(), spawn.context))
            }
            _ => None,
        })
        .collect()
}

fn usage_sum(events: &[dsh_session::Event]) -> Usage {
    events.iter().fold(Usage::default(), |sum, event| match &event.data {
        EventData::StepEnd(end) => sum.add(&end.usage),
        _ => sum,
    })
}

/// deepseek-v4-flash's price (server/config/src/defaults.toml), per million tokens.
fn by_hand(usage: &Usage) -> f64 {
    (usage.cache_hit_tokens as f64 * 0.0028
        + usage.cache_miss_tokens as f64 * 0.14
        + usage.completion_tokens as f64 * 0.28)
        / 1_000_000.0
}

fn limits(events: &[dsh_session::Event]) -> Vec<TurnLimit> {
    events
        .iter()
        .filter_map(|event| match &event.data {
            EventData::TurnLimit(limit) => Some(limit.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_and_a_fork_child_run_in_one_step_and_the_parent_reads_both_answers() {
    let env = Env::new().await;
    std::fs::write(env.workspace.join("a.txt"), "alpha\n").unwrap();
    env.script(json!([
        when("PARENT", json!({"reasoning": "Delegate.", "tool_calls": [
            task("list the workspace", "FRESH-TASK: list the workspace", "fresh"),
            task("read a.txt", "FORK-TASK: read a.txt", "fork"),
        ]})),
        when("FRESH-TASK", json!({"reasoning": "List.", "tool_calls": [call("list_dir", json!({"path": "."}))]})),
        when("FRESH-TASK", json!({"reasoning": "Done.", "content": "FRESH-ANSWER: a.txt is there"})),
        when("FORK-TASK", json!({"reasoning": "Read.", "tool_calls": [call("read_file", json!({"path": "a.txt"}))]})),
        when("FORK-TASK", json!({"reasoning": "Done.", "content": "FORK-ANSWER: it says alpha"})),
        when("PARENT", json!({"reasoning": "Done.", "content": "Both answered."})),
    ]))
    .await;
    let (parent, output) = env.prompt_new("PARENT: delegate two tasks").await;
    assert!(output.status.success(), "{}", describe(&output));
    let printed = stdout(&output);

    // The parent logged both children, in the calls' order, and answered both calls with
    // their answers and a summary line.
    let events = env.events(&parent);
    let mut children = spawned(&events);
    assert_eq!(children.len(), 2, "{children:?}");
    // Logged as each child exists (they are created at once): put them in the calls' order.
    children.sort_by_key(|(_, _, context)| *context == TaskContext::Fork);
    assert_eq!((children[0].2, children[1].2), (TaskContext::Fresh, TaskContext::Fork));
    let results = tool_results(&events);
    assert_eq!(results.len(), 2);
    for ((call_id, child, _), answer) in children.iter().zip(["FRESH-ANSWER", "FORK-ANSWER"]) {
        let result = results.iter().find(|result| result.call_id == *call_id).unwrap();
        assert!(!result.is_error, "{result:?}");
        assert!(result.content.starts_with(answer), "{}", result.content);
        assert!(result.content.contains(&format!("[sub-agent {child} (")), "{}", result.content);
        assert!(result.content.contains("completed · 2 steps"), "{}", result.content);
        // `dsh prompt` printed the child's start and end.
        assert!(printed.contains(&format!("sub-agent {child}")), "{printed}");
    }

    // Each child: its own log naming its parent and call, a tool call of its own, clean audit.
    for ((call_id, child, context), tool) in children.iter().zip(["list_dir", "read_file"]) {
        let child_events = env.events(child);
        let EventData::SessionMeta(meta) = &child_events[0].data else { unreachable!() };
        let link = meta.parent.as_ref().unwrap();
        assert_eq!((&link.session_id, &link.tool_call_id, link.depth), (&parent, call_id, 1));
        assert_eq!(
            meta.forked_from.as_ref().map(|origin| origin.session_id.clone()),
            (*context == TaskContext::Fork).then(|| parent.clone())
        );
        // `dsh prompt` printed each of its steps, one line each.
        for line in [
            format!("sub-agent {child} step 1: {tool} · "),
            format!("sub-agent {child} step 2: answered · "),
        ] {
            assert!(printed.contains(&line), "{line} in {printed}");
        }
        let child_results = tool_results(&child_events);
        assert_eq!(child_results.len(), 1);
        assert_eq!(child_results[0].name, tool);
        assert!(!child_results[0].is_error, "{:?}", child_results[0]);
        env.assert_audit_ok(child).await;
    }
    env.assert_audit_ok(&parent).await;

    // The requests: the parent's first, the children's four in some interleaving, the
    // parent's last carrying both answers.
    let requests = env.requests();
    assert_eq!(requests.len(), 6);
    let body = |index: usize| String::from_utf8(requests[index].body.clone()).unwrap();
    assert!(body(0).contains(r#""name":"task""#), "the parent is offered the task tool");
    assert!(body(5).contains("FRESH-ANSWER") && body(5).contains("FORK-ANSWER"));
    // A fresh child at the deepest depth is not offered `task`; a fork child keeps its
    // parent's tools (and so its cached prefix).
    let first_of = |marker: &str| {
        (1..5).find(|&index| body(index).contains(&format!(r#""content":"{marker}"#))).unwrap()
    };
    let (fresh, fork) = (first_of("FRESH-TASK"), first_of("FORK-TASK"));
    assert!(!body(fresh).contains(r#""name":"task""#));
    assert!(body(fork).contains(r#""name":"task""#));
    let (parent_prompt, fork_hit) = (requests[0].prompt_tokens, requests[fork].hit);
    eprintln!(
        "the fork child's first request hit {fork_hit} of the parent's {parent_prompt} tokens"
    );
    assert!(
        fork_hit as f64 >= 0.9 * parent_prompt as f64,
        "the fork child's first request hit {fork_hit} of the parent's {parent_prompt} tokens"
    );

    // session/usage: one entry per child, and a total of the parent's own steps plus the
    // children's, by hand from the logs at the configured price.
    let conn = env.client().await;
    let usage = conn.ok("session/usage", json!({"sessionId": parent})).await;
    let entries = usage["children"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "{usage}");
    let own = usage_sum(&events);
    let mut total = own;
    let mut cost = by_hand(&own);
    for (_, child, _) in &children {
        let spent = usage_sum(&env.events(child));
        let entry = entries.iter().find(|entry| entry["sessionId"] == json!(child)).unwrap();
        assert_eq!(entry["steps"], json!(2));
        assert_eq!(entry["usage"], serde_json::to_value(spent).unwrap());
        let child_cost = entry["cost"]["amount"].as_f64().unwrap();
        assert!((child_cost - by_hand(&spent)).abs() < 1e-12, "{entry}");
        total = total.add(&spent);
        cost += by_hand(&spent);
    }
    assert_eq!(usage["totals"], serde_json::to_value(own).unwrap());
    assert_eq!(usage["withChildren"]["usage"], serde_json::to_value(total).unwrap());
    let amount = usage["withChildren"]["cost"]["amount"].as_f64().unwrap();
    assert!((amount - cost).abs() < 1e-12, "total {amount}, by hand {cost}");

    // `dsh sessions` nests each child under its parent.
    let listing = stdout(&env.dsh_ok(&["sessions"]).await);
    let line_of = |id: &str| listing.lines().find(|line| line.contains(id)).unwrap().to_owned();
    assert!(!line_of(&parent).starts_with(' '), "{listing}");
    for (_, child, _) in &children {
        assert!(line_of(child).starts_with("  "), "{listing}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_stop_looping_children_with_the_reason_in_both_logs() {
    let env = Env::new().await;
    std::fs::write(env.workspace.join("a.txt"), "alpha\n").unwrap();
    // A child that would loop forever: every request of it lists the workspace again.
    let looping = |marker: &str, count: usize| -> Vec<Value> {
        (0..count)
            .map(|index| {
                when(
                    marker,
                    json!({
                        "reasoning": "Again.",
                        "content": format!("progress {index}"),
                        "tool_calls": [call("list_dir", json!({"path": "."}))],
                    }),
                )
            })
            .collect()
    };

    // max_steps: two steps, then the budget; the parent's result says so and what it had.
    std::fs::write(env.user_config(), "[subagents]\nmax_steps = 2\n").unwrap();
    let mut scripts = vec![when(
        "PARENT-STEPS",
        json!({"reasoning": "Go.", "tool_calls": [
            task("loop", "LOOP-STEPS: list forever", "fresh"),
        ]}),
    )];
    scripts.extend(looping("LOOP-STEPS", 4));
    scripts.push(when("PARENT-STEPS", json!({"reasoning": "Ok.", "content": "Stopped."})));
    env.script(Value::Array(scripts)).await;
    let (parent, output) = env.prompt_new("PARENT-STEPS: loop").await;
    assert!(output.status.success(), "{}", describe(&output));
    let events = env.events(&parent);
    let (_, child, _) = spawned(&events).remove(0);
    let child_events = env.events(&child);
    assert_eq!(of_kind(&child_events, "step/start").len(), 2);
    let logged = limits(&child_events);
    assert_eq!(logged.len(), 1);
    assert_eq!(
        (logged[0].limit, logged[0].value.as_u64(), logged[0].spent.as_u64()),
        (LimitKind::MaxSteps, Some(2), Some(2))
    );
    let result = &tool_results(&events)[0];
    assert!(result.is_error, "{result:?}");
    assert!(
        result.content.contains("stopped by its budget: max_steps reached (2 of 2)"),
        "{}",
        result.content
    );
    assert!(result.content.contains("found so far:\nprogress 1"), "{}", result.content);
    env.assert_audit_ok(&child).await;
    env.assert_audit_ok(&parent).await;

    // max_cost: the first step of a fresh child costs more than $0.00001 (over 72 uncached
    // prompt tokens at $0.14 per million), so it stops after one step.
    std::fs::write(env.user_config(), "[subagents]\nmax_cost = 0.00001\n").unwrap();
    let mut scripts = vec![when(
        "PARENT-COST",
        json!({"reasoning": "Go.", "tool_calls": [
            task("loop", "LOOP-COST: list forever", "fresh"),
        ]}),
    )];
    scripts.extend(looping("LOOP-COST", 3));
    scripts.push(when("PARENT-COST", json!({"reasoning": "Ok.", "content": "Stopped."})));
    env.script(Value::Array(scripts)).await;
    let (parent, output) = env.prompt_new("PARENT-COST: loop").await;
    assert!(output.status.success(), "{}", describe(&output));
    let events = env.events(&parent);
    let (_, child, _) = spawned(&events).remove(0);
    let child_events = env.events(&child);
    assert_eq!(of_kind(&child_events, "step/start").len(), 1);
    let logged = limits(&child_events);
    assert_eq!((logged.len(), logged[0].limit), (1, LimitKind::MaxCost));
    let spent = logged[0].spent.as_f64().unwrap();
    assert!((spent - by_hand(&usage_sum(&child_events))).abs() < 1e-12, "{spent}");
    let result = &tool_results(&events)[0];
    assert!(
        result.content.contains("stopped by its budget: max_cost reached"),
        "{}",
        result.content
    );
    assert!(result.content.contains("found so far:\nprogress 0"), "{}", result.content);
    env.assert_audit_ok(&child).await;
    env.assert_audit_ok(&parent).await;

    // Two budgets reached at once (one step, and one token): one reason, the first checked.
    std::fs::write(env.user_config(), "[subagents]\nmax_steps = 1\nmax_tokens = 1\n").unwrap();
    let mut scripts = vec![when(
        "PARENT-BOTH",
        json!({"reasoning": "Go.", "tool_calls": [
            task("loop", "LOOP-BOTH: list forever", "fresh"),
        ]}),
    )];
    scripts.extend(looping("LOOP-BOTH", 2));
    scripts.push(when("PARENT-BOTH", json!({"reasoning": "Ok.", "content": "Stopped."})));
    env.script(Value::Array(scripts)).await;
    let (parent, output) = env.prompt_new("PARENT-BOTH: loop").await;
    assert!(output.status.success(), "{}", describe(&output));
    let events = env.events(&parent);
    let (_, child, _) = spawned(&events).remove(0);
    let logged = limits(&env.events(&child));
    assert_eq!((logged.len(), logged[0].limit), (1, LimitKind::MaxSteps), "{logged:?}");
    assert!(tool_results(&events)[0].content.contains("max_steps reached (1 of 1)"));
    env.assert_audit_ok(&parent).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_task_calls_and_a_failing_child_are_tool_errors_and_the_parent_goes_on() {
    let env = Env::new().await;
    env.script(json!([
        when(
            "PARENT",
            json!({"reasoning": "Try.", "tool_calls": [
                task("empty", "  ", "fresh"),
                task("odd", "do it", "sideways"),
                task("fails", "FAILING-TASK: go", "fresh"),
            ]})
        ),
        // The child's provider refuses its answer: a non-retryable failure.
        when("FAILING-TASK", json!({"content": "x", "finish_reason": "content_filter"})),
        when("PARENT", json!({"reasoning": "Done.", "content": "Carried on."})),
    ]))
    .await;
    let (parent, output) = env.prompt_new("PARENT: three bad tasks").await;
    assert!(output.status.success(), "{}", describe(&output));
    let events = env.events(&parent);
    let results = tool_results(&events);
    assert_eq!(results.len(), 3);
    assert!(results.iter().all(|result| result.is_error), "{results:?}");
    assert!(results[0].content.contains("the prompt is empty"), "{}", results[0].content);
    assert!(results[1].content.contains("unknown context `sideways`"), "{}", results[1].content);
    assert!(results[2].content.contains("The sub-agent failed:"), "{}", results[2].content);
    assert!(results[2].content.contains("content_filter"), "{}", results[2].content);
    // Only the valid call made a child; the parent's turn went on to its answer.
    let children = spawned(&events);
    assert_eq!(children.len(), 1);
    let child_events = env.events(&children[0].1);
    assert_eq!(of_kind(&child_events, "step/error").len(), 1);
    let requests = env.requests();
    let last = String::from_utf8(requests.last().unwrap().body.clone()).unwrap();
    assert!(last.contains("unknown context"), "the parent's next request carries the errors");
    assert!(stdout(&output).contains("Carried on."));
    env.assert_audit_ok(&children[0].1).await;
    env.assert_audit_ok(&parent).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_parent_cancels_its_children() {
    let env = Env::new().await;
    env.script(json!([
        when(
            "PARENT",
            json!({"reasoning": "Go.", "tool_calls": [
                task("slow one", "SLOW-TASK one", "fresh"),
                task("slow two", "SLOW-TASK two", "fresh"),
            ]})
        ),
        when("SLOW-TASK", json!({"content": "never", "delay_ms": 600_000})),
        when("SLOW-TASK", json!({"content": "never", "delay_ms": 600_000})),
    ]))
    .await;
    let served = env.serve(&[]).await;
    let conn = env.client().await;
    let created =
        conn.ok("session/create", json!({"workspace": env.workspace.display().to_string()})).await;
    let parent = created["sessionId"].as_str().unwrap().to_owned();
    let prompting = {
        let conn = std::sync::Arc::clone(&conn);
        let params = json!({"sessionId": parent, "text": "PARENT: two slow tasks"});
        tokio::spawn(async move { conn.request("session/prompt", params).await })
    };
    // Both children's requests are held by the mock: cancel the parent then.
    env.wait_for_requests(3).await;
    assert_eq!(
        conn.ok("session/cancel", json!({"sessionId": parent})).await,
        json!({"cancelled": true})
    );
    let answer = prompting.await.unwrap();
    assert_eq!(answer["result"]["stopReason"], "cancelled", "{answer}");
    let events = env.events(&parent);
    let children = spawned(&events);
    assert_eq!(children.len(), 2);
    for result in tool_results(&events) {
        assert!(result.is_error && result.content.contains("was cancelled"), "{result:?}");
    }
    for (_, child, _) in &children {
        let child_events = env.events(child);
        let ends = of_kind(&child_events, "turn/end");
        let EventData::TurnEnd(end) = &ends.last().unwrap().data else { unreachable!() };
        assert_eq!(end.reason, dsh_session::StopReason::Cancelled);
        env.assert_audit_ok(child).await;
    }
    env.assert_audit_ok(&parent).await;
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_killed_while_a_child_runs_closes_both_at_the_next_turn() {
    let env = Env::new().await;
    let _guard = crate::support::DaemonGuard(env.home.clone());
    env.script(json!([
        when(
            "PARENT",
            json!({"reasoning": "Go.", "tool_calls": [
                task("slow", "SLOW-TASK: wait", "fresh"),
            ]})
        ),
        when("SLOW-TASK", json!({"content": "never", "delay_ms": 600_000})),
    ]))
    .await;
    let mut command = env.prompt_new_command("PARENT: one slow task");
    let running = command.spawn().unwrap();
    env.wait_for_requests(2).await;
    let daemon = crate::support::lock_pid(&env.home).unwrap();
    crate::support::kill_daemon_of(&env.home);
    crate::support::wait_gone(daemon).await;
    let output = crate::support::run_child(running).await;
    assert!(!output.status.success(), "{}", describe(&output));
    let parent = crate::support::session_id_of(&output);
    let child = {
        let events = env.events(&parent);
        let children = spawned(&events);
        assert_eq!(children.len(), 1, "the spawn was synced before the kill");
        children[0].1.clone()
    };
    // The child's log ends inside its turn, as the kill left it.
    assert!(of_kind(&env.events(&child), "turn/end").is_empty());

    // The parent's next turn closes the child like a crashed session, and the parent's
    // unanswered call with a result naming the child.
    env.script(json!([when("AGAIN", json!({"reasoning": "Ok.", "content": "Recovered."}))])).await;
    let output = env.prompt_in(&parent, "AGAIN: go on").await;
    assert!(output.status.success(), "{}", describe(&output));
    let child_events = env.events(&child);
    let EventData::TurnEnd(end) = &of_kind(&child_events, "turn/end")[0].data else {
        unreachable!()
    };
    assert_eq!(end.reason, dsh_session::StopReason::Cancelled);
    let events = env.events(&parent);
    let result = &tool_results(&events)[0];
    assert!(result.is_error, "{result:?}");
    assert!(
        result.content.contains(&format!("child session {child} (slow) was interrupted")),
        "{}",
        result.content
    );
    env.assert_audit_ok(&child).await;
    env.assert_audit_ok(&parent).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_childs_approval_is_asked_through_its_parent_naming_the_child() {
    let env = Env::new().await;
    env.script(json!([
        when(
            "PARENT",
            json!({"reasoning": "Go.", "tool_calls": [
                task("write it", "WRITE-TASK: write b.txt", "fresh"),
            ]})
        ),
        when(
            "WRITE-TASK",
            json!({"reasoning": "Write.", "tool_calls": [
                call("write_file", json!({"path": "b.txt", "content": "beta\n"})),
            ]})
        ),
        when("WRITE-TASK", json!({"reasoning": "Done.", "content": "WROTE"})),
        when("PARENT", json!({"reasoning": "Done.", "content": "Written."})),
    ]))
    .await;
    // No `--yes`: a write asks.
    let served = env.serve(&[]).await;
    let conn = env.client().await;
    let created =
        conn.ok("session/create", json!({"workspace": env.workspace.display().to_string()})).await;
    let parent = created["sessionId"].as_str().unwrap().to_owned();
    let subscription = conn.subscribe(&parent, Some(0)).await;
    let prompting = {
        let conn = std::sync::Arc::clone(&conn);
        let params = json!({"sessionId": parent, "text": "PARENT: write through a child"});
        tokio::spawn(async move { conn.request("session/prompt", params).await })
    };
    // The question arrives on the parent's subscription, naming the child.
    let asked = conn.wait_event(&subscription, "approval/request", |_| true).await;
    let events = env.events(&parent);
    let child = spawned(&events).remove(0).1;
    let approval_id = asked["data"]["approvalId"].as_str().unwrap().to_owned();
    assert!(approval_id.starts_with(&format!("{child}/")), "{asked}");
    let summary = asked["data"]["summary"].as_str().unwrap();
    assert!(summary.starts_with(&format!("sub-agent {child} (write it): ")), "{summary}");
    assert_eq!(asked["data"]["tool"], "write_file");
    let answer = conn
        .ok(
            "approval/respond",
            json!({"sessionId": parent, "approvalId": approval_id, "decision": "allow"}),
        )
        .await;
    assert_eq!(answer["accepted"], true, "{answer}");
    let answer = prompting.await.unwrap();
    assert_eq!(answer["result"]["stopReason"], "completed", "{answer}");
    assert_eq!(std::fs::read_to_string(env.workspace.join("b.txt")).unwrap(), "beta\n");
    // Both logs hold the question and the answer; both audit clean.
    let decided = |events: &[dsh_session::Event]| {
        events.iter().any(|event| {
            matches!(&event.data, EventData::ApprovalDecision(decision)
                if decision.decision == dsh_session::ApprovalVerdict::Allow)
        })
    };
    assert!(decided(&env.events(&parent)) && decided(&env.events(&child)));
    let parent_events = env.events(&parent);
    let result = &tool_results(&parent_events)[0];
    assert!(result.content.starts_with("WROTE"), "{}", result.content);
    env.assert_audit_ok(&child).await;
    env.assert_audit_ok(&parent).await;
    served.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parents_own_budget_counts_its_childrens_spend() {
    let env = Env::new().await;
    env.script(json!([
        when(
            "PARENT",
            json!({"reasoning": "Go.", "tool_calls": [
                task("look", "SPEND-TASK: look around", "fresh"),
            ]})
        ),
        when(
            "SPEND-TASK",
            json!({"reasoning": "List.", "tool_calls": [call("list_dir", json!({"path": "."}))]})
        ),
        when("SPEND-TASK", json!({"reasoning": "Done.", "content": "Nothing here."})),
        when("PARENT", json!({"reasoning": "Done.", "content": "Never asked."})),
    ]))
    .await;
    let workspace = env.workspace.display().to_string();
    let output = env
        .dsh(&["prompt", "--yes", "--workspace", &workspace, "--max-tokens", "5000", "PARENT: go"])
        .await;
    let parent = crate::support::session_id_of(&output);
    let events = env.events(&parent);
    let (_, child, _) = spawned(&events).remove(0);
    let tokens = |usage: Usage| usage.prompt_tokens + usage.completion_tokens;
    let own = tokens(usage_sum(&events));
    let children = tokens(usage_sum(&env.events(&child)));
    // The parent's own step stays under the budget; with its child's it is past it, so the
    // turn stops before its second step, the spent tokens counting both.
    assert!(own < 5000 && own + children >= 5000, "own {own}, child {children}");
    assert_eq!(of_kind(&events, "step/start").len(), 1, "{}", describe(&output));
    let logged = limits(&events);
    assert_eq!((logged.len(), logged[0].limit), (1, LimitKind::MaxTokens));
    assert_eq!(logged[0].spent.as_u64(), Some(own + children));
    env.assert_audit_ok(&parent).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_max_depth_2_a_child_starts_a_grandchild_and_usage_counts_both() {
    let env = Env::new().await;
    std::fs::write(env.user_config(), "[subagents]\nmax_depth = 2\n").unwrap();
    env.script(json!([
        when(
            "PARENT",
            json!({"reasoning": "Go.", "tool_calls": [task("one", "L1-TASK: go deeper", "fresh")]})
        ),
        when(
            "L1-TASK",
            json!({"reasoning": "Deeper.", "tool_calls": [task("two", "L2-TASK: answer", "fresh")]})
        ),
        when("L2-TASK", json!({"reasoning": "Answer.", "content": "L2-ANSWER"})),
        when("L1-TASK", json!({"reasoning": "Pass it on.", "content": "L1-ANSWER"})),
        when("PARENT", json!({"reasoning": "Done.", "content": "Deep enough."})),
    ]))
    .await;
    let (parent, output) = env.prompt_new("PARENT: nest").await;
    assert!(output.status.success(), "{}", describe(&output));
    let (_, child, _) = spawned(&env.events(&parent)).remove(0);
    let child_events = env.events(&child);
    let (_, grandchild, _) = spawned(&child_events).remove(0);
    let grandchild_events = env.events(&grandchild);
    let EventData::SessionMeta(meta) = &grandchild_events[0].data else { unreachable!() };
    let link = meta.parent.as_ref().unwrap();
    assert_eq!((link.session_id.as_str(), link.depth), (child.as_str(), 2));
    // The depth-1 child was offered `task`; the depth-2 grandchild, at the limit, was not.
    let requests = env.requests();
    let offered = |marker: &str| {
        let body = requests
            .iter()
            .map(|request| String::from_utf8(request.body.clone()).unwrap())
            .find(|body| body.contains(&format!(r#""content":"{marker}"#)))
            .unwrap();
        body.contains(r#""name":"task""#)
    };
    assert!(offered("L1-TASK") && !offered("L2-TASK"));
    // The parent's usage: its child's entry includes the grandchild's spend.
    let conn = env.client().await;
    let usage = conn.ok("session/usage", json!({"sessionId": parent})).await;
    let with_grandchild = usage_sum(&child_events).add(&usage_sum(&grandchild_events));
    assert_eq!(usage["children"][0]["usage"], serde_json::to_value(with_grandchild).unwrap());
    for session in [&grandchild, &child, &parent] {
        env.assert_audit_ok(session).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_lowers_its_childs_budgets_and_a_larger_one_is_clamped_and_said() {
    let env = Env::new().await;
    std::fs::write(env.user_config(), "[subagents]\nmax_steps = 3\n").unwrap();
    let mut asked = task("loop", "LOOP-ASKED: list forever", "fresh");
    let arguments = json!({
        "description": "loop",
        "prompt": "LOOP-ASKED: list forever",
        "context": "fresh",
        "max_steps": 2,
        "max_tokens": 900_000,
    });
    asked["arguments"] = Value::String(arguments.to_string());
    let looping = (0..4).map(|index| {
        when(
            "LOOP-ASKED",
            json!({
                "reasoning": "Again.",
                "content": format!("progress {index}"),
                "tool_calls": [call("list_dir", json!({"path": "."}))],
            }),
        )
    });
    let scripts = || {
        let mut scripts =
            vec![when("PARENT-ASKED", json!({"reasoning": "Go.", "tool_calls": [asked.clone()]}))];
        scripts.extend(looping.clone());
        scripts.push(when("PARENT-ASKED", json!({"reasoning": "Ok.", "content": "Stopped."})));
        Value::Array(scripts)
    };

    // The call's max_steps (2) is below the configured 3: the child stops after two steps. Its
    // max_tokens (900000) is above the configured 500000: clamped, and the result says so.
    env.script(scripts()).await;
    let (parent, output) = env.prompt_new("PARENT-ASKED: loop").await;
    assert!(output.status.success(), "{}", describe(&output));
    let events = env.events(&parent);
    let (_, child, _) = spawned(&events).remove(0);
    let child_events = env.events(&child);
    assert_eq!(of_kind(&child_events, "step/start").len(), 2);
    let logged = limits(&child_events);
    assert_eq!(
        (logged.len(), logged[0].limit, logged[0].value.as_u64()),
        (1, LimitKind::MaxSteps, Some(2))
    );
    let result = &tool_results(&events)[0];
    assert!(result.content.contains("max_steps reached (2 of 2)"), "{}", result.content);
    assert!(
        result.content.contains(
            "[budgets lowered: max_tokens 900000 asked, 500000 allowed ([subagents] budget); \
             a call may only lower them]"
        ),
        "{}",
        result.content
    );
    env.assert_audit_ok(&child).await;
    env.assert_audit_ok(&parent).await;
    let tokens = |usage: Usage| usage.prompt_tokens + usage.completion_tokens;
    let parent_step = tokens(first_step(&events));
    let child_first = tokens(first_step(&child_events));

    // The same call under a parent turn whose --max-tokens leaves its child fewer tokens than
    // its first step spends: the child gets what remains (clamped, said) and stops after one
    // step; with its spend the parent's turn is over budget and stops too.
    let remainder = child_first - 10;
    let budget = (parent_step + remainder).to_string();
    env.script(scripts()).await;
    let workspace = env.workspace.display().to_string();
    let output = env
        .dsh(&[
            "prompt",
            "--yes",
            "--workspace",
            &workspace,
            "--max-tokens",
            &budget,
            "PARENT-ASKED: loop",
        ])
        .await;
    let parent = crate::support::session_id_of(&output);
    let events = env.events(&parent);
    assert_eq!(tokens(first_step(&events)), parent_step, "the same first request");
    let (_, child, _) = spawned(&events).remove(0);
    let child_events = env.events(&child);
    assert_eq!(of_kind(&child_events, "step/start").len(), 1);
    let logged = limits(&child_events);
    assert_eq!(
        (logged.len(), logged[0].limit, logged[0].value.as_u64()),
        (1, LimitKind::MaxTokens, Some(remainder))
    );
    let result = &tool_results(&events)[0];
    let said = format!(
        "max_tokens 900000 asked, {remainder} allowed (what remains of the parent turn's budget)"
    );
    assert!(result.content.contains(&said), "{}", result.content);
    let logged = limits(&events);
    assert_eq!((logged.len(), logged[0].limit), (1, LimitKind::MaxTokens));
    env.assert_audit_ok(&child).await;
    env.assert_audit_ok(&parent).await;
}

/// The usage of a log's first step.
fn first_step(events: &[dsh_session::Event]) -> Usage {
    events
        .iter()
        .find_map(|event| match &event.data {
            EventData::StepEnd(end) => Some(end.usage),
            _ => None,
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provenance_names_the_child_for_the_lines_a_child_wrote_and_the_parent_for_its_own() {
    let env = Env::new().await;
    let served = env.serve(&[]).await;
    let content = "one\ntwo\nthree\n";
    // Turn 1: the parent writes a.txt; turn 2: a fork child edits its line 2 while a fresh child
    // writes b.txt. The fork child's log holds a copy of the parent's write: the parent keeps
    // those lines.
    env.script(json!([
        when("WRITE", json!({"reasoning": "Write.", "tool_calls": [
            call("write_file", json!({"path": "a.txt", "content": content})),
        ]})),
        when("WRITE", json!({"reasoning": "Done.", "content": "Written."})),
        when("PARENT", json!({"reasoning": "Delegate.", "tool_calls": [
            task("edit line 2", "FORK-EDIT: edit line 2", "fork"),
            task("write b", "FRESH-WRITE: write b.txt", "fresh"),
        ]})),
        when("FORK-EDIT", json!({"reasoning": "Edit.", "tool_calls": [
            call("edit_file", json!({"path": "a.txt", "old_string": "two\n", "new_string": "TWO\n"})),
        ]})),
        when("FORK-EDIT", json!({"reasoning": "Done.", "content": "FORK-DONE"})),
        when("FRESH-WRITE", json!({"reasoning": "Write.", "tool_calls": [
            call("write_file", json!({"path": "b.txt", "content": "beta\n"})),
        ]})),
        when("FRESH-WRITE", json!({"reasoning": "Done.", "content": "FRESH-DONE"})),
    ]))
    .await;
    let (parent, output) = env.prompt_new("WRITE: the file").await;
    assert!(output.status.success(), "{}", describe(&output));
    let output = env.prompt_in(&parent, "PARENT: delegate").await;
    assert!(output.status.success(), "{}", describe(&output));
    assert_eq!(std::fs::read_to_string(env.workspace.join("a.txt")).unwrap(), "one\nTWO\nthree\n");
    let events = env.events(&parent);
    let children = spawned(&events);
    let child = |context| children.iter().find(|c| c.2 == context).unwrap().1.clone();
    let (fork, fresh) = (child(TaskContext::Fork), child(TaskContext::Fresh));

    let conn = env.client().await;
    // (startLine, endLine, sessionId, tool) of each range of `path`.
    let ranges = |path: &'static str| {
        let conn = std::sync::Arc::clone(&conn);
        let workspace = env.workspace.to_str().unwrap().to_owned();
        async move {
            let result = conn
                .ok("workspace/provenance", json!({"workspace": workspace, "path": path}))
                .await;
            assert_eq!(result["errors"], json!([]), "{result}");
            result["ranges"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    (
                        r["startLine"].as_u64().unwrap(),
                        r["endLine"].as_u64().unwrap(),
                        r["sessionId"].as_str().unwrap().to_owned(),
                        r["tool"].as_str().unwrap().to_owned(),
                    )
                })
                .collect::<Vec<_>>()
        }
    };
    let range =
        |start, end, session: &str, tool: &str| (start, end, session.to_owned(), tool.to_owned());
    assert_eq!(
        ranges("a.txt").await,
        [
            range(0, 1, &parent, "write_file"),
            range(1, 2, &fork, "edit_file"),
            range(2, 3, &parent, "write_file"),
        ],
        "parent {parent}, fork {fork}"
    );
    assert_eq!(ranges("b.txt").await, [range(0, 1, &fresh, "write_file")]);
    served.shutdown().await;
}
