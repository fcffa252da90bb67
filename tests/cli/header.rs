//! An edited `AGENTS.md`: under the `append` policy (the default) it joins the next request as
//! a logged note and the cache holds; under `rewrite` it changes the header through a logged
//! event, and `dsh usage` attributes the cache drop to it.

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

/// The workspace asks for the `rewrite` policy.
fn rewrite_policy(env: &Env) {
    write(&env.workspace, ".dsh/config.toml", "[instructions]\non_edit = \"rewrite\"\n");
}

fn usage_row(usage: &Value, step: u64) -> &Value {
    usage["rows"].as_array().unwrap().iter().find(|row| row["step"] == step).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_rewrite_agents_md_edited_during_a_turn_logs_one_header_delta_that_usage_blames() {
    let env = Env::new().await;
    rewrite_policy(&env);
    write(&env.workspace, "AGENTS.md", &agents_md("Scripts use /bin/sh."));
    write(&env.workspace, "notes.txt", "hello\n");
    env.script(json!([
        // Step 1 is held by the mock until the test has edited AGENTS.md.
        { "reasoning": "Look at the notes.", "delay_ms": 1500,
          "tool_calls": [{ "name": "read_file", "arguments": "{\"path\":\"notes.txt\"}" }] },
        { "reasoning": "Done.", "content": "The notes say hello." },
    ]))
    .await;
    let child = env.prompt_new_command("What do the notes say?").spawn().unwrap();
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
    assert_eq!(
        row["causes"],
        json!([{ "kind": "systemChanged", "seq": delta_seq, "foldedInstructions": false }]),
        "{row:#}"
    );
    assert!(row["explanation"].as_str().unwrap().contains("system prompt changed"), "{row:#}");
    assert!(requests[1].hit > 0, "the unchanged base prompt still hits");
    env.assert_audit_ok(&session).await;
}

/// Turn 1 and turn 2 run in the same daemon (the one the first `dsh prompt` started), so the
/// session's loop instance carries on: the edit is a header delta at turn 2's first step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_rewrite_agents_md_edited_between_turns_logs_one_header_delta_that_usage_blames() {
    let env = Env::new().await;
    rewrite_policy(&env);
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
    assert_eq!(
        row["causes"],
        json!([{ "kind": "systemChanged", "seq": delta_seq, "foldedInstructions": false }]),
        "{row:#}"
    );
    env.assert_audit_ok(&session).await;
}

/// When the daemon stopped between the two turns, the second turn runs in a new loop instance:
/// its first request logs a `resume` snapshot (docs/loop.md, "One step", step 6) that carries the edit, and
/// `dsh usage` blames the drop on it (`resume` with `changed: true`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_rewrite_agents_md_edited_while_the_daemon_was_down_is_a_changed_resume_snapshot() {
    let env = Env::new().await;
    rewrite_policy(&env);
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

/// The logged `instructions` notes of a session.
fn instruction_notes(events: &[dsh_session::Event]) -> Vec<(u64, dsh_session::ContextMessage)> {
    events
        .iter()
        .filter_map(|event| match &event.data {
            EventData::ContextMessage(note) if note.source.as_deref() == Some("instructions") => {
                Some((event.seq, note.clone()))
            }
            _ => None,
        })
        .collect()
}

fn step_start_seq(events: &[dsh_session::Event], step: u64) -> u64 {
    events
        .iter()
        .find_map(|event| match &event.data {
            EventData::StepStart(start) if start.step == step => Some(event.seq),
            _ => None,
        })
        .unwrap()
}

