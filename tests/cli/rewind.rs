//! `dsh rewind` and `dsh checkpoints` end to end (docs/rewind.md), in a workspace that is not a
//! git repository: a turn whose tools write, edit, `sed -i`, `mv` and `rm` files; the rewind
//! restores every file and forks the conversation at the step's boundary, whose next request
//! begins with exactly the bytes of that step's request (and hits the mock's cache); both
//! sessions audit clean. Conflicts with the user's edits, turns running, unknown steps,
//! collected checkpoints, files-only and conversation-only rewinds, and undoing a rewind.

use std::path::Path;

use dsh_session::{CheckpointReason, Event, EventData, WorkspaceCheckpoint, WorkspaceRewind};
use serde_json::{Value, json};

use crate::support::{Env, describe, split_body, tool_reply, write};

const FILES: &[(&str, &str)] =
    &[("a.txt", "alpha\n"), ("b.txt", "bravo\n"), ("c.txt", "charlie\n"), ("d.txt", "delta\n")];

/// The files as they were before the turn, and the turn's script: step 1 writes `new.txt`,
/// step 2 runs `sed -i`, `mv` and `rm`, step 3 edits `a.txt`, step 4 ends.
async fn setup(env: &Env) -> String {
    for (path, text) in FILES {
        write(&env.workspace, path, text);
    }
    assert!(!env.workspace.join(".git").exists(), "the workspace is not a git repository");
    env.script(json!([
        tool_reply("Write.", "write_file", json!({ "path": "new.txt", "content": "new\n" })),
        tool_reply(
            "Shell.",
            "run_command",
            json!({ "command": "sed -i s/bravo/BRAVO/ b.txt && mv c.txt c2.txt && rm d.txt" })
        ),
        tool_reply("Edit.", "edit_file", json!({ "path": "a.txt", "old_string": "alpha", "new_string": "ALPHA" })),
        { "reasoning": "Done.", "content": "All changed." },
    ]))
    .await;
    let (session, output) = env.prompt_new("Change the files.").await;
    assert!(output.status.success(), "{}", describe(&output));
    assert_changed(&env.workspace);
    session
}

/// The workspace as the turn left it.
fn assert_changed(workspace: &Path) {
    assert_eq!(read(workspace, "a.txt").as_deref(), Some("ALPHA\n"));
    assert_eq!(read(workspace, "b.txt").as_deref(), Some("BRAVO\n"));
    assert_eq!(read(workspace, "c.txt"), None);
    assert_eq!(read(workspace, "c2.txt").as_deref(), Some("charlie\n"));
    assert_eq!(read(workspace, "d.txt"), None);
    assert_eq!(read(workspace, "new.txt").as_deref(), Some("new\n"));
}

/// The workspace as it was before the turn.
fn assert_original(workspace: &Path) {
    for (path, text) in FILES {
        assert_eq!(read(workspace, path).as_deref(), Some(*text), "{path}");
    }
    assert_eq!(read(workspace, "c2.txt"), None);
    assert_eq!(read(workspace, "new.txt"), None);
}

fn read(workspace: &Path, path: &str) -> Option<String> {
    std::fs::read_to_string(workspace.join(path)).ok()
}

fn checkpoints(events: &[Event]) -> Vec<(u64, WorkspaceCheckpoint)> {
    events
        .iter()
        .filter_map(|event| match &event.data {
            EventData::WorkspaceCheckpoint(checkpoint) => Some((event.seq, checkpoint.clone())),
            _ => None,
        })
        .collect()
}

fn rewinds(events: &[Event]) -> Vec<WorkspaceRewind> {
    events
        .iter()
        .filter_map(|event| match &event.data {
            EventData::WorkspaceRewind(rewind) => Some(rewind.clone()),
            _ => None,
        })
        .collect()
}

fn strings(value: &Value) -> Vec<String> {
    let mut list: Vec<String> =
        value.as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect();
    list.sort();
    list
}

