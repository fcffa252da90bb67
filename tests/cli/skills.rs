//! Skills: `SKILL.md` folders listed by name and description in the `skill` tool (the header),
//! their bodies loaded only when the model calls it (a logged tool result); bad files left out
//! and said by `dsh config`; a changed set of skills a header change `dsh usage` names.

use dsh_session::EventData;
use serde_json::{Value, json};

use crate::support::{Env, describe, of_kind, tool_reply, write};

fn skill_md(name: &str, description: &str, body: &str) -> String {
    format!("---\nname: {name}\ndescription: {description}\n---\n{body}")
}

fn body_of(request: &dsh_mock::RecordedRequest) -> Value {
    serde_json::from_slice(&request.body).unwrap()
}

/// The `skill` tool of a request's body, if offered.
fn skill_tool(body: &Value) -> Option<Value> {
    body["tools"].as_array()?.iter().find(|tool| tool["function"]["name"] == "skill").cloned()
}

fn tool_results(events: &[dsh_session::Event]) -> Vec<dsh_session::ToolResult> {
    events
        .iter()
        .filter_map(|event| match &event.data {
            EventData::ToolResult(result) => Some(result.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skill_is_listed_in_the_first_request_and_its_body_arrives_only_when_asked_for() {
    let env = Env::new().await;
    write(
        &env.workspace,
        ".dsh/skills/review/SKILL.md",
        &skill_md(
            "review",
            "Reviews a diff for style and tests.",
            "# Review\n\nBODY-MARKER: check the tests first.\n",
        ),
    );
    write(&env.workspace, ".dsh/skills/review/checklist.md", "- tests\n");
    env.script(json!([
        tool_reply("Load the skill.", "skill", json!({ "name": "review" })),
        { "content": "Reviewed." },
    ]))
    .await;
    let (session, output) = env.prompt_new("Review my change.").await;
    assert!(output.status.success(), "{}", describe(&output));

    let requests = env.requests();
    assert_eq!(requests.len(), 2);
    let first = body_of(&requests[0]);
    let tool = skill_tool(&first).expect("the skill tool is offered");
    let description = tool["function"]["description"].as_str().unwrap();
    assert!(description.contains("- review: Reviews a diff for style and tests."), "{description}");
    assert!(!first.to_string().contains("BODY-MARKER"), "the body is not in the first request");
    let second = body_of(&requests[1]).to_string();
    assert!(second.contains("BODY-MARKER: check the tests first."));

    let events = env.events(&session);
    let results = tool_results(&events);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].name, "skill");
    assert!(!results[0].is_error, "{}", results[0].content);
    assert!(results[0].content.starts_with("# Review\n\nBODY-MARKER"), "{}", results[0].content);
    assert!(results[0].content.contains("under .dsh/skills/review/"), "{}", results[0].content);
    assert!(results[0].content.contains("- checklist.md"), "{}", results[0].content);
    // The tool list is in the logged header snapshot.
    let header = of_kind(&events, "request/header");
    assert_eq!(header.len(), 1);
    env.assert_audit_ok(&session).await;
}

/// A user's skill lives outside the workspace: its files reach the model through `skill
/// {name, file}` only, confined to its folder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_skill_files_are_read_through_the_tool_and_nothing_outside_its_folder() {
    let env = Env::new().await;
    write(
        &env.root,
        "skills/deploy/SKILL.md",
        &skill_md("deploy", "Deploys the site.", "Run ref.md's steps.\n"),
    );
    write(&env.root, "skills/deploy/ref.md", "REF-MARKER step one\n");
    write(&env.root, "secret.txt", "SECRET\n");
    std::os::unix::fs::symlink(env.root.join("secret.txt"), env.root.join("skills/deploy/link.md"))
        .unwrap();
    env.script(json!([
        tool_reply("Read the reference.", "skill", json!({ "name": "deploy", "file": "ref.md" })),
        tool_reply("Look around.", "skill", json!({ "name": "deploy", "file": "../secret.txt" })),
        tool_reply("Follow the link.", "skill", json!({ "name": "deploy", "file": "link.md" })),
        tool_reply("Another.", "skill", json!({ "name": "nope" })),
        { "content": "Done." },
    ]))
    .await;
    let (session, output) = env.prompt_new("Deploy.").await;
    assert!(output.status.success(), "{}", describe(&output));
    let results = tool_results(&env.events(&session));
    assert_eq!(results.len(), 4);
    assert_eq!(results[0].content, "REF-MARKER step one\n");
    assert!(
        results[1].is_error && results[1].content.contains("not a path inside"),
        "{}",
        results[1].content
    );
    assert!(
        results[2].is_error && results[2].content.contains("leads out"),
        "{}",
        results[2].content
    );
    assert!(results[3].is_error && results[3].content.contains("no skill `nope` (skills: deploy)"));
    for request in env.requests() {
        assert!(!String::from_utf8_lossy(&request.body).contains("SECRET"));
    }
    env.assert_audit_ok(&session).await;
}

/// Bad files are left out and said by `dsh config`; the first of a name wins (the user's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_skill_files_are_left_out_and_dsh_config_says_why() {
    let env = Env::new().await;
    write(&env.root, "skills/review/SKILL.md", &skill_md("review", "The user's review.", "mine\n"));
    write(
        &env.workspace,
        ".dsh/skills/review/SKILL.md",
        &skill_md("review", "The repo's review.", "theirs\n"),
    );
    write(&env.workspace, ".claude/skills/plain/SKILL.md", "No front matter here.\n");
    write(&env.workspace, ".agents/skills/bad/SKILL.md", &skill_md("../etc", "Escapes.", "x\n"));
    write(
        &env.workspace,
        ".agents/skills/huge/SKILL.md",
        &skill_md("huge", "Too big.", &"x".repeat(70 * 1024)),
    );
    write(&env.workspace, ".agents/skills/good/SKILL.md", &skill_md("good", "A good one.", "ok\n"));

    let output = env.dsh_ok(&["config"]).await;
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("skills.review = \"The user's review.\""), "{text}");
    assert!(text.contains("skills.good = \"A good one.\""), "{text}");
    assert!(text.contains("left out: .dsh/skills/review/SKILL.md: `review` is taken by"), "{text}");
    assert!(
        text.contains("left out: .claude/skills/plain/SKILL.md: has no front matter"),
        "{text}"
    );
    assert!(
        text.contains(
            "left out: .agents/skills/bad/SKILL.md: its name `../etc` is not a simple name"
        ),
        "{text}"
    );
    assert!(
        text.contains("left out: .agents/skills/huge/SKILL.md: cannot be read: it is larger than"),
        "{text}"
    );

    env.script(json!([{ "content": "Hi." }])).await;
    let (session, output) = env.prompt_new("Hi").await;
    assert!(output.status.success(), "{}", describe(&output));
    let first = body_of(&env.requests()[0]);
    let tool = skill_tool(&first).unwrap();
    let description = tool["function"]["description"].as_str().unwrap();
    assert!(description.contains("- review: The user's review."), "{description}");
    assert!(description.contains("- good: A good one."), "{description}");
    assert!(!description.contains("repo's") && !description.contains("huge"), "{description}");
    env.assert_audit_ok(&session).await;
}

