//! The fold over a small log: one line per update, compared with its expectation
//! (`UPDATE_EXPECT=1` regenerates).
#![allow(clippy::unwrap_used)]

use expect_test::expect;
use serde_json::{Value, json};

use super::*;

/// Every update of `log` (one event per line), one per line.
fn render(log: &str) -> String {
    let mut translator = Translator::new("/work/demo".to_owned(), 131_072);
    let mut out = String::new();
    for (index, line) in log.lines().enumerate() {
        let event = dsh_protocol::decode_event(line, index + 1).unwrap();
        for update in translator.updates(&event) {
            out.push_str(&format!("{} {}\n", event.seq, serde_json::to_string(&update).unwrap()));
        }
    }
    out
}

const LOG: &str = r#"{"seq":0,"time":1,"type":"session/meta","data":{"formatVersion":0,"sessionId":"s","workspace":"/work/demo"}}
{"seq":1,"time":2,"type":"turn/start","data":{"turn":1}}
{"seq":2,"time":3,"type":"user/message","data":{"text":"Fix the typo"}}
{"seq":3,"time":4,"type":"step/start","data":{"step":1,"turn":1}}
{"seq":4,"time":5,"type":"assistant/chunk","data":{"step":1,"delta":{"kind":"reasoning","text":""}}}
{"seq":5,"time":6,"type":"assistant/chunk","data":{"step":1,"delta":{"kind":"reasoning","text":"Edit it."}}}
{"seq":6,"time":7,"type":"assistant/chunk","data":{"step":1,"delta":{"kind":"text","text":"On it."}}}
{"seq":7,"time":8,"type":"assistant/chunk","data":{"step":1,"delta":{"kind":"toolCall","index":0,"id":"call_1","name":"edit_file"}}}
{"seq":8,"time":9,"type":"assistant/chunk","data":{"step":1,"delta":{"kind":"toolArgs","index":0,"fragment":"{\"path\":\"src/a.rs\",\"old_string\":\"teh\",\"new_string\":\"the\"}"}}}
{"seq":9,"time":10,"type":"assistant/message","data":{"step":1,"message":{"content":"On it.","reasoningContent":"Edit it.","toolCalls":[{"id":"call_1","name":"edit_file","arguments":"{\"path\":\"src/a.rs\",\"old_string\":\"teh\",\"new_string\":\"the\"}"}]}}}
{"seq":10,"time":11,"type":"approval/request","data":{"approvalId":"a1","callId":"call_1","tool":"edit_file","summary":"edit src/a.rs"}}
{"seq":11,"time":12,"type":"steering/message","data":{"text":"and the comment too"}}
{"seq":12,"time":13,"type":"approval/decision","data":{"approvalId":"a1","decision":"allow"}}
{"seq":13,"time":14,"type":"tool/call","data":{"step":1,"callId":"call_1","name":"edit_file"}}
{"seq":14,"time":15,"type":"tool/result","data":{"callId":"call_1","name":"edit_file","content":"edited src/a.rs"}}
{"seq":15,"time":16,"type":"step/end","data":{"step":1,"finishReason":"tool_calls","usage":{"promptTokens":300,"cacheHitTokens":256,"cacheMissTokens":44,"completionTokens":20,"reasoningTokens":3}}}
{"seq":16,"time":17,"type":"step/start","data":{"step":2,"turn":1}}
{"seq":17,"time":18,"type":"assistant/chunk","data":{"step":2,"delta":{"kind":"toolCall","index":0,"id":"call_2","name":"run_command"}}}
{"seq":18,"time":19,"type":"assistant/message","data":{"step":2,"message":{"content":"","toolCalls":[{"id":"call_2","name":"run_command","arguments":"{\"command\":\"cargo test\\nmore\"}"}]}}}
{"seq":19,"time":20,"type":"tool/result","data":{"callId":"call_2","name":"run_command","content":"denied by the user","isError":true}}
{"seq":20,"time":21,"type":"step/end","data":{"step":2,"finishReason":"length","usage":{"promptTokens":340,"cacheHitTokens":320,"cacheMissTokens":20,"completionTokens":8,"reasoningTokens":0}}}
{"seq":21,"time":22,"type":"turn/end","data":{"turn":1,"reason":"completed"}}"#;

