//! Prompt commands: `/name args` expands a Markdown template once, and the logged user message
//! is the expansion with the command named; unknown names and empty expansions are refused
//! before anything is logged; `//` sends a literal slash; `session/commands` lists commands and
//! skills for clients.

use dsh_session::EventData;
use serde_json::{Value, json};

use crate::support::{Env, describe, stderr, write};

fn user_messages(events: &[dsh_session::Event]) -> Vec<dsh_session::UserMessage> {
    events
        .iter()
        .filter_map(|event| match &event.data {
            EventData::UserMessage(message) => Some(message.clone()),
            _ => None,
        })
        .collect()
}

fn last_user_content(request: &dsh_mock::RecordedRequest) -> String {
    let body: Value = serde_json::from_slice(&request.body).unwrap();
    let messages = body["messages"].as_array().unwrap();
    let last = messages.iter().rev().find(|message| message["role"] == "user").unwrap();
    last["content"].as_str().unwrap().to_owned()
}

const REVIEW: &str = "---\ndescription: Reviews a file\nargument-hint: FILE [FOCUS]\n---\n\
                      Review $ARGUMENTS with care; start with $1.\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_expands_and_is_logged_with_its_command_name() {
    let env = Env::new().await;
    write(&env.workspace, ".dsh/commands/review.md", REVIEW);
    env.script(json!([{ "content": "Reviewed." }])).await;
    let (session, output) = env.prompt_new("/review src/a.rs tests").await;
    assert!(output.status.success(), "{}", describe(&output));
    let expanded = "Review src/a.rs tests with care; start with src/a.rs.";
    assert_eq!(last_user_content(&env.requests()[0]), expanded);
    let messages = user_messages(&env.events(&session));
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].text, expanded);
    let command = messages[0].command.as_ref().expect("the command is named");
    assert_eq!(
        (command.name.as_str(), command.source.as_str()),
        ("review", ".dsh/commands/review.md")
    );
    let shown = String::from_utf8_lossy(&output.stdout);
    assert!(shown.contains("/review expanded from .dsh/commands/review.md"), "{shown}");
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_users_command_comes_first_and_a_command_naming_itself_is_expanded_once() {
    let env = Env::new().await;
    write(&env.root, "commands/review.md", "Mine: $ARGUMENTS\n");
    write(&env.workspace, ".claude/commands/review.md", REVIEW);
    write(&env.workspace, ".opencode/command/again.md", "/again $ARGUMENTS\n");
    env.script(json!([{ "content": "One." }, { "content": "Two." }])).await;
    let (session, output) = env.prompt_new("/review x").await;
    assert!(output.status.success(), "{}", describe(&output));
    let output = env.prompt_in(&session, "/again and again").await;
    assert!(output.status.success(), "{}", describe(&output));
    let messages = user_messages(&env.events(&session));
    assert_eq!(messages[0].text, "Mine: x");
    let source = env.root.join("commands/review.md").display().to_string();
    assert_eq!(messages[0].command.as_ref().unwrap().source, source);
    // The expansion is sent as it is, never read as a command again.
    assert_eq!(messages[1].text, "/again and again");
    assert_eq!(messages[1].command.as_ref().unwrap().name, "again");
    assert_eq!(env.requests().len(), 2);
    env.assert_audit_ok(&session).await;
    // `dsh config` lists them, and the workspace's /review left out for the user's.
    let config = env.dsh_ok(&["config"]).await;
    let config = String::from_utf8_lossy(&config.stdout);
    let review = config.lines().find(|line| line.starts_with("commands.review = \"\"")).unwrap();
    assert!(review.ends_with(&format!("# {source}")), "{review}");
    assert!(config.contains("commands.again = \"\""), "{config}");
    assert!(
        config.contains("left out: .claude/commands/review.md: `review` is taken by"),
        "{config}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_and_empty_commands_are_refused_and_a_double_slash_is_literal() {
    let env = Env::new().await;
    write(&env.workspace, ".dsh/commands/review.md", REVIEW);
    write(&env.workspace, ".dsh/commands/empty.md", "---\ndescription: nothing\n---\n  \n");
    env.script(json!([{ "content": "Hi." }, { "content": "Literal." }])).await;
    let (session, output) = env.prompt_new("hello").await;
    assert!(output.status.success(), "{}", describe(&output));

    let output = env.prompt_in(&session, "/nope x").await;
    assert!(!output.status.success());
    let error = stderr(&output);
    assert!(error.contains("unknown command `/nope` (commands: /empty, /review"), "{error}");
    let output = env.prompt_in(&session, "/empty").await;
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("command `/empty` (.dsh/commands/empty.md) expands to nothing")
    );
    assert_eq!(user_messages(&env.events(&session)).len(), 1, "nothing logged for a refusal");

    let output = env.prompt_in(&session, "//review is a path").await;
    assert!(output.status.success(), "{}", describe(&output));
    let messages = user_messages(&env.events(&session));
    assert_eq!(messages[1].text, "/review is a path");
    assert!(messages[1].command.is_none());
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_commands_lists_the_commands_and_skills() {
    let env = Env::new().await;
    write(&env.workspace, ".dsh/commands/review.md", REVIEW);
    write(
        &env.workspace,
        ".dsh/skills/deploy/SKILL.md",
        "---\nname: deploy\ndescription: Deploys.\n---\nSteps.\n",
    );
    env.script(json!([{ "content": "Hi." }])).await;
    let (session, output) = env.prompt_new("hello").await;
    assert!(output.status.success(), "{}", describe(&output));
    let conn = env.connect().await;
    conn.initialize().await;
    let listed = conn.ok("session/commands", json!({ "sessionId": session })).await;
    assert_eq!(
        listed,
        json!({
            "commands": [{
                "name": "review", "description": "Reviews a file",
                "argumentHint": "FILE [FOCUS]", "source": ".dsh/commands/review.md"
            }],
            "skills": [{ "name": "deploy", "description": "Deploys.", "source": ".dsh/skills/deploy" }],
        })
    );
}