/// A skill added between turns changes the header once, a logged delta `dsh usage` names; a
/// turn with the same skills changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_set_of_skills_is_one_header_change_the_usage_view_names() {
    let env = Env::new().await;
    write(&env.workspace, ".dsh/skills/a/SKILL.md", &skill_md("a", "First.", "a\n"));
    env.script(json!([{ "content": "One." }, { "content": "Two." }, { "content": "Three." }]))
        .await;
    let (session, output) = env.prompt_new("One").await;
    assert!(output.status.success(), "{}", describe(&output));
    let output = env.prompt_in(&session, "Two").await;
    assert!(output.status.success(), "{}", describe(&output));
    assert!(of_kind(&env.events(&session), "request/header-delta").is_empty(), "same skills");
    write(&env.workspace, ".dsh/skills/b/SKILL.md", &skill_md("b", "Second.", "b\n"));
    let output = env.prompt_in(&session, "Three").await;
    assert!(output.status.success(), "{}", describe(&output));
    let events = env.events(&session);
    assert_eq!(of_kind(&events, "request/header-delta").len(), 1);
    let usage = env.dsh_json(&["usage", &session]).await;
    let row = usage["rows"].as_array().unwrap().iter().find(|row| row["step"] == 3).unwrap();
    let causes = row["causes"].as_array().unwrap();
    assert!(
        causes.iter().any(|cause| cause["kind"] == "toolsChanged" && cause["skills"] == true),
        "{row:#}"
    );
    let text = env.dsh_ok(&["usage", &session]).await;
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("(the skills changed)"), "{text}");
    env.assert_audit_ok(&session).await;
}
