//! The front listens to the daemon instead of asking it over and over: while nothing happens it
//! sends the daemon nothing at all (a front that polled `daemon/status` fails here), and the
//! turns other clients run in its workspace — in a session it knows, in a new one, or already
//! running when it starts — still reach the editor, progress and end, through the daemon's
//! notifications.

use std::time::Duration;

use serde_json::{Value, json};

use super::front::{Front, uri};
use crate::support::{Env, describe, session_id_of};

/// How long the front is watched doing nothing. A front that polled did so every 500 ms.
const IDLE: Duration = Duration::from_secs(3);

/// A `$/progress` notification of `kind` (`begin`, `report`, `end`).
fn progress(kind: &'static str) -> impl Fn(&Value) -> bool {
    move |m| m["method"] == "$/progress" && m["params"]["value"]["kind"] == kind
}

/// A `window/showMessage` saying `text`.
fn message(text: &str) -> impl Fn(&Value) -> bool + '_ {
    move |m| m["method"] == "window/showMessage" && m["params"]["message"] == text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_lsp_front_asks_the_daemon_nothing_and_still_hears_of_other_clients_turns() {
    let env = Env::new().await;
    let served = env.serve(&[]).await;
    let content = "def f():\n    return 1\n";
    let write =
        format!("[[fake:tool write_file {}]]", json!({"path": "app.py", "content": content}));
    let (session, output) = env.prompt_new(&format!("write the app {write}")).await;
    assert!(output.status.success(), "{}", describe(&output));

    let front = Front::start(&env).await;
    let app = uri(&env.workspace.join("app.py"));
    let document = json!({"uri": app, "languageId": "python", "version": 1, "text": content});
    front.notify("textDocument/didOpen", json!({"textDocument": document})).await;
    let position = json!({"textDocument": {"uri": app}, "position": {"line": 0, "character": 0}});
    let hover = front.request("textDocument/hover", position).await;
    let hover = hover["contents"]["value"].as_str().unwrap_or_default().to_owned();
    assert!(hover.contains("step 1 wrote this line"), "{hover}");
    let lenses =
        front.request("textDocument/codeLens", json!({"textDocument": {"uri": app}})).await;
    assert_eq!(lenses.as_array().map(Vec::len), Some(1), "{lenses}");

    // Idle: a document shown, its lenses drawn, no turn running. Nothing may go to the daemon;
    // only waiting shows that nothing does.
    let before = front.daemon.methods();
    tokio::time::sleep(IDLE).await;
    let idle = front.daemon.methods().split_off(before.len());
    let polls = idle.iter().filter(|method| *method == "daemon/status").count();
    assert_eq!(polls, 0, "daemon/status asked {polls} times in {IDLE:?} of idleness: {idle:?}");
    assert_eq!(idle, Vec::<String>::new(), "what an idle front asked the daemon");

    // Another client (the CLI) runs a turn in the session, then one in a new session of the
    // workspace: the front follows both.
    let output = env.prompt_in(&session, "hello again").await;
    assert!(output.status.success(), "{}", describe(&output));
    let end = format!("dsh: turn 2 of {session} ended (completed)");
    front.wait_for(&end, message(&end)).await;
    front.wait_for("the turn's progress", progress("begin")).await;
    front.wait_for("the turn's progress end", progress("end")).await;
    let (other, output) = env.prompt_new("a new session").await;
    assert!(output.status.success(), "{}", describe(&output));
    let other_end = format!("dsh: turn 1 of {other} ended (completed)");
    front.wait_for(&other_end, message(&other_end)).await;
    assert_eq!(front.messages(), [end, other_end]);
    let asked = front.daemon.methods().split_off(before.len());
    assert!(!asked.iter().any(|m| m == "daemon/status"), "{asked:?}");

    front.stop().await;
    served.shutdown().await;
}

/// A turn that runs already when the front starts is followed to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_lsp_front_follows_a_turn_that_runs_when_it_starts() {
    let env = Env::new().await;
    let served = env.serve(&[]).await;
    env.script(json!([{"content": "slow", "delay_ms": 1500}])).await;
    let cli = env.prompt_new_command("take your time").spawn().unwrap();
    env.wait_for_requests(1).await;
    let front = Front::start(&env).await;
    front.wait_for("the turn's progress", progress("begin")).await;
    let ended = |m: &Value| {
        m["method"] == "window/showMessage"
            && m["params"]["message"].as_str().is_some_and(|m| m.ends_with(" ended (completed)"))
    };
    front.wait_for("the turn's end", ended).await;
    front.wait_for("the turn's progress end", progress("end")).await;
    let output = cli.wait_with_output().await.unwrap();
    assert!(output.status.success(), "{}", describe(&output));
    let session = session_id_of(&output);
    assert_eq!(front.messages(), [format!("dsh: turn 1 of {session} ended (completed)")]);
    front.stop().await;
    served.shutdown().await;
}
