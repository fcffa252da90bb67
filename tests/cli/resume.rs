//! Crash recovery (SIGKILL of the daemon mid-turn, then run again) and forks at a mid-turn seq.

use dsh_session::{EventData, SnapshotReason, StopReason};
use serde_json::json;

use crate::support::{
    Env, assert_append_extension, describe, of_kind, run_child, session_id_of, tool_reply, write,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_killed_mid_turn_recovers_and_resumes_on_the_cached_prefix() {
    let env = Env::new().await;
    write(&env.workspace, "notes.txt", "the build uses make\n");
    env.script(json!([
        tool_reply("Read the notes.", "read_file", json!({ "path": "notes.txt" })),
        // Step 2 never answers in time: the daemon running the turn is killed while it waits.
        { "reasoning": "Thinking hard.", "content": "never seen", "delay_ms": 600_000 },
    ]))
    .await;
    let workspace = env.workspace.to_str().unwrap().to_owned();
    let child = env
        .command(&["prompt", "--yes", "--workspace", &workspace, "How is it built?"])
        .spawn()
        .unwrap();
    let requests = env.wait_for_requests(2).await;
    assert_eq!(requests[0].outcome, "ok");
    // The second request is in flight (held by the mock): SIGKILL the daemon running the turn.
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &env.daemon_pid().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let client = run_child(child).await;
    assert!(!client.status.success(), "the client sees its daemon die: {}", describe(&client));
    let session = session_id_of(&client);
    let before = env.events(&session);
    let last = before.last().unwrap();
    assert!(
        matches!(last.data, EventData::RequestSent(_) | EventData::RequestHeader(_)),
        "the log ends inside step 2: {last:?}"
    );
    let killed_at = before.len() as u64;

    env.script(json!([{ "reasoning": "Answer from the notes.", "content": "With make." }])).await;
    let output = env.prompt_in(&session, "Go on.").await;
    assert!(output.status.success(), "{}", describe(&output));

    let events = env.events(&session);
    assert_eq!(&events[..before.len()], &before[..], "recovery only appends");
    // Closing events first: the interrupted step fails, the interrupted turn ends.
    match &events[killed_at as usize].data {
        EventData::StepError(error) => assert_eq!(error.step, 2),
        other => panic!("expected step/error after the crash, got {other:?}"),
    }
    match &events[killed_at as usize + 1].data {
        EventData::TurnEnd(end) => {
            assert_eq!(end.turn, 1);
            assert_eq!(end.reason, StopReason::Cancelled);
        }
        other => panic!("expected turn/end after the crash, got {other:?}"),
    }
    let resumed: Vec<_> = events
        .iter()
        .filter_map(|event| match &event.data {
            EventData::RequestHeader(snapshot) if event.seq >= killed_at => Some(snapshot),
            _ => None,
        })
        .collect();
    assert_eq!(resumed.len(), 1);
    assert_eq!(resumed[0].reason, SnapshotReason::Resume);

    let requests = env.requests();
    assert_eq!(requests.len(), 3, "step 1, the killed step 2, the resumed step 3");
    // The resumed request extends both earlier ones with the same header, byte for byte.
    assert_append_extension(&requests[0].body, &requests[2].body);
    assert_append_extension(&requests[1].body, &requests[2].body);
    assert!(requests[2].hit > 0, "the resumed request hits the cache");
    assert!(
        requests[2].hit >= requests[0].prompt_tokens / 64 * 64 - 64,
        "the hit covers at least step 1's prompt: {} vs {}",
        requests[2].hit,
        requests[0].prompt_tokens
    );
    assert_eq!(env.saw_wire(&session, 3).await, requests[2].body);
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_at_a_mid_turn_seq_is_auditable_and_hits_the_parents_cache() {
    let env = Env::new().await;
    write(&env.workspace, "a.txt", "alpha\n");
    write(&env.workspace, "b.txt", "beta\n");
    env.script(json!([
        tool_reply("Read a.", "read_file", json!({ "path": "a.txt" })),
        tool_reply("Read b.", "read_file", json!({ "path": "b.txt" })),
        { "reasoning": "Both read.", "content": "a says alpha, b says beta." },
    ]))
    .await;
    let (parent, output) = env.prompt_new("What do a.txt and b.txt say?").await;
    assert!(output.status.success(), "{}", describe(&output));
    let events = env.events(&parent);

    // Cut inside step 2, right after its assistant message: the tool call is unanswered, the
    // step and the turn are open.
    let step_two = of_kind(&events, "step/start")[1].seq;
    let message = events
        .iter()
        .find(|event| event.seq > step_two && event.data.kind() == "assistant/message")
        .unwrap();
    let at = (message.seq + 1).to_string();
    let fork = env.dsh_json(&["fork", &parent, "--at", &at]).await;
    let fork_id = fork["sessionId"].as_str().unwrap().to_owned();
    env.assert_audit_ok(&fork_id).await;
    let forked = env.events(&fork_id);
    match &forked[0].data {
        EventData::SessionMeta(meta) => {
            let origin = meta.forked_from.as_ref().unwrap();
            assert_eq!(origin.session_id, parent);
            assert_eq!(origin.seq, message.seq + 1);
        }
        other => panic!("a fork starts with session/meta, got {other:?}"),
    }
    assert_eq!(&forked[1..=message.seq as usize], &events[1..=message.seq as usize]);

    let before = env.requests().len();
    env.script(json!([{ "reasoning": "From the fork.", "content": "Forked answer." }])).await;
    let output = env.prompt_in(&fork_id, "Answer from what you have.").await;
    assert!(output.status.success(), "{}", describe(&output));
    let requests = env.requests();
    assert_eq!(requests.len(), before + 1);
    let first = requests.last().unwrap();
    assert!(first.hit > 0, "the fork's first request hits the parent's cached prefix");
    // It extends the parent's step-2 request (same header, same earlier messages).
    assert_append_extension(&requests[1].body, &first.body);
    let forked = env.events(&fork_id);
    let last_step = of_kind(&forked, "step/start").len() as u64;
    assert_eq!(env.saw_wire(&fork_id, last_step).await, first.body);
    env.assert_audit_ok(&fork_id).await;
    env.assert_audit_ok(&parent).await;
}