/// The cache holds through a note: request `next` is served everything of request `before`'s
/// prompt (its theoretical maximum: the mock also caches the completion, so it may be more)
/// but at most the last granule the mock withholds (64 tokens).
fn assert_cache_held(before: &dsh_mock::RecordedRequest, next: &dsh_mock::RecordedRequest) {
    let theoretical = before.prompt_tokens;
    assert!(next.hit + 64 >= theoretical, "the cache held: {} of {theoretical}", next.hit);
    assert!(next.hit as f64 >= 0.95 * theoretical as f64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_md_edited_during_a_turn_joins_the_next_request_as_one_logged_note() {
    let env = Env::new().await;
    write(&env.workspace, "AGENTS.md", &agents_md("Scripts use /bin/sh."));
    write(&env.workspace, "notes.txt", "hello\n");
    env.script(json!([
        { "reasoning": "Look at the notes.", "delay_ms": 1500,
          "tool_calls": [{ "name": "read_file", "arguments": "{\"path\":\"notes.txt\"}" }] },
        { "reasoning": "Done.", "content": "The notes say hello." },
    ]))
    .await;
    let child = env.prompt_new_command("What do the notes say?").spawn().unwrap();
    env.wait_for_requests(1).await;
    write(&env.workspace, "AGENTS.md", &agents_md("Scripts use /bin/sh, never bash."));
    let output = crate::support::run_child(child).await;
    assert!(output.status.success(), "{}", describe(&output));
    let session = crate::support::session_id_of(&output);

    let events = env.events(&session);
    assert!(of_kind(&events, "request/header-delta").is_empty(), "the header holds");
    assert_eq!(of_kind(&events, "request/header").len(), 1);
    let notes = instruction_notes(&events);
    assert_eq!(notes.len(), 1, "exactly one note: {notes:#?}");
    let (note_seq, note) = &notes[0];
    // It joined step 2: after step 1's events, before step 2's boundary.
    assert!(step_start_seq(&events, 1) < *note_seq && *note_seq < step_start_seq(&events, 2));
    assert!(note.text.contains("AGENTS.md was edited"), "{}", note.text);
    assert!(note.text.contains("-Scripts use /bin/sh.\n+Scripts use /bin/sh, never bash."));
    assert!(!note.text.contains("rule 100"), "a diff, not the whole file: {}", note.text);
    let known = note.instructions.as_ref().unwrap();
    assert_eq!(known.len(), 1);
    assert!(known[0].text.contains("never bash"));

    let requests = env.requests();
    assert_eq!(requests.len(), 2);
    let body: Value = serde_json::from_slice(&requests[1].body).unwrap();
    let messages = body["messages"].as_array().unwrap();
    let system = messages[0]["content"].as_str().unwrap();
    assert!(system.contains("Scripts use /bin/sh.") && !system.contains("never bash"));
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "user", "the note is the request's last message");
    assert_eq!(last["content"], note.text.as_str());
    assert_cache_held(&requests[0], &requests[1]);

    let usage = env.dsh_json(&["usage", &session]).await;
    let row = usage_row(&usage, 2);
    assert_eq!(row["dropped"], false, "{row:#}");
    assert_eq!(row["causes"], json!([]), "{row:#}");
    // "What the model saw" shows the note where it joined.
    let saw = env.dsh_ok(&["saw", &session, "--step", "2"]).await;
    let saw = String::from_utf8_lossy(&saw.stdout);
    let joined = format!("[seq {note_seq}] user: \"The workspace instructions changed");
    assert!(saw.contains(&joined), "{saw}");
    env.assert_audit_ok(&session).await;
}

/// Between turns, twice: each note is a diff against what the model was told last (the earlier
/// note), and a deleted file is said to be deleted. A resumed loop (a daemon restart) does not
/// repeat a note.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_edit_between_turns_is_noted_against_what_the_model_was_told_last() {
    let env = Env::new().await;
    write(&env.workspace, "AGENTS.md", &agents_md("Scripts use /bin/sh."));
    env.script(json!([tool_reply("Check.", "list_dir", json!({}))])).await;
    let (session, output) = env.prompt_new("List the workspace.").await;
    assert!(output.status.success(), "{}", describe(&output));
    write(&env.workspace, "AGENTS.md", &agents_md("Scripts use /bin/sh, never bash."));
    let output = env.prompt_in(&session, "Again, please.").await;
    assert!(output.status.success(), "{}", describe(&output));
    write(&env.workspace, "AGENTS.md", &agents_md("Scripts use /bin/sh, never bash or zsh."));
    let output = env.prompt_in(&session, "Once more.").await;
    assert!(output.status.success(), "{}", describe(&output));
    // Down and up again, no edit: the resumed loop notes nothing.
    env.dsh_ok(&["shutdown"]).await;
    let output = env.prompt_in(&session, "And again.").await;
    assert!(output.status.success(), "{}", describe(&output));
    std::fs::remove_file(env.workspace.join("AGENTS.md")).unwrap();
    let output = env.prompt_in(&session, "Last one.").await;
    assert!(output.status.success(), "{}", describe(&output));

    let events = env.events(&session);
    assert!(of_kind(&events, "request/header-delta").is_empty(), "the header never changed");
    let notes = instruction_notes(&events);
    assert_eq!(notes.len(), 3, "{notes:#?}");
    assert!(notes[0].1.text.contains("+Scripts use /bin/sh, never bash.\n"), "{}", notes[0].1.text);
    assert!(
        notes[1].1.text.contains(
            "-Scripts use /bin/sh, never bash.\n+Scripts use /bin/sh, never bash or zsh."
        ),
        "the second diff is against the first note: {}",
        notes[1].1.text
    );
    assert!(notes[2].1.text.contains("AGENTS.md was deleted"), "{}", notes[2].1.text);
    assert_eq!(notes[2].1.instructions, Some(Vec::new()));
    let snapshots = of_kind(&events, "request/header");
    assert_eq!(snapshots.len(), 2, "the initial one and the resume");
    let usage = env.dsh_json(&["usage", &session]).await;
    for row in usage["rows"].as_array().unwrap().iter().skip(1) {
        assert_eq!(row["dropped"], false, "{row:#}");
    }
    let requests = env.requests();
    for pair in requests.windows(2) {
        assert_cache_held(&pair[0], &pair[1]);
    }
    env.assert_audit_ok(&session).await;
}