/// The scenario: everything the turn did is undone, the conversation continues from
/// step 1's boundary with a request that begins with step 1's bytes and hits the cache, both
/// sessions audit clean, and the rewind itself can be undone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_restores_every_file_and_continues_from_the_steps_request() {
    let env = Env::new().await;
    let session = setup(&env).await;

    // Checkpoints: one per file-changing step (inside it, before its tools) and the turn's end.
    let events = env.events(&session);
    let taken = checkpoints(&events);
    let kinds: Vec<(Option<u64>, CheckpointReason)> =
        taken.iter().map(|(_, checkpoint)| (checkpoint.step, checkpoint.reason)).collect();
    assert_eq!(
        kinds,
        [
            (Some(1), CheckpointReason::Step),
            (Some(2), CheckpointReason::Step),
            (Some(3), CheckpointReason::Step),
            (None, CheckpointReason::TurnEnd),
        ]
    );
    assert_eq!(taken[0].1.files, 4);
    assert_eq!(taken[1].1.changed, ["new.txt"]);
    let listed = env.dsh_json(&["checkpoints", &session]).await;
    assert_eq!(listed["checkpoints"].as_array().unwrap().len(), 4);
    assert!(listed["checkpoints"].as_array().unwrap().iter().all(|c| c["available"] == true));

    // A dry run says what would change and changes nothing.
    let dry = env.dsh_json(&["rewind", &session, "--step", "1", "--dry-run"]).await;
    assert_eq!(dry["dryRun"], true);
    assert_eq!(dry["sessionId"], session.as_str());
    assert_changed(&env.workspace);
    assert_eq!(env.events(&session).len(), events.len(), "a dry run logs nothing");

    let rewound = env.dsh_json(&["rewind", &session, "--step", "1"]).await;
    assert_eq!(strings(&rewound["restored"]), ["a.txt", "b.txt"]);
    assert_eq!(strings(&rewound["created"]), ["c.txt", "d.txt"]);
    assert_eq!(strings(&rewound["deleted"]), ["c2.txt", "new.txt"]);
    assert_eq!(strings(&rewound["conflicts"]), Vec::<String>::new());
    assert_eq!(dry["restored"], rewound["restored"]);
    assert_eq!(dry["deleted"], rewound["deleted"]);
    assert_original(&env.workspace);
    let fork = rewound["sessionId"].as_str().unwrap().to_owned();
    assert_ne!(fork, session, "the conversation continues in a fork");

    // The rewound session keeps its steps; the state before the rewind is its last checkpoint.
    let original = env.events(&session);
    let (before_seq, before) = checkpoints(&original).pop().unwrap();
    assert_eq!(before.reason, CheckpointReason::Rewind);
    assert_eq!(before.root, taken[3].1.root, "the state before is the turn's end");
    let fork_events = env.events(&fork);
    let logged = rewinds(&fork_events);
    assert_eq!(logged.len(), 1);
    assert_eq!(logged[0].from_session, session);
    assert_eq!(logged[0].to_step, Some(1));
    assert_eq!(logged[0].checkpoint.as_deref(), Some(taken[0].1.root.as_str()));
    assert_eq!(logged[0].before.as_deref(), Some(before.root.as_str()));
    assert!(logged[0].conversation && logged[0].files && !logged[0].forced);

    // The next prompt in the fork: its request begins with exactly step 1's request (its
    // messages, up to their end), and the mock's prefix cache hits it.
    env.script(json!([{ "reasoning": "Again.", "content": "Continued." }])).await;
    let output = env.prompt_in(&fork, "Continue from there.").await;
    assert!(output.status.success(), "{}", describe(&output));
    let requests = env.requests();
    assert_eq!(requests.len(), 5);
    let (step_one, step_one_rest) = split_body(&requests[0].body);
    let (next, next_rest) = split_body(&requests[4].body);
    assert!(
        next.starts_with(step_one) && next.len() > step_one.len(),
        "the fork's request does not begin with step 1's messages:\n{}\n---\n{}",
        String::from_utf8_lossy(step_one),
        String::from_utf8_lossy(next)
    );
    assert_eq!(next_rest, step_one_rest, "same tools and call options");
    assert_eq!(env.saw_wire(&session, 1).await, requests[0].body, "step 1 is still viewable");
    let usage = env
        .events(&fork)
        .iter()
        .rev()
        .find_map(|event| match &event.data {
            EventData::StepEnd(end) => Some(end.usage),
            _ => None,
        })
        .unwrap();
    let step_one_usage = original
        .iter()
        .find_map(|event| match &event.data {
            EventData::StepEnd(end) if end.step == 1 => Some(end.usage),
            _ => None,
        })
        .unwrap();
    assert!(
        usage.cache_hit_tokens > 0 && usage.cache_hit_tokens + 64 >= step_one_usage.prompt_tokens,
        "the fork's first request hits the cache over step 1's prompt: {usage:?} vs {step_one_usage:?}"
    );
    env.assert_audit_ok(&session).await;
    env.assert_audit_ok(&fork).await;

    // Undo: the state before the rewind is a checkpoint of the rewound session.
    let before_seq_text = before_seq.to_string();
    let undone = env.dsh_json(&["rewind", &session, "--checkpoint", &before_seq_text]).await;
    assert_eq!(undone["sessionId"], session.as_str(), "files only: the session itself");
    assert_changed(&env.workspace);
    // The fork lists it too (the state before its own rewind).
    let fork_listed = env.dsh_json(&["checkpoints", &fork]).await;
    let entries = fork_listed["checkpoints"].as_array().unwrap();
    assert!(
        entries
            .iter()
            .any(|entry| entry["reason"] == "rewind" && entry["root"] == before.root.as_str()),
        "{fork_listed}"
    );
    env.assert_audit_ok(&session).await;
}

