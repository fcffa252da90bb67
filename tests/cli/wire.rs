//! Byte-for-byte reconstruction and cache hits of a multi-step tool turn; the offline demo.

use dsh_mock::{CacheMode, MockConfig};
use serde_json::json;

use crate::support::{Env, describe, of_kind, stdout, tool_reply, write};

/// Four steps: read, edit, run a command, then answer; thinking on, tools present.
fn coding_turn() -> serde_json::Value {
    json!([
        tool_reply("Read the script first.", "read_file", json!({ "path": "src/greet.sh" })),
        tool_reply(
            "It says Helo; replace it exactly once.",
            "edit_file",
            json!({ "path": "src/greet.sh", "old_string": "Helo", "new_string": "Hello" })
        ),
        tool_reply("Now run it.", "run_command", json!({ "command": "sh src/greet.sh dsh" })),
        { "reasoning": "It prints Hello, dsh!", "content": "Fixed the typo; the script prints Hello, dsh!." },
    ])
}

fn coding_workspace(env: &Env) {
    write(&env.workspace, "src/greet.sh", "#!/bin/sh\necho \"Helo, $1!\"\n");
    write(&env.workspace, "AGENTS.md", "# Notes\n\nScripts use /bin/sh.\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_step_of_a_tool_turn_rebuilds_the_recorded_body_byte_for_byte() {
    let env = Env::new().await;
    coding_workspace(&env);
    env.script(coding_turn()).await;

    let (session, output) = env.prompt_new("Fix the typo in src/greet.sh and run it.").await;
    assert!(output.status.success(), "{}", describe(&output));
    assert!(stdout(&output).contains("turn 1 ended: completed"), "{}", describe(&output));
    // The tools really ran.
    let script = std::fs::read_to_string(env.workspace.join("src/greet.sh")).unwrap();
    assert_eq!(script, "#!/bin/sh\necho \"Hello, $1!\"\n");

    let requests = env.requests();
    assert_eq!(requests.len(), 4, "one request per step");
    let events = env.events(&session);
    assert_eq!(of_kind(&events, "step/start").len(), 4);
    for (index, request) in requests.iter().enumerate() {
        assert_eq!(request.outcome, "ok", "request {} answered {}", index + 1, request.status);
        let body = std::str::from_utf8(&request.body).unwrap();
        assert!(body.contains("\"thinking\":{\"type\":\"enabled\"}"), "thinking is on: {body}");
        assert!(body.contains("\"tools\":["), "tools are sent: {body}");
        let rebuilt = env.saw_wire(&session, index as u64 + 1).await;
        assert!(
            rebuilt == request.body,
            "step {}: `dsh saw --wire` differs from the recorded body\nrebuilt:  {}\nrecorded: {}",
            index + 1,
            String::from_utf8_lossy(&rebuilt),
            String::from_utf8_lossy(&request.body)
        );
    }
    // Reasoning is passed back in later requests (the mock's strict passback rule would have
    // rejected them otherwise), and tool arguments are replayed verbatim.
    let last = std::str::from_utf8(&requests[3].body).unwrap();
    assert!(last.contains("Read the script first."), "{last}");
    assert!(last.contains(r#"\"old_string\":\"Helo\""#), "{last}");
    env.assert_audit_ok(&session).await;
}

/// `hit(n+1) ≥ ⌊(prompt_n + completion_n) / G⌋·G − G` for every consecutive pair of requests.
async fn hits_follow_the_append_only_bound(granularity: u64) {
    let mut config = MockConfig::default();
    config.cache.mode = CacheMode::Block;
    config.cache.granularity = granularity;
    let env = Env::with_mock(config).await;
    coding_workspace(&env);
    env.script(coding_turn()).await;
    let (session, output) = env.prompt_new("Fix the typo in src/greet.sh and run it.").await;
    assert!(output.status.success(), "{}", describe(&output));
    // A second turn in a second process: its first request resumes the same prefix.
    env.script(json!([{ "reasoning": "Nothing to do.", "content": "Done already." }])).await;
    let output = env.prompt_in(&session, "Anything else?").await;
    assert!(output.status.success(), "{}", describe(&output));

    let requests = env.requests();
    assert_eq!(requests.len(), 5);
    let g = granularity;
    for pair in requests.windows(2) {
        let (previous, next) = (&pair[0], &pair[1]);
        assert!(next.hit > 0, "request {} reports no cache hit", next.seq);
        let bound =
            ((previous.prompt_tokens + previous.completion_tokens) / g * g).saturating_sub(g);
        assert!(
            next.hit >= bound,
            "request {}: hit {} < bound {bound} (previous prompt {}, completion {}, G {g})",
            next.seq,
            next.hit,
            previous.prompt_tokens,
            previous.completion_tokens
        );
    }
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_after_the_first_hits_the_cache_with_granularity_64() {
    hits_follow_the_append_only_bound(64).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_after_the_first_hits_the_cache_with_granularity_128() {
    hits_follow_the_append_only_bound(128).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_runs_offline_and_every_request_is_rebuilt() {
    let env = Env::new().await;
    let output = env.dsh(&["demo"]).await;
    assert!(output.status.success(), "{}", describe(&output));
    let text = stdout(&output);
    assert!(text.contains("7 of 7 requests"), "{text}");
    assert!(text.contains("audit ok"), "{text}");
    for step in 1..=7 {
        let heading = format!("── step {step} ──");
        assert_eq!(text.matches(&heading).count(), 1, "each step is printed once: {text}");
    }
    // The AGENTS.md edit joins turn two's first request as a note: the cache holds.
    let line = text
        .lines()
        .find(|line| line.contains("the first request after the AGENTS.md edit"))
        .unwrap_or_else(|| panic!("the demo says what the edit cost: {text}"));
    let percent: f64 =
        line.rsplit(": ").next().unwrap().split('%').next().unwrap().parse().unwrap();
    assert!(percent >= 90.0, "the cache held through the edit: {line}");
    assert!(text.contains("The workspace instructions changed"), "the note is shown: {text}");
    assert!(!text.contains("system prompt changed"), "{text}");
}