/// A compaction rewrites the prefix anyway: the next request folds the edited file into the
/// system prompt (one header delta), and the usage view says the notes were folded in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_folds_the_noted_instructions_into_the_system_prompt() {
    let env = Env::new().await;
    write(&env.workspace, "AGENTS.md", &agents_md("Scripts use /bin/sh."));
    let (session, output) = env.prompt_new("first question").await;
    assert!(output.status.success(), "{}", describe(&output));
    write(&env.workspace, "AGENTS.md", &agents_md("Scripts use /bin/sh, never bash."));
    for text in ["second question", "third question"] {
        let output = env.prompt_in(&session, text).await;
        assert!(output.status.success(), "{}", describe(&output));
    }
    env.script(json!([{ "match": { "has_tools": false }, "content": "The user asked thrice." }]))
        .await;
    env.dsh_ok(&["compact", &session]).await;
    let output = env.prompt_in(&session, "fourth question").await;
    assert!(output.status.success(), "{}", describe(&output));

    let events = env.events(&session);
    assert_eq!(instruction_notes(&events).len(), 1);
    let deltas = of_kind(&events, "request/header-delta");
    assert_eq!(deltas.len(), 1, "{deltas:#?}");
    let EventData::RequestHeaderDelta(delta) = &deltas[0].data else { unreachable!() };
    assert!(delta.system.is_some() && delta.tools.is_none() && delta.config.is_none());
    let requests = env.requests();
    let last: Value = serde_json::from_slice(&requests.last().unwrap().body).unwrap();
    let system = last["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("never bash"), "the system prompt holds the edit now");
    let usage = env.dsh_json(&["usage", &session]).await;
    let row = usage["rows"].as_array().unwrap().last().unwrap();
    let causes = row["causes"].as_array().unwrap();
    assert!(
        causes.contains(
            &json!({ "kind": "systemChanged", "seq": deltas[0].seq, "foldedInstructions": true })
        ),
        "{row:#}"
    );
    assert!(
        row["explanation"].as_str().unwrap().contains("instruction notes folded in"),
        "{row:#}"
    );
    env.assert_audit_ok(&session).await;
}

/// Under `append`, an edit made while the daemon was down: the resumed loop's snapshot repeats
/// the header unchanged (the cache holds) and the edit joins as a note.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_md_edited_while_the_daemon_was_down_joins_as_a_note_after_an_unchanged_resume() {
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
    assert_eq!(instruction_notes(&events).len(), 1);
    let usage = env.dsh_json(&["usage", &session]).await;
    let row = usage_row(&usage, 3);
    assert_eq!(row["dropped"], false, "{row:#}");
    let causes = row["causes"].as_array().unwrap();
    assert_eq!(causes.len(), 1, "{row:#}");
    assert_eq!(causes[0]["kind"], "resume");
    assert_eq!(causes[0]["changed"], false, "the header is the same: {row:#}");
    let requests = env.requests();
    assert_cache_held(&requests[1], &requests[2]);
    env.assert_audit_ok(&session).await;
}
