//! An edited `AGENTS.md` changes the header through a logged event, and `dsh usage` attributes
//! the cache drop to it.

use dsh_session::{EventData, SnapshotReason};
use serde_json::{Value, json};

use crate::support::{Env, describe, of_kind, tool_reply, write};

/// A long instruction file, so that the prefix lost to an edit near its top is well above the
/// usage view's drop slack.
fn agents_md(marker: &str) -> String {
    let mut text = format!("# Project notes\n\n{marker}\n\n");
    for line in 0..120 {
        text.push_str(&format!("- rule {line}: keep functions short and name things plainly.\n"));
    }
    text
}

fn usage_row(usage: &Value, step: u64) -> &Value {
    usage["rows"].as_array().unwrap().iter().find(|row| row["step"] == step).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_md_edited_during_a_turn_logs_one_header_delta_that_usage_blames() {
    let env = Env::new().await;
    write(&env.workspace, "AGENTS.md", &agents_md("Scripts use /bin/sh."));
    write(&env.workspace, "notes.txt", "hello\n");
    env.script(json!([
        // Step 1 is held by the mock until the test has edited AGENTS.md.
        { "reasoning": "Look at the notes.", "delay_ms": 1500,
          "tool_calls": [{ "name": "read_file", "arguments": "{\"path\":\"notes.txt\"}" }] },
        { "reasoning": "Done.", "content": "The notes say hello." },
    ]))
    .await;
    let workspace = env.workspace.to_str().unwrap().to_owned();
    let child = env
        .command(&["prompt", "--yes", "--workspace", &workspace, "What do the notes say?"])
        .spawn()
        .unwrap();
    // Step 1's request was rendered and sent with the old file; edit it before step 2 renders.
    env.wait_for_requests(1).await;
    write(&env.workspace, "AGENTS.md", &agents_md("Scripts use /bin/sh, never bash."));
    let output = crate::support::run_child(child).await;
    assert!(output.status.success(), "{}", describe(&output));
    let session = crate::support::session_id_of(&output);

    let events = env.events(&session);
    let deltas = of_kind(&events, "request/header-delta");
    assert_eq!(deltas.len(), 1, "exactly one header delta: {deltas:#?}");
    let delta_seq = deltas[0].seq;
    let EventData::RequestHeaderDelta(delta) = &deltas[0].data else { unreachable!() };
    assert!(delta.system.is_some() && delta.tools.is_none() && delta.config.is_none(), "{delta:?}");
    assert_eq!(of_kind(&events, "request/header").len(), 1, "only the initial snapshot");

    let requests = env.requests();
    assert_eq!(requests.len(), 2);
    let body = String::from_utf8_lossy(&requests[1].body);
    assert!(body.contains("never bash"), "step 2 sends the edited instructions: {body}");

    let usage = env.dsh_json(&["usage", &session]).await;
    let row = usage_row(&usage, 2);
    assert_eq!(row["dropped"], true, "the edit drops the cache: {row:#}");
    assert_eq!(row["causes"], json!([{ "kind": "systemChanged", "seq": delta_seq }]), "{row:#}");
    assert!(row["explanation"].as_str().unwrap().contains("system prompt changed"), "{row:#}");
    assert!(requests[1].hit > 0, "the unchanged base prompt still hits");
    env.assert_audit_ok(&session).await;
}

/// Turn 1 and turn 2 run in the same daemon (the one the first `dsh prompt` started), so the
/// session's loop instance carries on: the edit is a header delta at turn 2's first step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_md_edited_between_turns_logs_one_header_delta_that_usage_blames() {
    let env = Env::new().await;
    write(&env.workspace, "AGENTS.md", &agents_md("Scripts use /bin/sh."));
    env.script(json!([tool_reply("Check.", "list_dir", json!({}))])).await;
    let (session, output) = env.prompt_new("List the workspace.").await;
    assert!(output.status.success(), "{}", describe(&output));
    write(&env.workspace, "AGENTS.md", &agents_md("Scripts use /bin/sh, never bash."));
    let output = env.prompt_in(&session, "Again, please.").await;
    assert!(output.status.success(), "{}", describe(&output));

    let events = env.events(&session);
    assert_eq!(of_kind(&events, "request/header").len(), 1, "only the initial snapshot");
    let deltas = of_kind(&events, "request/header-delta");
    assert_eq!(deltas.len(), 1, "exactly one header delta: {deltas:#?}");
    let delta_seq = deltas[0].seq;
    // Turn 1 had a tool step and an answer; turn 2 answers at once: step 3.
    assert_eq!(of_kind(&events, "step/start").len(), 3);
    let usage = env.dsh_json(&["usage", &session]).await;
    let row = usage_row(&usage, 3);
    assert_eq!(row["turn"], 2);
    assert_eq!(row["dropped"], true, "{row:#}");
    assert_eq!(row["causes"], json!([{ "kind": "systemChanged", "seq": delta_seq }]), "{row:#}");
    env.assert_audit_ok(&session).await;
}

/// When the daemon stopped between the two turns, the second turn runs in a new loop instance:
/// its first request logs a `resume` snapshot (docs/loop.md, "One step", step 6) that carries the edit, and
/// `dsh usage` blames the drop on it (`resume` with `changed: true`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_md_edited_while_the_daemon_was_down_is_a_changed_resume_snapshot() {
    let env = Env::new().await;
    write(&env.workspace, "AGENTS.md", &agents_md("Scripts use /bin/sh."));
    env.script(json!([tool_reply("Check.", "list_dir", json!({}))])).await;
    let (session, output) = env.prompt_new("List the workspace.").await;
    assert!(output.status.success(), "{}", describe(&output));
    env.dsh_ok(&["shutdown"]).await;
    write(&env.workspace, "AGENTS.md", &agents_md("Scripts use /bin/sh, never bash."));
    let output = env.prompt_in(&session, "Again, please.").await;
    assert!(output.status.success(), "{}", describe(&output));

    let events = env.events(&session);
    let snapshots: Vec<_> = of_kind(&events, "request/header")
        .into_iter()
        .map(|event| match &event.data {
            EventData::RequestHeader(snapshot) => (event.seq, snapshot.reason, snapshot.clone()),
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(snapshots.len(), 2);
    assert_eq!(snapshots[0].1, SnapshotReason::Initial);
    assert_eq!(snapshots[1].1, SnapshotReason::Resume);
    assert!(snapshots[1].2.header.system.as_deref().unwrap().contains("never bash"));
    assert!(of_kind(&events, "request/header-delta").is_empty());

    assert_eq!(of_kind(&events, "step/start").len(), 3);
    let usage = env.dsh_json(&["usage", &session]).await;
    let row = usage_row(&usage, 3);
    assert_eq!(row["turn"], 2);
    assert_eq!(row["dropped"], true, "{row:#}");
    assert_eq!(
        row["causes"],
        json!([{ "kind": "resume", "seq": snapshots[1].0, "changed": true }]),
        "{row:#}"
    );
    env.assert_audit_ok(&session).await;
}