#[test]
fn a_turn_becomes_acp_updates_in_log_order() {
    expect![[r#"
        2 {"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"Fix the typo"}}
        5 {"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"Edit it."}}
        6 {"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"On it."}}
        7 {"sessionUpdate":"tool_call","toolCallId":"call_1","title":"edit_file","kind":"edit"}
        9 {"sessionUpdate":"tool_call_update","toolCallId":"call_1","kind":"edit","title":"edit_file: src/a.rs","content":[{"type":"diff","path":"/work/demo/src/a.rs","oldText":"teh","newText":"the"}],"locations":[{"path":"/work/demo/src/a.rs"}],"rawInput":{"path":"src/a.rs","old_string":"teh","new_string":"the"}}
        11 {"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"and the comment too"},"_meta":{"dsh/steering":true}}
        13 {"sessionUpdate":"tool_call_update","toolCallId":"call_1","status":"in_progress"}
        14 {"sessionUpdate":"tool_call_update","toolCallId":"call_1","status":"completed","content":[{"type":"diff","path":"/work/demo/src/a.rs","oldText":"teh","newText":"the"},{"type":"content","content":{"type":"text","text":"edited src/a.rs"}}],"rawOutput":{"content":"edited src/a.rs","isError":false}}
        15 {"sessionUpdate":"usage_update","used":320,"size":131072,"_meta":{"dsh/usage":{"step":1,"inputTokens":300,"outputTokens":20,"cachedReadTokens":256,"cachedWriteTokens":44,"thoughtTokens":3,"totalTokens":320}}}
        17 {"sessionUpdate":"tool_call","toolCallId":"call_2","title":"run_command","kind":"execute"}
        18 {"sessionUpdate":"tool_call_update","toolCallId":"call_2","kind":"execute","title":"run_command: cargo test…","rawInput":{"command":"cargo test\nmore"}}
        19 {"sessionUpdate":"tool_call_update","toolCallId":"call_2","status":"failed","content":[{"type":"content","content":{"type":"text","text":"denied by the user"}}],"rawOutput":{"content":"denied by the user","isError":true}}
        20 {"sessionUpdate":"usage_update","used":348,"size":131072,"_meta":{"dsh/usage":{"step":2,"inputTokens":340,"outputTokens":8,"cachedReadTokens":320,"cachedWriteTokens":20,"thoughtTokens":0,"totalTokens":348}}}
    "#]]
    .assert_eq(&render(LOG));
}

#[test]
fn the_fold_tracks_turns_approvals_and_finish_reasons() {
    let mut translator = Translator::new("/w".to_owned(), 10);
    let mut running = Vec::new();
    let mut pending = Vec::new();
    for (index, line) in LOG.lines().enumerate() {
        let event = dsh_protocol::decode_event(line, index + 1).unwrap();
        translator.updates(&event);
        running.push(translator.running_turn.is_some());
        pending.push(translator.pending_approvals.len());
    }
    assert_eq!(running.iter().filter(|r| **r).count(), 20, "running from turn/start to turn/end");
    assert!(!running[21]);
    assert_eq!(pending[10], 1, "asked at seq 10");
    assert_eq!(pending[12], 0, "decided at seq 12");
    assert_eq!(translator.last_finish_reason.as_deref(), Some("length"));
    assert_eq!(translator.last_ended, Some((1, StopReason::Completed)));
}

#[test]
fn tool_kinds_follow_what_each_tool_does() {
    let kinds: Vec<_> = [
        "read_file",
        "list_dir",
        "edit_file",
        "write_file",
        "grep",
        "glob",
        "run_command",
        "mcp_x",
    ]
    .iter()
    .map(|name| tool_kind(name))
    .collect();
    use ToolKind::*;
    assert_eq!(kinds, [Read, Read, Edit, Edit, Search, Search, Execute, Other]);
}

#[test]
fn a_permission_request_describes_its_call_as_the_tool_call_updates_do() {
    let mut translator = Translator::new("/work/demo".to_owned(), 131_072);
    for (index, line) in LOG.lines().take(11).enumerate() {
        translator.updates(&dsh_protocol::decode_event(line, index + 1).unwrap());
    }
    let asked = &translator.pending_approvals["a1"];
    expect![[r#"{"kind":"edit","title":"edit_file: src/a.rs","content":[{"type":"diff","path":"/work/demo/src/a.rs","oldText":"teh","newText":"the"}],"locations":[{"path":"/work/demo/src/a.rs"}],"rawInput":{"path":"src/a.rs","old_string":"teh","new_string":"the"}}"#]]
    .assert_eq(&serde_json::to_string(&translator.tool_call_fields(&asked.call_id, &asked.tool)).unwrap());
    // A call the fold never saw (an approval replayed without its message) still has a kind.
    expect![[r#"{"kind":"execute"}"#]].assert_eq(
        &serde_json::to_string(&translator.tool_call_fields("call_9", "run_command")).unwrap(),
    );
}

/// A cost of `amount` USD, of which the cache saved 0.5.
fn usd(amount: f64) -> Cost {
    Cost { amount, saved: 0.5, currency: "USD".to_owned() }
}

/// `session/usage` rows: `(step, finished, cost in USD)`.
fn rows(steps: &[(u64, bool, Option<f64>)]) -> Vec<UsageEntry> {
    let usage = json!({"promptTokens": 1, "cacheHitTokens": 0, "cacheMissTokens": 1,
                       "completionTokens": 1, "reasoningTokens": 0});
    steps
        .iter()
        .map(|(step, finished, amount)| {
            let row = json!({"step": step, "turn": 1, "seq": 0, "hitPercent": 0.0,
                             "dropped": false, "causes": [], "explanation": "",
                             "usage": finished.then(|| usage.clone()), "cost": amount.map(usd)});
            serde_json::from_value(row).unwrap()
        })
        .collect()
}

/// The `cost` and `_meta["dsh/usage"].cost` of each `usage_update` of `LOG` folded by
/// `translator`.
fn costs(mut translator: Translator) -> Vec<Value> {
    let mut out = Vec::new();
    for (index, line) in LOG.lines().enumerate() {
        for update in translator.updates(&dsh_protocol::decode_event(line, index + 1).unwrap()) {
            if let SessionUpdate::UsageUpdate(usage) = update {
                let step = &usage.meta.as_ref().unwrap()["dsh/usage"];
                out.push(json!({"session": usage.cost, "step": step.get("cost")}));
            }
        }
    }
    out
}

#[test]
fn usage_updates_carry_the_step_cost_and_the_session_cost_so_far() {
    let session = |amount: f64| json!({"amount": amount, "currency": "USD"});
    let step = |amount: f64| json!(usd(amount));
    let priced = |steps: &[(u64, bool, Option<f64>)], before: Option<Option<f64>>| {
        let mut translator = Translator::new("/w".to_owned(), 10);
        translator.price_steps(rows(steps));
        if let Some(before) = before {
            translator.spent_before(before.map(usd));
        }
        costs(translator)
    };
    let cases = [
        (
            "both steps priced: the session's cost adds up",
            priced(&[(1, true, Some(0.25)), (2, true, Some(0.5))], None),
            json!([{"session": session(0.25), "step": step(0.25)}, {"session": session(0.75), "step": step(0.5)}]),
        ),
        (
            "a step without a price: the session's cost is unknown from there on",
            priced(&[(1, true, None), (2, true, Some(0.5))], None),
            json!([{"session": null, "step": null}, {"session": null, "step": step(0.5)}]),
        ),
        (
            "an unfinished step's cost is not taken",
            priced(&[(1, false, Some(0.25)), (2, true, Some(0.5))], None),
            json!([{"session": null, "step": null}, {"session": null, "step": step(0.5)}]),
        ),
        (
            "a subscription from the log's end starts from what was spent before",
            priced(&[(1, true, Some(0.25)), (2, true, Some(0.5))], Some(Some(1.0))),
            json!([{"session": session(1.25), "step": step(0.25)}, {"session": session(1.75), "step": step(0.5)}]),
        ),
        (
            "no prices at all",
            priced(&[], None),
            json!([{"session": null, "step": null}, {"session": null, "step": null}]),
        ),
    ];
    for (name, got, expected) in cases {
        assert_eq!(Value::Array(got), expected, "{name}");
    }
}

#[test]
fn a_plan_update_is_an_acp_plan_with_every_entry() {
    let log = r#"{"seq":0,"time":1,"type":"session/meta","data":{"formatVersion":0,"sessionId":"s","workspace":"/work/demo"}}
{"seq":1,"time":2,"type":"plan/update","data":{"callId":"call_1","explanation":"Bug found.","plan":[{"step":"Read","status":"completed"},{"step":"Fix","status":"in_progress"},{"step":"Test","status":"pending"}]}}
{"seq":2,"time":3,"type":"plan/update","data":{"callId":"call_2","plan":[]}}"#;
    expect![[r#"
        1 {"sessionUpdate":"plan","entries":[{"content":"Read","priority":"medium","status":"completed"},{"content":"Fix","priority":"medium","status":"in_progress"},{"content":"Test","priority":"medium","status":"pending"}],"_meta":{"dsh/plan":{"seq":1,"callId":"call_1","explanation":"Bug found."}}}
        2 {"sessionUpdate":"plan","entries":[],"_meta":{"dsh/plan":{"seq":2,"callId":"call_2"}}}
    "#]]
    .assert_eq(&render(log));
    assert_eq!(tool_kind("update_plan"), ToolKind::Think);
}

#[test]
fn a_task_call_is_a_think_call_naming_its_child_session() {
    let log = r#"{"seq":0,"time":1,"type":"session/meta","data":{"formatVersion":0,"sessionId":"s","workspace":"/work/demo"}}
{"seq":1,"time":2,"type":"step/start","data":{"step":1,"turn":1}}
{"seq":2,"time":3,"type":"assistant/message","data":{"step":1,"message":{"content":"","toolCalls":[{"id":"call_1","name":"task","arguments":"{\"description\":\"find it\",\"prompt\":\"Find x.\",\"context\":\"fresh\"}"}]}}}
{"seq":3,"time":4,"type":"tool/call","data":{"step":1,"callId":"call_1","name":"task"}}
{"seq":4,"time":5,"type":"task/spawn","data":{"callId":"call_1","sessionId":"child","context":"fresh","description":"find it","depth":1}}
{"seq":5,"time":6,"type":"tool/result","data":{"callId":"call_1","name":"task","content":"x is in a.rs\n\n[sub-agent child (fresh): completed · 2 steps · 900 tokens, 40% cache hits · $0.0001]"}}"#;
    let rendered = render(log);
    let lines: Vec<&str> = rendered.lines().collect();
    assert!(lines[0].starts_with("2 ") && lines[0].contains(r#""kind":"think""#), "{rendered}");
    let spawned = lines.iter().find(|line| line.starts_with("4 ")).unwrap();
    assert!(spawned.contains(r#""title":"sub-agent (fresh): find it""#), "{rendered}");
    assert!(
        spawned.contains(r#""_meta":{"dsh/task":{"callId":"call_1","sessionId":"child","context":"fresh","description":"find it","depth":1}}"#),
        "{rendered}"
    );
    let ended = lines.iter().find(|line| line.starts_with("5 ")).unwrap();
    assert!(ended.contains(r#""status":"completed""#) && ended.contains("$0.0001"), "{rendered}");
    assert_eq!(tool_kind("task"), ToolKind::Think);
}
