//! The chain of instruction files: the user's global `AGENTS.md`, the workspace root's
//! (`AGENTS.override.md` before `AGENTS.md`), and nested ones, which join as a logged note once
//! the agent works under their directory — appended, so the cache holds.

use dsh_session::{ChangeKind, EventData};
use serde_json::{Value, json};

use crate::support::{Env, describe, of_kind, tool_reply, write};

/// The `instructions` notes of a session, with their seqs.
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

fn system_of(request: &dsh_mock::RecordedRequest) -> String {
    let body: Value = serde_json::from_slice(&request.body).unwrap();
    body["messages"][0]["content"].as_str().unwrap().to_owned()
}

fn last_message(request: &dsh_mock::RecordedRequest) -> Value {
    let body: Value = serde_json::from_slice(&request.body).unwrap();
    body["messages"].as_array().unwrap().last().unwrap().clone()
}

/// A long nested file, so that the note is well above the mock's cache granule.
fn nested_md(marker: &str) -> String {
    let mut text = format!("# Under sub\n\n{marker}\n\n");
    for line in 0..40 {
        text.push_str(&format!("- sub rule {line}: tests beside the code.\n"));
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_file_and_the_override_are_in_the_first_request() {
    let env = Env::new().await;
    // The user's dsh directory is the one holding the user's configuration file.
    write(&env.root, "AGENTS.md", "Global: always answer in English.\n");
    write(&env.workspace, "AGENTS.md", "Root: plain file.\n");
    write(&env.workspace, "AGENTS.override.md", "Root: the override.\n");
    write(&env.workspace, "CLAUDE.md", "Root: the fallback.\n");
    write(&env.workspace, ".dsh/instructions.md", "Dsh: local notes.\n");
    env.script(json!([{ "content": "Hello." }])).await;
    let (session, output) = env.prompt_new("Hi").await;
    assert!(output.status.success(), "{}", describe(&output));

    let requests = env.requests();
    let system = system_of(&requests[0]);
    let global = env.root.join("AGENTS.md");
    let heading = format!("# Workspace instructions ({})", global.display());
    assert!(system.contains(&heading), "{system}");
    let order: Vec<usize> = ["Global: always", "Root: the override.", "Dsh: local notes."]
        .iter()
        .map(|text| system.find(text).unwrap_or_else(|| panic!("{text} missing: {system}")))
        .collect();
    assert!(order.windows(2).all(|pair| pair[0] < pair[1]), "global, root, .dsh: {order:?}");
    assert!(!system.contains("Root: plain file."), "the override takes precedence");
    assert!(!system.contains("Root: the fallback."));
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_md_is_the_fallback_name() {
    let env = Env::new().await;
    write(&env.workspace, "CLAUDE.md", "Root: the fallback.\n");
    env.script(json!([{ "content": "Hello." }])).await;
    let (session, output) = env.prompt_new("Hi").await;
    assert!(output.status.success(), "{}", describe(&output));
    let system = system_of(&env.requests()[0]);
    assert!(system.contains("# Workspace instructions (CLAUDE.md)\n\nRoot: the fallback."));
    env.assert_audit_ok(&session).await;
}

/// A nested `sub/AGENTS.md` is absent from the first request; after the agent read
/// `sub/x.txt` it joins the next request as one logged note at its end, and the cache holds.
/// An edit of it in a later turn is noted as a diff, as the root file's edits are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_agents_md_joins_as_a_note_after_the_agent_worked_under_it() {
    let env = Env::new().await;
    write(&env.workspace, "AGENTS.md", "Root rules.\n");
    write(&env.workspace, "sub/AGENTS.md", &nested_md("Sub: use tabs."));
    write(&env.workspace, "sub/x.txt", "x\n");
    write(&env.workspace, "other/AGENTS.md", "Other: never seen.\n");
    env.script(json!([
        tool_reply("Read it.", "read_file", json!({ "path": "sub/x.txt" })),
        { "content": "It says x." },
        { "content": "Still x." },
    ]))
    .await;
    let (session, output) = env.prompt_new("What is in sub/x.txt?").await;
    assert!(output.status.success(), "{}", describe(&output));

    let requests = env.requests();
    assert_eq!(requests.len(), 2);
    let first = serde_json::from_slice::<Value>(&requests[0].body).unwrap().to_string();
    assert!(!first.contains("Sub: use tabs."), "absent from the first request");
    let events = env.events(&session);
    let notes = instruction_notes(&events);
    assert_eq!(notes.len(), 1, "{notes:#?}");
    let note = &notes[0].1;
    assert!(note.text.contains("sub/AGENTS.md holds the instructions for the files under sub/"));
    assert!(note.text.contains("Sub: use tabs."), "{}", note.text);
    let files = note.files.as_ref().unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!((files[0].path.as_str(), files[0].change), ("sub/AGENTS.md", ChangeKind::Added));
    assert!(!note.text.contains("Other: never seen."), "only where the agent worked");
    let last = last_message(&requests[1]);
    assert_eq!(last["role"], "user", "the note is the request's last message");
    assert_eq!(last["content"], note.text.as_str());
    assert_eq!(system_of(&requests[1]), system_of(&requests[0]), "the system prompt holds");
    assert!(of_kind(&events, "request/header-delta").is_empty(), "the header holds");
    // The cache: everything of the first request's prompt but the last granule (64 tokens).
    let possible = requests[0].prompt_tokens;
    eprintln!("nested note: cache hit {} of {possible} possible tokens", requests[1].hit);
    assert!(requests[1].hit + 64 >= possible, "{} of {possible}", requests[1].hit);
    assert!(requests[1].hit as f64 >= 0.95 * possible as f64);

    // A later edit of the nested file: a diff against what the model was told.
    write(&env.workspace, "sub/AGENTS.md", &nested_md("Sub: use spaces."));
    let output = env.prompt_in(&session, "And now?").await;
    assert!(output.status.success(), "{}", describe(&output));
    let notes = instruction_notes(&env.events(&session));
    assert_eq!(notes.len(), 2, "{notes:#?}");
    assert!(notes[1].1.text.contains("sub/AGENTS.md was edited"), "{}", notes[1].1.text);
    assert!(notes[1].1.text.contains("-Sub: use tabs.\n+Sub: use spaces."), "{}", notes[1].1.text);
    env.assert_audit_ok(&session).await;
}

/// A nested `AGENTS.md` that is a link out of the workspace is never read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_agents_md_linked_out_of_the_workspace_is_never_read() {
    let env = Env::new().await;
    write(&env.root, "outside.md", "SECRET outside instructions.\n");
    write(&env.workspace, "sub/x.txt", "x\n");
    std::os::unix::fs::symlink(env.root.join("outside.md"), env.workspace.join("sub/AGENTS.md"))
        .unwrap();
    env.script(json!([
        tool_reply("Read it.", "read_file", json!({ "path": "sub/x.txt" })),
        { "content": "It says x." },
    ]))
    .await;
    let (session, output) = env.prompt_new("What is in sub/x.txt?").await;
    assert!(output.status.success(), "{}", describe(&output));
    for request in env.requests() {
        assert!(!String::from_utf8_lossy(&request.body).contains("SECRET"));
    }
    assert!(instruction_notes(&env.events(&session)).is_empty());
    env.assert_audit_ok(&session).await;
}