/// The user edits a file the turn changed: the rewind refuses and lists it (the API's error
/// carries the list), touching nothing and logging nothing; `--force` overwrites it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_the_user_changed_refuses_the_rewind_until_forced() {
    let env = Env::new().await;
    let session = setup(&env).await;
    write(&env.workspace, "a.txt", "the user's\n");
    let length = env.events(&session).len();

    let output = env.dsh(&["rewind", &session, "--step", "1"]).await;
    assert!(!output.status.success(), "{}", describe(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("a.txt") && stderr.contains("force"), "{stderr}");
    let conn = env.client().await;
    let answer = conn.request("session/rewind", json!({ "sessionId": session, "step": 1 })).await;
    assert_eq!(answer["error"]["code"], 1015, "{answer}");
    assert_eq!(answer["error"]["data"]["conflicts"], json!(["a.txt"]), "{answer}");
    // Nothing touched, nothing logged.
    assert_eq!(read(&env.workspace, "a.txt").as_deref(), Some("the user's\n"));
    assert_eq!(read(&env.workspace, "new.txt").as_deref(), Some("new\n"));
    assert_eq!(env.events(&session).len(), length);
    // A dry run lists it as a conflict.
    let dry = env.dsh_json(&["rewind", &session, "--step", "1", "--dry-run"]).await;
    assert_eq!(dry["conflicts"], json!(["a.txt"]));

    let forced = env.dsh_json(&["rewind", &session, "--step", "1", "--force"]).await;
    assert_eq!(forced["conflicts"], json!(["a.txt"]));
    assert_original(&env.workspace);
    let fork = forced["sessionId"].as_str().unwrap();
    assert!(rewinds(&env.events(fork))[0].forced);
    // The user's edit is in the state before the rewind: undoing brings it back.
    let (before_seq, _) = checkpoints(&env.events(&session)).pop().unwrap();
    env.dsh_ok(&["rewind", &session, "--checkpoint", &before_seq.to_string()]).await;
    assert_eq!(read(&env.workspace, "a.txt").as_deref(), Some("the user's\n"));
    env.assert_audit_ok(&session).await;
    env.assert_audit_ok(fork).await;
}

/// A user's edit stays a conflict for a session's rewind after another session of the workspace
/// took a checkpoint that recorded it (and what that session's agent wrote is one too): a
/// rewind measures conflicts from the state the rewound session's agent last left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_sessions_checkpoint_does_not_hide_a_users_edit_from_a_rewind() {
    let env = Env::new().await;
    let session = setup(&env).await;
    write(&env.workspace, "a.txt", "the user's\n");
    env.script(json!([
        tool_reply("Write.", "write_file", json!({ "path": "other.txt", "content": "other\n" })),
        { "content": "Written." },
    ]))
    .await;
    let (other, output) = env.prompt_new("Write another file.").await;
    assert!(output.status.success(), "{}", describe(&output));
    let recorded = checkpoints(&env.events(&other));
    assert!(
        recorded.iter().any(|(_, checkpoint)| checkpoint.reason == CheckpointReason::Step),
        "the other session took no checkpoint before its write: {recorded:?}"
    );

    let conn = env.client().await;
    let answer = conn.request("session/rewind", json!({ "sessionId": session, "step": 1 })).await;
    assert_eq!(answer["error"]["code"], 1015, "{answer}");
    assert_eq!(answer["error"]["data"]["conflicts"], json!(["a.txt", "other.txt"]), "{answer}");
    assert_eq!(read(&env.workspace, "a.txt").as_deref(), Some("the user's\n"));
    assert_eq!(read(&env.workspace, "other.txt").as_deref(), Some("other\n"));
}

