//! A model asking for paths outside the workspace gets error results, and nothing outside is
//! read or written.

use serde_json::json;

use crate::support::{Env, describe, tool_results, write};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths_outside_the_workspace_are_refused_and_nothing_outside_is_touched() {
    let env = Env::new().await;
    // Outside the workspace: a sentinel file and a directory a symlink inside points to.
    let outside = env.root.join("outside");
    let sentinel = outside.join("secret.txt");
    write(&env.root, "outside/secret.txt", "TOP SECRET sentinel\n");
    std::os::unix::fs::symlink(&outside, env.workspace.join("link")).unwrap();
    std::os::unix::fs::symlink(&sentinel, env.workspace.join("secret-link.txt")).unwrap();
    write(&env.workspace, "inside.txt", "inside\n");
    let sentinel_text = sentinel.to_str().unwrap().to_owned();
    let outside_new = outside.join("created.txt").to_str().unwrap().to_owned();

    let calls = [
        ("read_file", json!({ "path": "../../etc/passwd" })),
        ("read_file", json!({ "path": "/etc/passwd" })),
        ("read_file", json!({ "path": sentinel_text })),
        ("read_file", json!({ "path": "link/secret.txt" })),
        ("read_file", json!({ "path": "secret-link.txt" })),
        ("list_dir", json!({ "path": ".." })),
        ("grep", json!({ "pattern": "SECRET", "path": "link" })),
        ("glob", json!({ "pattern": "*", "path": "../outside" })),
        ("write_file", json!({ "path": "../outside/created.txt", "content": "x" })),
        ("write_file", json!({ "path": outside_new, "content": "x" })),
        ("write_file", json!({ "path": "link/created-through-link.txt", "content": "x" })),
        ("write_file", json!({ "path": "secret-link.txt", "content": "overwritten" })),
        ("edit_file", json!({ "path": sentinel_text, "old_string": "TOP", "new_string": "NO" })),
        (
            "edit_file",
            json!({ "path": "link/secret.txt", "old_string": "TOP", "new_string": "NO" }),
        ),
    ];
    let tool_calls: Vec<_> = calls
        .iter()
        .map(|(name, arguments)| json!({ "name": name, "arguments": arguments.to_string() }))
        .collect();
    env.script(json!([
        { "reasoning": "Let me look around.", "tool_calls": tool_calls },
        { "reasoning": "All refused.", "content": "I can only work inside the workspace." },
    ]))
    .await;
    let (session, output) = env.prompt_new("Show me /etc/passwd and the secret.").await;
    assert!(output.status.success(), "{}", describe(&output));

    let events = env.events(&session);
    let results = tool_results(&events);
    assert_eq!(results.len(), calls.len());
    for ((name, arguments), result) in calls.iter().zip(&results) {
        assert_eq!(&result.name, name);
        assert!(result.is_error, "{name} {arguments} was not refused: {}", result.content);
        assert!(
            result.content.contains("outside the workspace"),
            "{name} {arguments}: unclear refusal: {}",
            result.content
        );
        assert!(!result.content.contains("SECRET"), "{name} {arguments} leaked the sentinel");
        assert!(!result.content.contains("root:"), "{name} {arguments} leaked /etc/passwd");
    }
    assert_eq!(std::fs::read_to_string(&sentinel).unwrap(), "TOP SECRET sentinel\n");
    let outside_entries: Vec<_> =
        std::fs::read_dir(&outside).unwrap().map(|entry| entry.unwrap().file_name()).collect();
    assert_eq!(outside_entries, vec![std::ffi::OsString::from("secret.txt")]);
    assert!(std::fs::symlink_metadata(env.workspace.join("secret-link.txt")).unwrap().is_symlink());
    // The model saw the refusals: the next request carries them.
    let requests = env.requests();
    assert_eq!(requests.len(), 2);
    assert!(String::from_utf8_lossy(&requests[1].body).contains("outside the workspace"));
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_do_not_inherit_the_provider_key() {
    let env = Env::new().await;
    let command = json!({ "command": "printenv DEEPSEEK_API_KEY; echo checked" });
    env.script(json!([
        { "reasoning": "Look at the environment.",
          "tool_calls": [{ "name": "run_command", "arguments": command.to_string() }] },
        { "content": "done" },
    ]))
    .await;
    let (session, output) = env.prompt_new("What is in the environment?").await;
    assert!(output.status.success(), "{}", describe(&output));
    let events = env.events(&session);
    let results = tool_results(&events);
    assert_eq!(results.len(), 1);
    // The daemon runs with DEEPSEEK_API_KEY set (the mock's key); the command must not see it.
    assert!(results[0].content.starts_with("checked"), "{}", results[0].content);
    assert!(!results[0].content.contains("sk-"), "{}", results[0].content);
}
