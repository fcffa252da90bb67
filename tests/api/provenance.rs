//! `workspace/provenance`: after turns that write and edit a file, each line the agent wrote
//! is attributed to its session, turn and step; the editor's unsaved text is what is aligned;
//! across sessions the newest write wins; files outside the workspace or binary are skipped,
//! and an unreadable log is reported without hiding the others.

use serde_json::{Value, json};

use crate::support::Env;

fn tool(name: &str, args: Value) -> String {
    format!("[[fake:tool {name} {args}]]")
}

/// `(startLine, endLine, step)` of each range.
fn spans(result: &Value) -> Vec<(u64, u64, u64)> {
    result["ranges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["startLine"].as_u64().unwrap(),
                r["endLine"].as_u64().unwrap(),
                r["step"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn each_agent_line_is_attributed_to_the_step_that_wrote_it() {
    let env = Env::new().await;
    let served = env.serve(&[]).await;
    let content = "def f():\n    return 1\n\nprint(f())\n";
    let write = tool("write_file", json!({"path": "src/app.py", "content": content}));
    let (session, _) = env.prompt_new(&format!("write the app\nsecond line {write}")).await;
    let edit = tool(
        "edit_file",
        json!({"path": "src/app.py", "old_string": "    return 1\n", "new_string": "    x = 2\n    return x\n"}),
    );
    env.prompt_in(&session, &format!("edit it {edit}")).await;
    let conn = env.client().await;
    let workspace = env.workspace.to_str().unwrap();
    let file = env.workspace.join("src/app.py");
    let result = conn
        .ok("workspace/provenance", json!({"workspace": workspace, "path": file.to_str().unwrap()}))
        .await;
    assert_eq!(result["path"], "src/app.py");
    assert_eq!(result["lines"], 5);
    assert_eq!(result["errors"], json!([]));
    // Turn 1's step 1 wrote the file; turn 2's step 3 (step 2 was turn 1's echo) the edit.
    assert_eq!(spans(&result), [(0, 1, 1), (1, 3, 3), (3, 5, 1)]);
    let first = &result["ranges"][0];
    assert_eq!(first["sessionId"], session.as_str());
    assert_eq!(first["turn"], 1);
    assert_eq!(first["tool"], "write_file");
    assert_eq!(first["prompt"], "write the app");
    assert_eq!(first["model"], "deepseek-v4-flash");
    assert!(first["usage"]["promptTokens"].as_u64().unwrap() > 0, "{first}");
    assert!(first["cost"]["amount"].as_f64().is_some(), "{first}");
    assert_eq!(result["ranges"][1]["tool"], "edit_file");
    assert_eq!(result["ranges"][1]["turn"], 2);

    // The editor's unsaved text: a line inserted above shifts the rest, a line changed by hand
    // loses its attribution.
    let text = "# header\ndef f():\n    x = 3\n    return x\n\nprint(f())\n";
    let result = conn
        .ok(
            "workspace/provenance",
            json!({"workspace": workspace, "path": "src/app.py", "text": text}),
        )
        .await;
    assert_eq!(spans(&result), [(1, 2, 1), (3, 4, 3), (4, 6, 1)]);

    // A second session rewrites the file: its write is the newest.
    let write = tool("write_file", json!({"path": "src/app.py", "content": "fresh\n"}));
    let (other, _) = env.prompt_new(&format!("rewrite {write}")).await;
    let result = conn
        .ok(
            "workspace/provenance",
            json!({"workspace": workspace, "path": "src/app.py", "text": "fresh\n"}),
        )
        .await;
    assert_eq!(result["ranges"].as_array().unwrap().len(), 1);
    assert_eq!(result["ranges"][0]["sessionId"], other.as_str());

    // Outside the workspace, binary: skipped, with why.
    let outside = env.root.join("outside.txt");
    std::fs::write(&outside, "x\n").unwrap();
    let result = conn
        .ok(
            "workspace/provenance",
            json!({"workspace": workspace, "path": outside.to_str().unwrap()}),
        )
        .await;
    assert_eq!(result["skipped"], "outside the workspace");
    std::fs::write(env.workspace.join("blob.bin"), [0u8, 159, 146, 150]).unwrap();
    let result =
        conn.ok("workspace/provenance", json!({"workspace": workspace, "path": "blob.bin"})).await;
    assert_eq!(result["skipped"], "binary");
    // A relative workspace is refused.
    conn.err(
        "workspace/provenance",
        json!({"workspace": "relative", "path": "x"}),
        dsh_protocol::code::INVALID_WORKSPACE.into(),
    )
    .await;

    // A log that cannot be read is reported; the other sessions still count.
    let broken = env.log_path(&session).with_file_name("20260101-000000-broken.jsonl");
    std::fs::write(&broken, "not json\n").unwrap();
    let result = conn
        .ok(
            "workspace/provenance",
            json!({"workspace": workspace, "path": "src/app.py", "text": "fresh\n"}),
        )
        .await;
    let errors = result["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{result}");
    assert!(errors[0].as_str().unwrap().contains("20260101-000000-broken"), "{result}");
    assert_eq!(result["ranges"][0]["sessionId"], other.as_str());
    served.shutdown().await;
}
