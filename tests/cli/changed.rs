//! Files the agent read or wrote that change on disk under its feet: the next request starts with
//! one logged `workspace` note (a diff against the version the agent last saw, or what became
//! of the file); the agent's own writes — its file tools and its commands — are never reported
//! back to it; changes made while the daemon was down are noticed on the first turn after.

use dsh_session::{ChangeKind, ContextMessage, Event, EventData};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use crate::support::{Env, describe, tool_reply, write};

fn workspace_notes(events: &[Event]) -> Vec<(u64, ContextMessage)> {
    events
        .iter()
        .filter_map(|event| match &event.data {
            EventData::ContextMessage(note) if note.source.as_deref() == Some("workspace") => {
                Some((event.seq, note.clone()))
            }
            _ => None,
        })
        .collect()
}

fn step_start_seq(events: &[Event], step: u64) -> u64 {
    events
        .iter()
        .find_map(|event| match &event.data {
            EventData::StepStart(start) if start.step == step => Some(event.seq),
            _ => None,
        })
        .unwrap()
}

fn read(path: &str) -> Value {
    tool_reply("Read it.", "read_file", json!({ "path": path }))
}

fn sha256(text: &str) -> String {
    format!("{:x}", Sha256::digest(text.as_bytes()))
}

/// The user edits a file the agent read, between turns: one note, with the diff, in the next
/// request — and the agent's own `edit_file` and `run_command` changes are not reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_edited_by_the_user_is_noted_once_and_the_agents_own_edits_never() {
    let env = Env::new().await;
    write(&env.workspace, "notes.txt", "one\ntwo\nthree\n");
    write(&env.workspace, "own.txt", "alpha\n");
    env.script(json!([
        read("notes.txt"),
        read("own.txt"),
        tool_reply("Fix it.", "edit_file", json!({ "path": "own.txt", "old_string": "alpha", "new_string": "beta" })),
        tool_reply("Append.", "run_command", json!({ "command": "echo gamma >> own.txt" })),
        { "reasoning": "Done.", "content": "Read both." },
    ]))
    .await;
    let (session, output) = env.prompt_new("Read the notes.").await;
    assert!(output.status.success(), "{}", describe(&output));
    write(&env.workspace, "notes.txt", "one\n2\nthree\n");
    let output = env.prompt_in(&session, "Again.").await;
    assert!(output.status.success(), "{}", describe(&output));

    let events = env.events(&session);
    let notes = workspace_notes(&events);
    assert_eq!(notes.len(), 1, "one note, for the user's edit only: {notes:#?}");
    let (seq, note) = &notes[0];
    // Turn 1 ran five steps; the note joins turn 2's first, step 6.
    assert!(step_start_seq(&events, 5) < *seq && *seq < step_start_seq(&events, 6));
    assert!(note.text.contains("notes.txt was edited"), "{}", note.text);
    assert!(note.text.contains("-two\n+2\n"), "a diff: {}", note.text);
    let files = note.files.as_ref().unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].path, "notes.txt");
    assert_eq!(files[0].change, ChangeKind::Edited);
    assert_eq!(files[0].sha256.as_deref(), Some(sha256("one\n2\nthree\n").as_str()));
    // The command's change is logged with its result, as the agent's own.
    let command_result = events
        .iter()
        .find_map(|event| match &event.data {
            EventData::ToolResult(result) if result.name == "run_command" => Some(result.clone()),
            _ => None,
        })
        .unwrap();
    let seen = command_result.seen.expect("the command changed a file the agent knew");
    assert_eq!(seen[0].path, "own.txt");
    assert_eq!(seen[0].sha256.as_deref(), Some(sha256("beta\ngamma\n").as_str()));

    let requests = env.requests();
    let body: Value = serde_json::from_slice(&requests[5].body).unwrap();
    let last = body["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["content"], note.text.as_str(), "the note is the request's last message");
    env.assert_audit_ok(&session).await;
}