/// `--files` restores the files and the session itself continues: its next request carries
/// the logged note of what changed under the agent. `--conversation` forks and touches no file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_only_continues_the_session_with_a_note_and_conversation_only_touches_no_file() {
    let env = Env::new().await;
    let session = setup(&env).await;

    let conversation = env.dsh_json(&["rewind", &session, "--step", "2", "--conversation"]).await;
    let fork = conversation["sessionId"].as_str().unwrap().to_owned();
    assert_ne!(fork, session);
    assert_eq!(conversation["restored"], json!([]));
    assert_changed(&env.workspace);
    let logged = rewinds(&env.events(&fork));
    assert!(logged[0].conversation && !logged[0].files && logged[0].before.is_none());
    // Mid-turn: the fork's next request begins with step 2's messages (step 1's call and result
    // included), byte for byte.
    env.script(json!([{ "reasoning": "Again.", "content": "From step 2." }])).await;
    let output = env.prompt_in(&fork, "Continue from step 2.").await;
    assert!(output.status.success(), "{}", describe(&output));
    let requests = env.requests();
    let (step_two, _) = split_body(&requests[1].body);
    let (next, _) = split_body(&requests[4].body);
    assert!(next.starts_with(step_two) && next.len() > step_two.len());
    assert_changed(&env.workspace);
    env.assert_audit_ok(&fork).await;

    let files = env.dsh_json(&["rewind", &session, "--step", "1", "--files"]).await;
    assert_eq!(files["sessionId"], session.as_str());
    assert_original(&env.workspace);
    let logged = rewinds(&env.events(&session));
    assert!(logged[0].files && !logged[0].conversation);

    env.script(json!([{ "reasoning": "Look.", "content": "Noted." }])).await;
    let output = env.prompt_in(&session, "What changed?").await;
    assert!(output.status.success(), "{}", describe(&output));
    let events = env.events(&session);
    let rewind_seq = events
        .iter()
        .find(|event| matches!(event.data, EventData::WorkspaceRewind(_)))
        .unwrap()
        .seq;
    let note = events
        .iter()
        .filter(|event| event.seq > rewind_seq)
        .find_map(|event| match &event.data {
            EventData::ContextMessage(note) if note.source.as_deref() == Some("workspace") => {
                Some(note.clone())
            }
            _ => None,
        })
        .expect("a workspace note after the files-only rewind");
    let noted: Vec<&str> = note.files.iter().flatten().map(|file| file.path.as_str()).collect();
    assert!(noted.contains(&"a.txt") && noted.contains(&"new.txt"), "{noted:?}");
    let request = env.requests().pop().unwrap();
    let body = String::from_utf8_lossy(&request.body).into_owned();
    assert!(body.contains("a.txt"), "the note is in the request");
    env.assert_audit_ok(&session).await;
    env.assert_audit_ok(&fork).await;
}

/// Refusals: a running turn (cancel first), a step the session does not have, and both
/// `--step` and `--checkpoint` at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_is_refused_while_a_turn_runs_and_for_an_unknown_step() {
    let env = Env::new().await;
    let session = setup(&env).await;

    let output = env.dsh(&["rewind", &session, "--step", "9"]).await;
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("no step 9"), "{}", describe(&output));
    let conn = env.client().await;
    conn.err("session/rewind", json!({ "sessionId": session, "step": 9 }), 1003).await;
    conn.err("session/rewind", json!({ "sessionId": session, "step": 1, "checkpoint": 3 }), -32602)
        .await;
    conn.err("session/rewind", json!({ "sessionId": session, "checkpoint": 1 }), 1003).await;

    env.script(json!([{ "reasoning": "Slow.", "content": "Late.", "delay_ms": 3000 }])).await;
    let child = env.command(&["prompt", "--yes", "--session", &session, "Wait."]).spawn().unwrap();
    env.wait_for_requests(5).await;
    let output = env.dsh(&["rewind", &session, "--step", "1"]).await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cancel it first"), "{stderr}");
    let output = crate::support::run_child(child).await;
    assert!(output.status.success(), "{}", describe(&output));

    // Another session's turn in the same workspace refuses a files rewind too.
    env.script(json!([{ "reasoning": "Slow.", "content": "Late.", "delay_ms": 3000 }])).await;
    let child = env.prompt_new_command("Another session.").spawn().unwrap();
    env.wait_for_requests(6).await;
    let output = env.dsh(&["rewind", &session, "--step", "1"]).await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("of the same workspace is running a turn"), "{stderr}");
    let output = crate::support::run_child(child).await;
    assert!(output.status.success(), "{}", describe(&output));
    assert_changed(&env.workspace);
    env.assert_audit_ok(&session).await;
}

