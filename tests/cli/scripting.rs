//! The scripting contract (docs/scripting.md): `dsh prompt --json` writes JSON lines only, each
//! valid against the published schema (protocol/schema/dsh-prompt-json.schema.json, checked
//! here with a JSON Schema validator), and a turn's budgets stop it with a logged `turn/limit`
//! and their own exit status. Also what a script meets when things go wrong: a budget that is
//! not positive, the daemon dying mid-stream, the client killed mid-turn.

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use dsh_mock::MockConfig;
use dsh_session::{Event, EventData, LimitKind, StopReason, TurnLimit};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::support::{
    DEADLINE, DaemonGuard, Env, describe, kill_daemon_of, of_kind, run_child, session_id_of,
    stderr, stdout, wait_gone,
};

/// Exit statuses of `dsh prompt` (docs/scripting.md).
const LIMIT: i32 = 3;
const USAGE: i32 = 2;

/// The published schema of one line, as a validator.
fn validator() -> jsonschema::Validator {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../protocol/schema/dsh-prompt-json.schema.json");
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    jsonschema::validator_for(&schema).unwrap()
}

/// Every line of `text`, parsed and validated against the schema; `text` is whole lines only.
pub(super) fn valid_lines(text: &str) -> Vec<Value> {
    let validator = validator();
    assert!(text.is_empty() || text.ends_with('\n'), "a line was cut: {text:?}");
    text.lines()
        .map(|line| {
            let value: Value = serde_json::from_str(line)
                .unwrap_or_else(|error| panic!("not JSON ({error}): {line}"));
            let errors: Vec<String> =
                validator.iter_errors(&value).map(|error| error.to_string()).collect();
            assert!(errors.is_empty(), "{line}\ndoes not match the schema: {errors:#?}");
            assert_eq!(value["schemaVersion"], 1, "{line}");
            value
        })
        .collect()
}

fn types(lines: &[Value]) -> Vec<&str> {
    lines.iter().map(|line| line["type"].as_str().unwrap()).collect()
}

/// `dsh prompt --yes --workspace W EXTRA… TEXT` in a new session.
pub(super) async fn prompt(env: &Env, extra: &[&str], text: &str) -> Output {
    let workspace = env.workspace.to_str().unwrap().to_owned();
    let mut args = vec!["prompt", "--yes", "--workspace", &workspace];
    args.extend_from_slice(extra);
    args.push(text);
    env.dsh(&args).await
}

fn read(path: &str) -> Value {
    let call = json!({"name": "read_file", "arguments": json!({"path": path}).to_string()});
    json!({"reasoning": "Look first.", "content": "Reading.", "tool_calls": [call]})
}

/// Three steps: a read, a write (asked for, approved by `--yes`), an answer.
fn three_steps() -> Value {
    let write = json!({"name": "write_file", "arguments": json!({"path": "c.txt", "content": "gamma\n"}).to_string()});
    json!([
        read("a.txt"),
        {"reasoning": "Now write.", "tool_calls": [write]},
        {"reasoning": "Done.", "content": "Read a.txt and wrote c.txt."},
    ])
}

async fn env_with_files(config: MockConfig) -> Env {
    let env = Env::with_mock(config).await;
    std::fs::write(env.workspace.join("a.txt"), "alpha\n").unwrap();
    env
}

/// The session's `turn/limit` events; each is followed by the turn's `turn/end {limit}`.
fn logged_limits(events: &[Event]) -> Vec<TurnLimit> {
    let mut limits = Vec::new();
    for (index, event) in events.iter().enumerate() {
        if let EventData::TurnLimit(limit) = &event.data {
            let next = events.get(index + 1).map(|event| &event.data);
            assert!(
                matches!(next, Some(EventData::TurnEnd(end)) if end.reason == StopReason::Limit),
                "{next:?}"
            );
            limits.push(limit.clone());
        }
    }
    limits
}