/// A change during a turn joins the turn's next request; a burst of changes is one note.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_during_a_turn_are_one_note_in_its_next_request() {
    let env = Env::new().await;
    write(&env.workspace, "a.txt", "a\n");
    write(&env.workspace, "b.txt", "b\n");
    env.script(json!([
        read("a.txt"),
        // Step 2 is held by the mock while the test edits both files.
        { "reasoning": "Read b.", "delay_ms": 1500,
          "tool_calls": [{ "name": "read_file", "arguments": "{\"path\":\"b.txt\"}" }] },
        { "reasoning": "Done.", "content": "Both read." },
    ]))
    .await;
    let child = env.prompt_new_command("Read a and b.").spawn().unwrap();
    env.wait_for_requests(2).await;
    write(&env.workspace, "a.txt", "a!\n");
    std::fs::remove_file(env.workspace.join("b.txt")).unwrap();
    write(&env.workspace, "b.txt", "b, rewritten\n");
    let output = crate::support::run_child(child).await;
    assert!(output.status.success(), "{}", describe(&output));
    let session = crate::support::session_id_of(&output);

    let events = env.events(&session);
    let notes = workspace_notes(&events);
    // b.txt was read after the edit (step 2's tool ran after it): only a.txt changed under it.
    assert_eq!(notes.len(), 1, "{notes:#?}");
    let (seq, note) = &notes[0];
    assert!(step_start_seq(&events, 2) < *seq && *seq < step_start_seq(&events, 3));
    let paths: Vec<&str> = note.files.iter().flatten().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["a.txt"], "{}", note.text);
    assert!(note.text.contains("-a\n+a!"), "{}", note.text);
    env.assert_audit_ok(&session).await;
}

/// While the daemon was down the user edited one file, deleted another, turned a third into a
/// link out of the workspace, a fourth into binary data and appended to a large fifth: the first
/// turn after the restart says so, never showing what the link points to or binary content.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_made_while_the_daemon_was_down_are_noted_after_the_restart() {
    let env = Env::new().await;
    write(&env.workspace, "kept.txt", "kept\n");
    write(&env.workspace, "gone.txt", "gone\n");
    write(&env.workspace, "link.txt", "plain\n");
    write(&env.workspace, "data.txt", "text for now\n");
    let big = "a line of a large file\n".repeat(16_000);
    write(&env.workspace, "big.txt", &big);
    let secret = env.workspace.parent().unwrap().join("secret.txt");
    std::fs::write(&secret, "TOP SECRET\n").unwrap();
    env.script(json!([read("kept.txt"), read("gone.txt"), read("link.txt"), read("data.txt"), read("big.txt"),
        { "reasoning": "Done.", "content": "Read." }]))
        .await;
    let (session, output) = env.prompt_new("Read the three files.").await;
    assert!(output.status.success(), "{}", describe(&output));
    env.dsh_ok(&["shutdown"]).await;
    write(&env.workspace, "kept.txt", "kept, edited\n");
    std::fs::remove_file(env.workspace.join("gone.txt")).unwrap();
    std::fs::remove_file(env.workspace.join("link.txt")).unwrap();
    std::os::unix::fs::symlink(&secret, env.workspace.join("link.txt")).unwrap();
    std::fs::write(env.workspace.join("data.txt"), b"SECRET\0binary\0").unwrap();
    write(&env.workspace, "big.txt", &format!("{big}one more\n"));
    let output = env.prompt_in(&session, "Anything new?").await;
    assert!(output.status.success(), "{}", describe(&output));
    // And nothing is noted twice.
    let output = env.prompt_in(&session, "Still?").await;
    assert!(output.status.success(), "{}", describe(&output));

    let events = env.events(&session);
    let notes = workspace_notes(&events);
    assert_eq!(notes.len(), 1, "{notes:#?}");
    let note = &notes[0].1;
    let changes: Vec<(&str, ChangeKind)> =
        note.files.iter().flatten().map(|f| (f.path.as_str(), f.change)).collect();
    assert_eq!(
        changes,
        [
            ("big.txt", ChangeKind::Edited),
            ("data.txt", ChangeKind::Edited),
            ("gone.txt", ChangeKind::Deleted),
            ("kept.txt", ChangeKind::Edited),
            ("link.txt", ChangeKind::Replaced)
        ]
    );
    assert!(note.text.contains("gone.txt was deleted."), "{}", note.text);
    let large =
        format!("big.txt changed ({} bytes now, not shown: binary or large)", big.len() + 9);
    assert!(note.text.contains(&large), "{}", note.text);
    assert!(
        note.text.contains("data.txt changed (14 bytes now, not shown: binary"),
        "{}",
        note.text
    );
    assert!(note.text.contains("kept.txt changed"), "{}", note.text);
    assert!(note.text.contains("link.txt now resolves outside the workspace"), "{}", note.text);
    assert!(!note.text.contains("SECRET"), "{}", note.text);
    env.assert_audit_ok(&session).await;
}