/// Over the budget, collection drops the oldest checkpoints (said in `daemon/status`); a rewind
/// to one is refused naming the missing objects, and `dsh checkpoints` says it is collected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collected_checkpoint_is_refused_naming_its_objects() {
    let env = Env::new().await;
    std::fs::write(env.user_config(), "[checkpoints]\nbudget = 1\n").unwrap();
    let session = setup(&env).await;
    // A new daemon collects at start.
    env.dsh_ok(&["shutdown"]).await;
    let listed = env.dsh_json(&["checkpoints", &session]).await;
    let available: Vec<bool> = listed["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["available"].as_bool().unwrap())
        .collect();
    assert_eq!(available, [false, false, false, true], "only the newest fits: {listed}");
    let text = env.dsh_ok(&["checkpoints", &session]).await;
    assert!(String::from_utf8_lossy(&text.stdout).contains("collected"));
    let status = env.dsh_json(&["status"]).await;
    let stores = status["checkpoints"].as_array().unwrap();
    assert_eq!(stores.len(), 1, "{status}");
    assert_eq!(stores[0]["budget"], 1);
    assert_eq!(stores[0]["dropped"].as_array().unwrap().len(), 3, "{status}");
    let text = env.dsh_ok(&["status"]).await;
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(text.contains("3 checkpoint(s) dropped over the budget"), "{text}");
    let doctor = env.dsh(&["doctor"]).await;
    let doctor = String::from_utf8_lossy(&doctor.stdout).into_owned();
    assert!(
        doctor.contains("warn  checkpoints: ") && doctor.contains("3 checkpoint(s) dropped"),
        "{doctor}"
    );

    let conn = env.client().await;
    let answer = conn.request("session/rewind", json!({ "sessionId": session, "step": 1 })).await;
    assert_eq!(answer["error"]["code"], 1014, "{answer}");
    let missing = answer["error"]["data"]["missingObjects"].as_array().unwrap();
    assert!(!missing.is_empty());
    assert!(answer["error"]["message"].as_str().unwrap().contains(missing[0].as_str().unwrap()));
    assert_changed(&env.workspace);
}

/// A daemon killed mid-rewind leaves the rewind's journal (format: `server/checkpoint/src/
/// journal.rs`); the next daemon completes it before anything else touches the workspace, and
/// says so in its log, `daemon/status` and `dsh doctor`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_interrupted_by_a_killed_daemon_is_completed_at_the_next_start() {
    use sha2::{Digest as _, Sha256};
    let env = Env::new().await;
    let session = setup(&env).await;
    let target = checkpoints(&env.events(&session))[0].1.root.clone();
    env.dsh_ok(&["shutdown"]).await;

    // The journal of a rewind to step 1, as the restore writes it before touching a file.
    let hex = |text: &str| -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect()
    };
    let put = |out: &mut Vec<u8>, bytes: &[u8]| {
        out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(bytes);
    };
    let mut journal = b"dsh-rewind-journal 1\n".to_vec();
    journal.extend_from_slice(&hex(&target));
    let files =
        [("a.txt", "alpha\n"), ("b.txt", "bravo\n"), ("c.txt", "charlie\n"), ("d.txt", "delta\n")];
    journal.extend_from_slice(&((files.len() + 2) as u64).to_le_bytes());
    for removed in ["c2.txt", "new.txt"] {
        journal.push(1);
        put(&mut journal, removed.as_bytes());
    }
    for (path, text) in files {
        journal.push(3);
        put(&mut journal, path.as_bytes());
        journal.extend_from_slice(&0o644u32.to_le_bytes());
        journal.extend_from_slice(&Sha256::digest(text.as_bytes()));
    }
    let checksum = Sha256::digest(&journal);
    journal.extend_from_slice(&checksum);
    let workspace_dir = env.log_path(&session).parent().unwrap().parent().unwrap().to_path_buf();
    std::fs::write(workspace_dir.join("checkpoints").join("rewind-journal"), &journal).unwrap();
    assert_changed(&env.workspace);

    // The next daemon (started by this command) completes it first.
    env.dsh_json(&["checkpoints", &session]).await;
    assert_original(&env.workspace);
    assert!(!workspace_dir.join("checkpoints").join("rewind-journal").exists());
    let status = env.dsh_json(&["status"]).await;
    let recovered = status["checkpoints"][0]["recovered"].as_str().unwrap_or_default().to_owned();
    assert!(recovered.contains(&target) && recovered.contains("completed"), "{status}");
    assert!(env.daemon_log().contains("interrupted rewind"), "{}", env.daemon_log());
    let doctor = env.dsh(&["doctor"]).await;
    assert!(String::from_utf8_lossy(&doctor.stdout).contains(&recovered));
}
