//! `dsh compact`: a manual compaction through the daemon is a logged rewrite; every request
//! before and after it rebuilds byte for byte, and the usage view names it.

use dsh_session::{EventData, SurfaceNode};
use serde_json::json;

use crate::support::{Env, describe, of_kind, stdout};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dsh_compact_summarizes_the_older_turns_and_every_request_still_rebuilds() {
    let env = Env::new().await;
    let (session, output) = env.prompt_new("first question").await;
    assert!(output.status.success(), "{}", describe(&output));
    for text in ["second question", "third question"] {
        let output = env.prompt_in(&session, text).await;
        assert!(output.status.success(), "{}", describe(&output));
    }
    // The summarize call is the only request without tools.
    env.script(json!([{ "match": { "has_tools": false }, "content": "The user asked twice." }]))
        .await;
    let output = env.dsh_ok(&["compact", &session]).await;
    assert!(stdout(&output).contains("into a summary"), "{}", describe(&output));
    let output = env.prompt_in(&session, "fourth question").await;
    assert!(output.status.success(), "{}", describe(&output));

    let events = env.events(&session);
    let replaces = of_kind(&events, "surface/replace");
    assert_eq!(replaces.len(), 1);
    let EventData::SurfaceReplace(replace) = &replaces[0].data else { unreachable!() };
    assert!(
        matches!(&replace.node, SurfaceNode::Summary { text } if text == "The user asked twice.")
    );
    assert_eq!(of_kind(&events, "compact/start").len(), 1);
    assert_eq!(of_kind(&events, "compact/summary").len(), 1);
    env.assert_audit_ok(&session).await;

    // Steps before and after the compaction rebuild as the mock received them.
    let loop_bodies: Vec<Vec<u8>> = env
        .requests()
        .into_iter()
        .filter(|request| request.body.windows(9).any(|w| w == b"\"tools\":["))
        .map(|request| request.body)
        .collect();
    assert_eq!(loop_bodies.len(), 4);
    for (index, body) in loop_bodies.iter().enumerate() {
        let step = index as u64 + 1;
        assert!(env.saw_wire(&session, step).await == *body, "step {step} does not rebuild");
    }
    let last = String::from_utf8(loop_bodies[3].clone()).unwrap();
    assert!(last.contains("The user asked twice.") && !last.contains("first question"));

    let usage = stdout(&env.dsh_ok(&["usage", &session]).await);
    let expected = format!("compaction at seq {}", replaces[0].seq);
    assert!(usage.lines().any(|line| line.contains(&expected)), "{usage}");
}