/// The `workspace/changed` notices a connection received so far: (path, change) pairs.
fn announced(other: &[Value]) -> Vec<(String, String)> {
    other
        .iter()
        .filter(|message| message["method"] == "workspace/changed")
        .flat_map(|message| {
            message["params"]["result"]["files"].as_array().cloned().unwrap_or_default()
        })
        .map(|file| {
            (file["path"].as_str().unwrap().to_owned(), file["change"].as_str().unwrap().to_owned())
        })
        .collect()
}

/// A `daemon/subscribe` client hears at once of a file the agent read that the user changed,
/// and of an instruction file — never of the agent's own writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_hear_of_a_changed_file_at_once_but_not_of_the_agents_own_writes() {
    let env = Env::new().await;
    write(&env.workspace, "notes.txt", "one\n");
    write(&env.workspace, "own.txt", "alpha\n");
    write(&env.workspace, "AGENTS.md", "# Notes\n");
    env.script(
        json!([read("notes.txt"), read("own.txt"), { "reasoning": "Done.", "content": "Read." }]),
    )
    .await;
    let (session, output) = env.prompt_new("Read the notes.").await;
    assert!(output.status.success(), "{}", describe(&output));
    let client = env.client().await;
    client.ok("daemon/subscribe", json!({})).await;

    // The agent edits own.txt itself — and its turn goes on a while after: no notice.
    env.script(json!([
        tool_reply("Edit.", "edit_file", json!({ "path": "own.txt", "old_string": "alpha", "new_string": "beta" })),
        { "reasoning": "Done.", "content": "Edited.", "delay_ms": 1000 },
    ]))
    .await;
    let output = env.prompt_in(&session, "Edit own.txt.").await;
    assert!(output.status.success(), "{}", describe(&output));
    // The user edits notes.txt, then AGENTS.md, then deletes notes.txt.
    write(&env.workspace, "notes.txt", "one, edited\n");
    client
        .wait_until("notes.txt announced", |inbox| {
            announced(&inbox.other).contains(&("notes.txt".to_owned(), "edited".to_owned()))
        })
        .await;
    write(&env.workspace, "AGENTS.md", "# Notes\n\nNew rule.\n");
    client
        .wait_until("AGENTS.md announced", |inbox| {
            announced(&inbox.other).contains(&("AGENTS.md".to_owned(), "edited".to_owned()))
        })
        .await;
    std::fs::remove_file(env.workspace.join("notes.txt")).unwrap();
    client
        .wait_until("the deletion announced", |inbox| {
            announced(&inbox.other).contains(&("notes.txt".to_owned(), "deleted".to_owned()))
        })
        .await;
    let all = announced(&client.other());
    assert!(all.iter().all(|(path, _)| path != "own.txt"), "the agent's own write: {all:?}");
    let notice = client
        .other()
        .into_iter()
        .find(|message| message["method"] == "workspace/changed")
        .unwrap();
    let root = env.workspace.canonicalize().unwrap();
    assert_eq!(notice["params"]["result"]["workspace"], root.to_str().unwrap());
    // What the model is told is the logged note of the next request.
    let output = env.prompt_in(&session, "Anything new?").await;
    assert!(output.status.success(), "{}", describe(&output));
    let notes = workspace_notes(&env.events(&session));
    assert_eq!(notes.len(), 1, "{notes:#?}");
    assert!(notes[0].1.text.contains("notes.txt was deleted."), "{}", notes[0].1.text);
}

/// With the system's watch limit reached, `daemon/status` says so and the model is still told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_limit_is_a_warning_and_the_next_request_still_notes_the_change() {
    let env = Env::new().await;
    write(&env.workspace, "notes.txt", "one\n");
    env.script(json!([read("notes.txt"), { "reasoning": "Done.", "content": "Read." }])).await;
    let child = env
        .prompt_new_command("Read the notes.")
        .env("DSH_DEBUG_WATCH_LIMIT", "0")
        .spawn()
        .unwrap();
    let output = crate::support::run_child(child).await;
    assert!(output.status.success(), "{}", describe(&output));
    let session = crate::support::session_id_of(&output);
    let status = env.dsh_json(&["status"]).await;
    let warnings = status["warnings"].as_array().unwrap();
    assert!(
        warnings.iter().any(|w| w.as_str().unwrap().contains("file watching is degraded")),
        "{status:#}"
    );
    write(&env.workspace, "notes.txt", "two\n");
    let output = env.prompt_in(&session, "Again.").await;
    assert!(output.status.success(), "{}", describe(&output));
    let notes = workspace_notes(&env.events(&session));
    assert_eq!(notes.len(), 1, "{notes:#?}");
    assert!(notes[0].1.text.contains("-one\n+two"), "{}", notes[0].1.text);
}