fn steps(events: &[Event]) -> usize {
    of_kind(events, "step/start").len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_line_of_a_json_turn_with_tool_calls_validates_against_the_published_schema() {
    let env = env_with_files(MockConfig::default()).await;
    env.script(three_steps()).await;
    let output = prompt(&env, &["--json"], "Read a.txt, then write c.txt.").await;
    assert!(output.status.success(), "{}", describe(&output));
    let session = session_id_of(&output);
    let lines = valid_lines(&stdout(&output));
    let kinds = types(&lines);
    for kind in [
        "turn/start",
        "user/message",
        "step/start",
        "assistant/chunk",
        "assistant/message",
        "tool/call",
        "tool/result",
        "approval/request",
        "approval/decision",
        "step/end",
        "step/usage",
    ] {
        assert!(kinds.contains(&kind), "no {kind} line: {kinds:?}");
    }
    // The last line, and only it, ends the turn.
    assert_eq!(kinds.iter().filter(|kind| **kind == "turn/end").count(), 1, "{kinds:?}");
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "turn/end");
    assert_eq!((&last["stopReason"], &last["steps"]), (&json!("completed"), &json!(3)), "{last}");
    assert_eq!(last["sessionId"], session.as_str());

    // The event lines are the turn's log events, as logged (but its turn/end).
    let events: Vec<Value> =
        lines.iter().filter(|line| line.get("data").is_some()).cloned().collect();
    let log = env.log_values(&session);
    let first = events[0]["seq"].as_u64().unwrap() as usize;
    assert_eq!(log[first]["type"], "turn/start");
    assert_eq!(events.len(), log.len() - first - 1, "every event but the turn/end");
    for (line, logged) in events.iter().zip(&log[first..]) {
        assert_eq!(line["sessionId"], session.as_str());
        for field in ["seq", "time", "type", "data"] {
            assert_eq!(line[field], logged[field], "{field} of {line}");
        }
    }

    // One usage line per step, right after its step/end, with its cost; the last line's cost
    // and usage are their sums.
    let usage_lines: Vec<&Value> = lines.iter().filter(|l| l["type"] == "step/usage").collect();
    assert_eq!(usage_lines.len(), 3);
    for (index, line) in lines.iter().enumerate().filter(|(_, l)| l["type"] == "step/end") {
        let next = &lines[index + 1];
        assert_eq!((&next["type"], &next["step"]), (&json!("step/usage"), &line["data"]["step"]));
        assert_eq!(next["usage"], line["data"]["usage"]);
        assert_eq!(next["cost"]["currency"], "USD", "{next}");
    }
    let sum = |field: &str| -> f64 {
        usage_lines.iter().map(|l| l["cost"][field].as_f64().unwrap()).sum()
    };
    assert!((last["cost"]["amount"].as_f64().unwrap() - sum("amount")).abs() < 1e-12, "{last}");
    let tokens = |line: &Value, field: &str| line["usage"][field].as_u64().unwrap();
    for field in ["promptTokens", "cacheHitTokens", "completionTokens"] {
        let steps: u64 = usage_lines.iter().map(|line| tokens(line, field)).sum();
        assert_eq!(tokens(last, field), steps, "{field}");
    }
    // Nothing but lines on stdout; the session is named on stderr.
    assert!(stderr(&output).contains(&format!("session {session}")));
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_steps_1_on_a_three_step_script_stops_after_one_step() {
    let env = env_with_files(MockConfig::default()).await;
    env.script(three_steps()).await;
    let output = prompt(&env, &["--max-steps", "1"], "Read a.txt, then write c.txt.").await;
    assert_eq!(output.status.code(), Some(LIMIT), "{}", describe(&output));
    assert!(
        stdout(&output).contains("⊘ step budget reached: 1 of 1 steps"),
        "{}",
        describe(&output)
    );
    let session = session_id_of(&output);
    let events = env.events(&session);
    assert_eq!(steps(&events), 1);
    assert_eq!(env.requests().len(), 1);
    let limits = logged_limits(&events);
    assert_eq!(limits.len(), 1);
    assert_eq!(
        (limits[0].limit, limits[0].value.as_u64(), limits[0].spent.as_u64()),
        (LimitKind::MaxSteps, Some(1), Some(1))
    );
    // The step ran whole: its tool call was answered.
    assert_eq!(crate::support::tool_results(&events).len(), 1);
    env.assert_audit_ok(&session).await;

    // The same with --json (on the script's next step): the limit is a line, and the last
    // line names it.
    let output = prompt(&env, &["--json", "--max-steps", "1"], "Again.").await;
    assert_eq!(output.status.code(), Some(LIMIT), "{}", describe(&output));
    let lines = valid_lines(&stdout(&output));
    let limit = lines.iter().find(|line| line["type"] == "turn/limit").unwrap();
    assert_eq!(limit["data"], json!({"limit": "maxSteps", "value": 1, "spent": 1}));
    let last = lines.last().unwrap();
    assert_eq!((&last["type"], &last["stopReason"]), (&json!("turn/end"), &json!("limit")));
    assert_eq!(last["limit"], limit["data"]);
    env.assert_audit_ok(&session_id_of(&output)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_cost_stops_the_turn_at_a_hand_computed_threshold() {
    let env = env_with_files(MockConfig::default()).await;
    // Only the step the turn should take is scripted: a second would get the mock's echo.
    env.script(json!([read("a.txt")])).await;
    // deepseek-v4-flash costs $0.0028 (cache hit), $0.14 (miss) and $0.28 (output) per million
    // tokens (server/config/src/defaults.toml). The first request of a fresh mock carries the
    // system prompt and the tools, over 1,000 tokens, none of them cached: more than
    // 1,000 × $0.14 / 10⁶ = $0.00014 — past a budget of $0.0001 after step 1, never before.
    let output =
        prompt(&env, &["--json", "--max-cost", "0.0001"], "Read a.txt, then write c.txt.").await;
    assert_eq!(output.status.code(), Some(LIMIT), "{}", describe(&output));
    let session = session_id_of(&output);
    let events = env.events(&session);
    assert_eq!(steps(&events), 1);
    let EventData::StepEnd(end) = &of_kind(&events, "step/end")[0].data else { unreachable!() };
    let usage = end.usage;
    assert!(usage.prompt_tokens > 1_000 && usage.cache_hit_tokens == 0, "{usage:?}");
    let by_hand = (usage.cache_hit_tokens as f64 * 0.0028
        + usage.cache_miss_tokens as f64 * 0.14
        + usage.completion_tokens as f64 * 0.28)
        / 1_000_000.0;
    let limits = logged_limits(&events);
    assert_eq!((limits.len(), limits[0].limit), (1, LimitKind::MaxCost));
    assert_eq!(limits[0].value.as_f64(), Some(0.0001));
    let spent = limits[0].spent.as_f64().unwrap();
    assert!((spent - by_hand).abs() < 1e-12, "spent {spent}, by hand {by_hand}");
    // The last line's cost is the step's, as session/usage prices it.
    let lines = valid_lines(&stdout(&output));
    let last = lines.last().unwrap();
    assert_eq!(last["stopReason"], "limit");
    assert!((last["cost"]["amount"].as_f64().unwrap() - by_hand).abs() < 1e-12, "{last}");
    env.assert_audit_ok(&session).await;

    // A budget the turn does not reach: it completes, all three steps.
    env.script(three_steps()).await;
    let output = prompt(&env, &["--max-cost", "1"], "Read a.txt, then write c.txt.").await;
    assert!(output.status.success(), "{}", describe(&output));
    let session = session_id_of(&output);
    assert_eq!(steps(&env.events(&session)), 3);
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_cost_on_a_model_without_a_price_is_refused_before_anything_runs() {
    let env = env_with_files(MockConfig::default()).await;
    // Profile `bare` names a model it gives no price for.
    let config = format!(
        "[providers.bare]\nkind = \"deepseek\"\nbase_url = \"{}\"\napi_key_env = \"DEEPSEEK_API_KEY\"\nmodel = \"deepseek-v4-pro\"\n",
        env.mock.base_url()
    );
    std::fs::write(env.user_config(), config).unwrap();
    let workspace = env.workspace.to_str().unwrap().to_owned();
    let args = [
        "--provider",
        "bare",
        "prompt",
        "--json",
        "--max-cost",
        "1",
        "--workspace",
        &workspace,
        "Hi.",
    ];
    let output = crate::support::run(env.command_plain(&env.key, &args)).await;
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    assert!(stderr(&output).contains("no price"), "{}", describe(&output));
    let lines = valid_lines(&stdout(&output));
    assert_eq!(types(&lines), ["error"], "{}", describe(&output));
    assert_eq!(lines[0]["code"], dsh_protocol::code::CONFIG);
    assert!(lines[0]["message"].as_str().unwrap().contains("cost would be unknown"));
    // Nothing ran: no request, no turn.
    assert!(env.requests().is_empty());
    let session = session_id_of(&output);
    assert!(of_kind(&env.events(&session), "turn/start").is_empty());
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_tokens_stops_the_turn_once_its_steps_tokens_reach_it() {
    let env = env_with_files(MockConfig::default()).await;
    // The first step's tokens, measured: every new session's first request in this workspace
    // is the same text (system prompt, tools, the date, the prompt).
    env.script(json!([read("a.txt")])).await;
    let text = "Read a.txt, then write c.txt.";
    let output = prompt(&env, &["--json", "--max-steps", "1"], text).await;
    assert_eq!(output.status.code(), Some(LIMIT), "{}", describe(&output));
    let last = valid_lines(&stdout(&output)).pop().unwrap();
    let first_step = last["usage"]["promptTokens"].as_u64().unwrap()
        + last["usage"]["completionTokens"].as_u64().unwrap();
    env.assert_audit_ok(&session_id_of(&output)).await;

    // Exactly the first step's tokens: reached after it. One more: the second step runs, and
    // passes it. Only the steps each turn takes are scripted.
    for (budget, expected_steps, script) in [
        (first_step, 1, json!([read("a.txt")])),
        (first_step + 1, 2, json!([read("a.txt"), read("a.txt")])),
    ] {
        env.script(script).await;
        let budget_text = budget.to_string();
        let output = prompt(&env, &["--max-tokens", &budget_text], text).await;
        assert_eq!(output.status.code(), Some(LIMIT), "{}", describe(&output));
        let session = session_id_of(&output);
        let events = env.events(&session);
        assert_eq!(steps(&events), expected_steps, "budget {budget}");
        let limits = logged_limits(&events);
        assert_eq!((limits.len(), limits[0].limit), (1, LimitKind::MaxTokens));
        let spent = limits[0].spent.as_u64().unwrap();
        assert!(spent >= budget, "{spent} < {budget}");
        if expected_steps == 1 {
            assert_eq!(spent, first_step);
        }
        assert!(stdout(&output).contains("⊘ token budget reached"), "{}", describe(&output));
        env.assert_audit_ok(&session).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_cancels_the_turn_and_names_the_limit() {
    let mut config = MockConfig::default();
    config.stream.inter_chunk_delay_ms = 50;
    let env = env_with_files(config).await;
    let long = "A slow answer, one piece at a time. ".repeat(40);
    env.script(json!([{"reasoning": "Think.", "content": long}])).await;
    let output = prompt(&env, &["--json", "--timeout", "0.5"], "Talk slowly.").await;
    assert_eq!(output.status.code(), Some(LIMIT), "{}", describe(&output));
    let lines = valid_lines(&stdout(&output));
    let kinds = types(&lines);
    assert!(kinds.contains(&"step/error"), "{kinds:?}");
    let limit = lines.iter().find(|line| line["type"] == "turn/limit").unwrap();
    assert_eq!(
        (&limit["data"]["limit"], &limit["data"]["value"]),
        (&json!("timeout"), &json!(0.5))
    );
    assert_eq!(lines.last().unwrap()["stopReason"], "limit");
    // Logged as a cancellation: the step cut, no half message.
    let session = session_id_of(&output);
    let events = env.events(&session);
    let EventData::StepError(error) = &of_kind(&events, "step/error")[0].data else {
        unreachable!()
    };
    assert!(error.cancelled, "{error:?}");
    assert!(of_kind(&events, "assistant/message").is_empty());
    assert_eq!(logged_limits(&events)[0].limit, LimitKind::Timeout);
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_that_is_not_positive_is_refused_before_anything_starts() {
    let env = Env::new().await;
    for (flag, value, expected) in [
        ("--max-steps", "0", "must be at least 1, not 0"),
        ("--max-steps", "-2", "must be at least 1, not -2"),
        ("--max-tokens", "-3", "must be at least 1, not -3"),
        ("--max-tokens", "1.5", "is not a whole number"),
        ("--max-cost", "0", "must be more than 0, not 0"),
        ("--max-cost", "-0.5", "must be more than 0, not -0.5"),
        ("--max-cost", "NaN", "must be more than 0, not NaN"),
        ("--timeout", "-1", "must be more than 0, not -1"),
        ("--timeout", "soon", "is not a number"),
    ] {
        let output = prompt(&env, &[flag, value], "Hi.").await;
        assert_eq!(output.status.code(), Some(USAGE), "{flag} {value}: {}", describe(&output));
        let error = stderr(&output);
        assert!(error.contains(flag) && error.contains(expected), "{flag} {value}: {error}");
        assert!(stdout(&output).is_empty());
    }
    // Nothing started: no daemon, no session.
    assert!(!env.home.join("daemon.lock").exists());
    assert!(env.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exit_statuses_are_in_the_help() {
    let env = Env::new().await;
    let output = env.dsh_ok(&["prompt", "--help"]).await;
    let help = stdout(&output);
    for line in [
        "Exit status:",
        "0    the turn completed",
        "3    a budget was reached",
        "130  the turn was cancelled",
        "docs/scripting.md",
    ] {
        assert!(help.contains(line), "{line}: {help}");
    }
}

/// Spawns `dsh prompt --json` on a slowly streamed answer and reads its stdout until a line of
/// `kind` arrives; returns the child, the lines so far and the rest of its stdout.
async fn streaming(
    env: &Env,
) -> (tokio::process::Child, Vec<String>, tokio::io::Lines<BufReader<tokio::process::ChildStdout>>)
{
    let long = "A slow answer, one piece at a time. ".repeat(60);
    env.script(json!([{"reasoning": "Think.", "content": long}])).await;
    let workspace = env.workspace.to_str().unwrap().to_owned();
    let mut command =
        env.command(&["prompt", "--json", "--yes", "--workspace", &workspace, "Talk."]);
    command.stdout(Stdio::piped());
    let mut child = command.spawn().unwrap();
    let mut reader = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let started = Instant::now();
    loop {
        let line = tokio::time::timeout(DEADLINE, reader.next_line()).await.unwrap().unwrap();
        let line = line.expect("stdout ended before the answer streamed");
        let chunk = line.contains("\"type\":\"assistant/chunk\"");
        seen.push(line);
        if chunk {
            break;
        }
        assert!(started.elapsed() < DEADLINE);
    }
    (child, seen, reader)
}

fn slow_mock() -> MockConfig {
    let mut config = MockConfig::default();
    config.stream.inter_chunk_delay_ms = 40;
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_dying_mid_stream_ends_the_stream_with_one_error_line() {
    let env = env_with_files(slow_mock()).await;
    let _guard = DaemonGuard(env.home.clone());
    let (child, mut seen, mut reader) = streaming(&env).await;
    let daemon = crate::support::lock_pid(&env.home).unwrap();
    kill_daemon_of(&env.home);
    wait_gone(daemon).await;
    while let Some(line) =
        tokio::time::timeout(DEADLINE, reader.next_line()).await.unwrap().unwrap()
    {
        seen.push(line);
    }
    let output = run_child(child).await;
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let text: String = seen.iter().map(|line| format!("{line}\n")).collect();
    let lines = valid_lines(&text);
    let kinds = types(&lines);
    assert_eq!(kinds.iter().filter(|kind| **kind == "error").count(), 1, "{kinds:?}");
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "error", "{kinds:?}");
    let session = session_id_of(&output);
    assert_eq!(last["sessionId"], session.as_str());
    assert!(!kinds.contains(&"turn/end"));
    // The next daemon closes the interrupted turn; the log is sound.
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_killed_mid_turn_leaves_the_turn_running_in_the_daemon() {
    let env = env_with_files(slow_mock()).await;
    let (mut child, _, _) = streaming(&env).await;
    child.kill().await.unwrap();
    let _ = child.wait().await;
    // The session's turn ends on its own, completed.
    let session = {
        let listed = env.dsh_json(&["sessions"]).await;
        listed["sessions"][0]["sessionId"].as_str().unwrap().to_owned()
    };
    let started = Instant::now();
    let end = loop {
        let events = env.events(&session);
        if let Some(end) = of_kind(&events, "turn/end").first() {
            break end.data.clone();
        }
        assert!(started.elapsed() < DEADLINE, "the turn did not end: {:?}", events.len());
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        matches!(&end, EventData::TurnEnd(turn_end) if turn_end.reason == StopReason::Completed),
        "{end:?}"
    );
    env.assert_audit_ok(&session).await;
}

/// A log a crash cut inside a step carries that turn open: the daemon closes it
/// (`close_interrupted`) before the next turn starts. `--json` prints the new turn only — its
/// `turn/start` first, one `turn/end` last — not the closing of the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_after_a_crash_mid_turn_prints_only_the_new_turn() {
    let env = env_with_files(MockConfig::default()).await;
    env.script(three_steps()).await;
    let output = prompt(&env, &[], "Read a.txt, then write c.txt.").await;
    assert!(output.status.success(), "{}", describe(&output));
    let session = session_id_of(&output);
    env.dsh_ok(&["shutdown"]).await;
    // As a crash would leave it: the log ends right after step 2's `step/start`.
    let events = env.events(&session);
    let cut = events
        .iter()
        .find(|e| matches!(&e.data, EventData::StepStart(s) if s.step == 2))
        .map(|e| e.seq as usize + 1)
        .unwrap();
    let path = env.log_path(&session);
    let text = std::fs::read_to_string(&path).unwrap();
    let kept: String = text.lines().take(cut).map(|line| format!("{line}\n")).collect();
    std::fs::write(&path, kept).unwrap();
    env.script(json!([{"content": "Fine."}])).await;
    let output = env.dsh(&["prompt", "--json", "--yes", "--session", &session, "Go on."]).await;
    assert!(output.status.success(), "{}", describe(&output));
    let lines = valid_lines(&stdout(&output));
    let kinds = types(&lines);
    assert_eq!(kinds.first(), Some(&"turn/start"), "{kinds:?}");
    assert_eq!(kinds.iter().filter(|kind| **kind == "turn/end").count(), 1, "{kinds:?}");
    assert_eq!(lines.last().unwrap()["turn"], 2, "{kinds:?}");
    // The old turn was closed in the log all the same.
    let ends =
        env.events(&session).iter().filter(|e| matches!(e.data, EventData::TurnEnd(_))).count();
    assert_eq!(ends, 2);
    env.assert_audit_ok(&session).await;
}
