//! Images (`dsh prompt --image`): stored once in the workspace's object store, named by hash in
//! the log, written in each format's own way (Anthropic `image` blocks, OpenAI-compatible
//! `image_url` data URLs), rebuilt byte for byte by `dsh saw --wire` and the audit, carried by a
//! resumed session's next request without being stored again; refused, before anything is
//! logged, on a model that does not read images (DeepSeek's) and when a file is no image.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::Value;
use sha2::Digest as _;

use crate::support::{
    Env, describe, kill_daemon_of, lock_pid, run, session_id_of, stdout, wait_gone,
};

/// A profile `vision` of `kind` at the mock, whose model `mock-vision` reads images.
fn vision_profile(env: &Env, kind: &str) -> String {
    format!(
        r#"profile = "vision"

[providers.vision]
kind = "{kind}"
base_url = "{}"
api_key_env = "DEEPSEEK_API_KEY"
model = "mock-vision"

[providers.vision.models.mock-vision]
context_window = 131072
max_output = 4096
thinking = false
images = true
"#,
        env.mock.base_url()
    )
}

/// A PNG of `length` bytes (a real signature and header, then noise that does not compress) in
/// the test's directory, outside the workspace.
fn png_file(env: &Env, name: &str, length: usize, seed: u8) -> (PathBuf, Vec<u8>) {
    let mut bytes = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x10\0\0\0\x10\x08\x06\0\0\0".to_vec();
    let mut state = u32::from(seed).wrapping_mul(2_654_435_761).wrapping_add(1);
    while bytes.len() < length {
        state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        bytes.push((state >> 24) as u8);
    }
    let path = env.root.join(name);
    std::fs::write(&path, &bytes).unwrap();
    (path, bytes)
}

fn sha256_hex(bytes: &[u8]) -> String {
    sha2::Sha256::digest(bytes).iter().map(|byte| format!("{byte:02x}")).collect()
}

fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// `dsh ARGS…` on the configuration's profiles (no `--base-url`), which must succeed.
async fn dsh(env: &Env, args: &[&str]) -> std::process::Output {
    let output = run(env.command_plain(&env.key, args)).await;
    assert!(output.status.success(), "dsh {args:?}: {}", describe(&output));
    output
}

/// Kills the environment's daemon and waits until it is gone: the next command starts another,
/// which reads the session from its log (and its images from the store).
async fn stop_daemon(env: &Env) {
    let pid = lock_pid(&env.home).expect("a daemon runs");
    kill_daemon_of(&env.home);
    wait_gone(pid).await;
}

/// `dsh saw SESSION --step N --wire` on the configuration's profiles.
async fn saw_wire(env: &Env, session: &str, step: u64) -> Vec<u8> {
    dsh(env, &["saw", session, "--step", &step.to_string(), "--wire"]).await.stdout
}

/// The object store file of `sha256` under the home, if any.
fn object_file(home: &Path, sha256: &str) -> Option<PathBuf> {
    let workspaces = std::fs::read_dir(home.join("workspaces")).ok()?;
    workspaces.flatten().find_map(|dir| {
        let path = dir.path().join("checkpoints/objects").join(&sha256[..2]).join(sha256);
        path.exists().then_some(path)
    })
}

/// The images a log's `user/message`s name, in order.
fn logged_images(env: &Env, session: &str) -> Vec<Value> {
    env.log_values(session)
        .into_iter()
        .filter(|line| line["type"] == "user/message")
        .flat_map(|line| line["data"]["images"].as_array().cloned().unwrap_or_default())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_on_anthropic_messages_is_stored_once_logged_by_hash_and_rebuilt_byte_for_byte() {
    let env = Env::new().await;
    std::fs::write(env.user_config(), vision_profile(&env, "anthropic")).unwrap();
    let (path, bytes) = png_file(&env, "screenshot.png", 40_000, 1);
    let (image, sha256) = (path.to_str().unwrap().to_owned(), sha256_hex(&bytes));
    let workspace = env.workspace.to_str().unwrap().to_owned();
    let first = dsh(
        &env,
        &["prompt", "--yes", "--workspace", &workspace, "--image", &image, "What is this?"],
    )
    .await;
    let session = session_id_of(&first);

    // The wire body carries the image as an Anthropic base64 image block, after the text.
    let requests = env.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/v1/messages");
    let body: Value = serde_json::from_slice(&requests[0].body).unwrap();
    let content = body["messages"].as_array().unwrap().last().unwrap()["content"].clone();
    let block = content.as_array().unwrap().iter().find(|b| b["type"] == "image").unwrap().clone();
    assert_eq!(block["source"]["type"], "base64");
    assert_eq!(block["source"]["media_type"], "image/png");
    assert_eq!(block["source"]["data"], base64(&bytes));

    // The log holds the reference, never the bytes; the store holds them once, privately.
    let named = logged_images(&env, &session);
    assert_eq!(named.len(), 1);
    assert_eq!(named[0]["sha256"], sha256.as_str());
    assert_eq!(named[0]["size"], bytes.len());
    assert_eq!(named[0]["mediaType"], "image/png");
    assert_eq!(named[0]["name"], "screenshot.png");
    let log = std::fs::read_to_string(env.log_path(&session)).unwrap();
    assert!(!log.contains(&base64(&bytes)[..64]), "the image's bytes are not in the log");
    let object = object_file(&env.home, &sha256).expect("the image is in the object store");
    let metadata = std::fs::metadata(&object).unwrap();
    assert_eq!(metadata.permissions().mode() & 0o777, 0o600);
    assert_eq!(
        std::fs::metadata(object.parent().unwrap()).unwrap().permissions().mode() & 0o777,
        0o700
    );
    let inode = metadata.ino();

    // `dsh saw --wire` equals the body the mock received, byte for byte.
    assert_eq!(saw_wire(&env, &session, 1).await, requests[0].body);

    // The same image again: the log grows by its reference (measured against the same turn
    // without it), the store writes nothing.
    let before = std::fs::metadata(env.log_path(&session)).unwrap().len();
    dsh(&env, &["prompt", "--yes", "--session", &session, "--image", &image, "Again, closer."])
        .await;
    let with_image = std::fs::metadata(env.log_path(&session)).unwrap().len() - before;
    let before = std::fs::metadata(env.log_path(&session)).unwrap().len();
    dsh(&env, &["prompt", "--yes", "--session", &session, "Again, closer."]).await;
    let without = std::fs::metadata(env.log_path(&session)).unwrap().len() - before;
    let growth = with_image.abs_diff(without);
    // Measured: 150 bytes for a 40,000-byte image.
    assert!(
        growth < 1024,
        "an image reference cost {growth} bytes of log (image {} bytes)",
        bytes.len()
    );
    assert_eq!(std::fs::metadata(&object).unwrap().ino(), inode, "stored once");

    // A resumed session (a new daemon reads the log and the store): its next request still
    // carries the image, read back from the store, not stored again.
    stop_daemon(&env).await;
    dsh(&env, &["prompt", "--yes", "--session", &session, "And now?"]).await;
    let requests = env.requests();
    assert_eq!(requests.len(), 4);
    let last = String::from_utf8_lossy(&requests[3].body).into_owned();
    assert_eq!(last.matches(&base64(&bytes)).count(), 2, "both earlier images are sent again");
    assert_eq!(std::fs::metadata(&object).unwrap().ino(), inode, "not stored again");
    for (index, request) in requests.iter().enumerate() {
        assert_eq!(saw_wire(&env, &session, index as u64 + 1).await, request.body);
    }
    env.assert_audit_ok(&session).await;

    // A missing object is an error naming the session, the step and the hash — never an image
    // silently left out: in the audit, "what the model saw", and the next request.
    std::fs::remove_file(&object).unwrap();
    let audit = run(env.command_plain(&env.key, &["audit", &session])).await;
    assert!(!audit.status.success(), "{}", describe(&audit));
    assert!(describe(&audit).contains(&sha256), "{}", describe(&audit));
    let saw = run(env.command_plain(&env.key, &["saw", &session, "--step", "1", "--wire"])).await;
    assert!(!saw.status.success(), "{}", describe(&saw));
    let said = describe(&saw);
    assert!(said.contains(&sha256) && said.contains(&session) && said.contains("step 1"), "{said}");
    // A new loop (the one that ran the earlier turns still holds the bytes it read) fails the
    // step instead of sending the request without the image.
    stop_daemon(&env).await;
    let next =
        run(env
            .command_plain(&env.key, &["prompt", "--yes", "--session", &session, "Still there?"]))
        .await;
    let said = describe(&next);
    assert!(said.contains(&sha256) && said.contains("cannot be read"), "{said}");
    assert_eq!(env.requests().len(), 4, "nothing was sent without the image");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_on_an_openai_compatible_profile_is_an_image_url_data_url() {
    let env = Env::new().await;
    std::fs::write(env.user_config(), vision_profile(&env, "openai-compatible")).unwrap();
    let (first_path, first) = png_file(&env, "a.png", 3_000, 2);
    let mut gif = b"GIF89a".to_vec();
    gif.extend_from_slice(&[1; 200]);
    let gif_path = env.root.join("b.gif");
    std::fs::write(&gif_path, &gif).unwrap();
    let workspace = env.workspace.to_str().unwrap().to_owned();
    let output = dsh(
        &env,
        &[
            "prompt",
            "--yes",
            "--workspace",
            &workspace,
            "--image",
            first_path.to_str().unwrap(),
            "--image",
            gif_path.to_str().unwrap(),
            "Compare them.",
        ],
    )
    .await;
    let session = session_id_of(&output);
    let requests = env.requests();
    assert_eq!(requests[0].path, "/chat/completions");
    let body: Value = serde_json::from_slice(&requests[0].body).unwrap();
    let user = body["messages"].as_array().unwrap().last().unwrap().clone();
    let parts = user["content"].as_array().unwrap();
    assert_eq!(parts[0], serde_json::json!({"type": "text", "text": "Compare them."}));
    assert_eq!(parts[1]["image_url"]["url"], format!("data:image/png;base64,{}", base64(&first)));
    assert_eq!(parts[2]["image_url"]["url"], format!("data:image/gif;base64,{}", base64(&gif)));
    let named = logged_images(&env, &session);
    assert_eq!(named[1]["mediaType"], "image/gif");
    assert_eq!(saw_wire(&env, &session, 1).await, requests[0].body);
    // The printer shows the images of the prompt.
    let saw = stdout(&dsh(&env, &["saw", &session, "--step", "1"]).await);
    assert!(saw.contains("[image: a.png, 3000 bytes"), "{saw}");
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deepseek_profile_refuses_an_image_before_anything_is_logged() {
    let env = Env::new().await;
    let (path, _) = png_file(&env, "shot.png", 500, 3);
    let workspace = env.workspace.to_str().unwrap().to_owned();
    let output = env
        .dsh(&[
            "prompt",
            "--yes",
            "--workspace",
            &workspace,
            "--image",
            path.to_str().unwrap(),
            "Look.",
        ])
        .await;
    assert!(!output.status.success(), "{}", describe(&output));
    let said = describe(&output);
    assert!(said.contains("deepseek-v4-flash") && said.contains("does not read images"), "{said}");
    assert!(env.requests().is_empty());
    for (file, bytes) in env.log_files() {
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains("user/message") && !text.contains("turn/start"),
            "{}: {text}",
            file.display()
        );
    }
    assert!(object_file(&env.home, &sha256_hex(&std::fs::read(&path).unwrap())).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_is_no_image_is_refused_by_its_bytes_not_its_name() {
    let env = Env::new().await;
    std::fs::write(env.user_config(), vision_profile(&env, "anthropic")).unwrap();
    let fake = env.root.join("photo.png");
    std::fs::write(&fake, "<svg xmlns=\"http://www.w3.org/2000/svg\"/>").unwrap();
    let workspace = env.workspace.to_str().unwrap().to_owned();
    let output = run(env.command_plain(
        &env.key,
        &["prompt", "--workspace", &workspace, "--image", fake.to_str().unwrap(), "Look."],
    ))
    .await;
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    assert!(describe(&output).contains("is not an image"), "{}", describe(&output));
    assert!(env.log_files().is_empty(), "nothing was created");
    // Through the API the same (and a text that is not base64): invalid params.
    let served = env.serve(&[]).await;
    let client = env.client().await;
    let session =
        client.ok("session/create", serde_json::json!({"workspace": workspace})).await["sessionId"]
            .as_str()
            .unwrap()
            .to_owned();
    for (data, said) in [
        (base64(b"<svg/>"), "is not an image"),
        ("%%%".to_owned(), "not base64"),
        (
            base64(&[b"\x89PNG\r\n\x1a\n".as_slice(), &[0; 3_000_000]].concat()),
            "over the limit of 3000000 bytes",
        ),
    ] {
        let message = client
            .err(
                "session/prompt",
                serde_json::json!({"sessionId": session, "text": "x", "attachments": [{"data": data}]}),
                -32602,
            )
            .await;
        assert!(message.contains(said), "{message}");
    }
    assert!(!std::fs::read_to_string(env.log_path(&session)).unwrap().contains("user/message"));
    served.shutdown().await;
}

/// The store is shared with the checkpoints: their collection (here over a budget of 1 byte, at
/// a new daemon's start) sweeps what nothing references and keeps every image a log names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_referenced_image_survives_the_checkpoints_collection() {
    let env = Env::new().await;
    let config = format!("{}\n[checkpoints]\nbudget = 1\n", vision_profile(&env, "anthropic"));
    std::fs::write(env.user_config(), config).unwrap();
    std::fs::write(env.workspace.join("notes.txt"), "a file, so the turn's end checkpoints\n")
        .unwrap();
    let (path, bytes) = png_file(&env, "diagram.png", 20_000, 4);
    let sha256 = sha256_hex(&bytes);
    let workspace = env.workspace.to_str().unwrap().to_owned();
    let first = dsh(
        &env,
        &[
            "prompt",
            "--yes",
            "--workspace",
            &workspace,
            "--image",
            path.to_str().unwrap(),
            "Explain.",
        ],
    )
    .await;
    let session = session_id_of(&first);
    let object = object_file(&env.home, &sha256).unwrap();
    // An object nothing references, in the store's own format (a raw-format byte, then the
    // bytes), named by its hash: collection must remove it.
    let stray_bytes = b"nobody references this".to_vec();
    let stray_sha = sha256_hex(&stray_bytes);
    let stray_dir = object.parent().unwrap().parent().unwrap().join(&stray_sha[..2]);
    std::fs::create_dir_all(&stray_dir).unwrap();
    let stray = stray_dir.join(&stray_sha);
    std::fs::write(&stray, [&[0u8][..], &stray_bytes].concat()).unwrap();

    stop_daemon(&env).await;
    dsh(&env, &["prompt", "--yes", "--session", &session, "Once more."]).await;
    assert!(!stray.exists(), "the collection ran and swept an unreferenced object");
    assert!(object.exists(), "the image a log names is kept");
    let requests = env.requests();
    let last = String::from_utf8_lossy(&requests.last().unwrap().body).into_owned();
    assert!(last.contains(&base64(&bytes)), "the next request still carries it");
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_object_serves_only_the_images_the_sessions_log_names() {
    let env = Env::new().await;
    std::fs::write(env.user_config(), vision_profile(&env, "anthropic")).unwrap();
    let workspace = env.workspace.to_str().unwrap().to_owned();
    let mut sessions = Vec::new();
    let mut images = Vec::new();
    for (name, seed) in [("first.png", 3), ("second.png", 4)] {
        let (path, bytes) = png_file(&env, name, 5_000, seed);
        let args = ["prompt", "--yes", "--workspace", &workspace, "--image"];
        let output = dsh(&env, &[&args[..], &[path.to_str().unwrap(), "Look."]].concat()).await;
        sessions.push(session_id_of(&output));
        images.push(bytes);
    }
    let client = env.client().await;
    let object =
        |session: &str, sha256: &str| serde_json::json!({"sessionId": session, "sha256": sha256});

    // The session's own image, whole.
    let got = client.call("session/object", object(&sessions[0], &sha256_hex(&images[0]))).await;
    let got = got.expect("the session's image is served");
    assert_eq!(got["mediaType"], "image/png");
    assert_eq!(got["size"], images[0].len());
    assert_eq!(got["data"], base64(&images[0]));

    // Another session's image is in the same store, but this session does not name it; nor an
    // arbitrary hash, nor a malformed one.
    let other = sha256_hex(&images[1]);
    assert!(object_file(&env.home, &other).is_some());
    for sha256 in [other.as_str(), &sha256_hex(b"nothing"), "../../etc/passwd"] {
        let error = client.call("session/object", object(&sessions[0], sha256)).await.unwrap_err();
        assert_eq!(error.code, 1017, "{sha256}: {}", error.message);
    }
    let served = client.call("session/object", object(&sessions[1], &other)).await.unwrap();
    assert_eq!(served["data"], base64(&images[1]));

    // A named object gone from the store is the same typed error, naming the hash.
    std::fs::remove_file(object_file(&env.home, &other).unwrap()).unwrap();
    let error = client.call("session/object", object(&sessions[1], &other)).await.unwrap_err();
    assert_eq!(error.code, 1017);
    assert!(error.message.contains(&other), "{}", error.message);
}

/// A PNG of `length` bytes in the workspace (as [`png_file`], a 16x16 header).
fn workspace_png(env: &Env, name: &str, length: usize, seed: u8) -> Vec<u8> {
    let (path, bytes) = png_file(env, name, length, seed);
    std::fs::rename(&path, env.workspace.join(name)).unwrap();
    bytes
}

/// Every file of the object store under the home, with its inode.
fn store_listing(home: &Path) -> Vec<(PathBuf, u64)> {
    let mut files = Vec::new();
    for workspace in std::fs::read_dir(home.join("workspaces")).unwrap().flatten() {
        let objects = workspace.path().join("checkpoints/objects");
        for fan_out in std::fs::read_dir(objects).into_iter().flatten().flatten() {
            for object in std::fs::read_dir(fan_out.path()).unwrap().flatten() {
                files.push((object.path(), object.metadata().unwrap().ino()));
            }
        }
    }
    files.sort();
    files
}

/// The `tool/result`s of a log.
fn tool_results(env: &Env, session: &str) -> Vec<Value> {
    env.log_values(session)
        .into_iter()
        .filter(|line| line["type"] == "tool/result")
        .map(|line| line["data"].clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_file_of_an_image_gives_the_image_to_a_model_that_reads_them_on_anthropic() {
    let env = Env::new().await;
    std::fs::write(env.user_config(), vision_profile(&env, "anthropic")).unwrap();
    let bytes = workspace_png(&env, "shot.dat", 30_000, 5);
    let sha256 = sha256_hex(&bytes);
    // Over the limit by one byte: an error naming the limit.
    workspace_png(&env, "huge.png", 3_000_001, 6);
    env.script(serde_json::json!([
        crate::support::tool_reply("Look.", "read_file", serde_json::json!({"path": "shot.dat"})),
        crate::support::tool_reply("And this.", "read_file", serde_json::json!({"path": "huge.png"})),
        {"content": "A noisy square."},
        crate::support::tool_reply("Again.", "read_file", serde_json::json!({"path": "shot.dat"})),
        {"content": "Still noisy."},
    ]))
    .await;
    let workspace = env.workspace.to_str().unwrap().to_owned();
    let first = dsh(&env, &["prompt", "--yes", "--workspace", &workspace, "What is it?"]).await;
    let session = session_id_of(&first);

    // The tool/result names the image by reference, after a line naming it (by its bytes, not
    // its name: `.dat`); the over-limit file is an error naming the limit.
    let results = tool_results(&env, &session);
    assert_eq!(results.len(), 2);
    assert_eq!(
        results[0]["content"],
        "shot.dat: image/png, 30000 bytes, 16x16 pixels; the image follows"
    );
    assert_eq!(results[0]["images"][0]["sha256"], sha256.as_str());
    assert_eq!(results[0]["images"][0]["mediaType"], "image/png");
    assert_eq!(results[0]["images"][0]["size"], 30_000);
    assert_eq!(results[1]["isError"], true);
    let said = results[1]["content"].as_str().unwrap();
    assert!(
        said.contains("huge.png") && said.contains("over the limit of 3000000 bytes"),
        "{said}"
    );
    assert!(results[1].get("images").is_none());

    // The wire body carries it as an image block inside the tool_result's content.
    let requests = env.requests();
    assert_eq!(requests.len(), 3);
    let body: Value = serde_json::from_slice(&requests[1].body).unwrap();
    let turn = body["messages"].as_array().unwrap().last().unwrap().clone();
    let result = turn["content"].as_array().unwrap().iter().find(|b| b["type"] == "tool_result");
    let content = result.unwrap()["content"].as_array().unwrap().clone();
    assert_eq!(content[0]["type"], "text");
    assert_eq!(content[1]["type"], "image");
    assert_eq!(content[1]["source"]["media_type"], "image/png");
    assert_eq!(content[1]["source"]["data"], base64(&bytes));
    let log = std::fs::read_to_string(env.log_path(&session)).unwrap();
    assert!(!log.contains(&base64(&bytes)[..64]), "the image's bytes are not in the log");
    for (index, request) in requests.iter().enumerate() {
        assert_eq!(saw_wire(&env, &session, index as u64 + 1).await, request.body);
    }
    env.assert_audit_ok(&session).await;

    // A second read of the same file, in a new daemon: the store does not grow, the object is
    // not written again.
    let listing = store_listing(&env.home);
    assert!(listing.iter().any(|(path, _)| path.ends_with(&sha256)), "{listing:?}");
    stop_daemon(&env).await;
    dsh(&env, &["prompt", "--yes", "--session", &session, "Look again."]).await;
    assert_eq!(store_listing(&env.home), listing, "the store did not grow");
    let requests = env.requests();
    assert_eq!(requests.len(), 5);
    let last = String::from_utf8_lossy(&requests[4].body).into_owned();
    assert_eq!(last.matches(&base64(&bytes)).count(), 2, "both reads are in the request");
    for (index, request) in requests.iter().enumerate() {
        assert_eq!(saw_wire(&env, &session, index as u64 + 1).await, request.body);
    }
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_file_of_an_image_on_chat_completions_follows_the_results_as_a_user_message() {
    let env = Env::new().await;
    std::fs::write(env.user_config(), vision_profile(&env, "openai-compatible")).unwrap();
    let bytes = workspace_png(&env, "chart.png", 2_000, 7);
    std::fs::write(env.workspace.join("notes.txt"), "the chart is red\n").unwrap();
    env.script(serde_json::json!([
        {"reasoning": "Read both.", "tool_calls": [
            {"name": "read_file", "arguments": "{\"path\":\"chart.png\"}"},
            {"name": "read_file", "arguments": "{\"path\":\"notes.txt\"}"},
        ]},
        {"content": "Red bars."},
    ]))
    .await;
    let workspace = env.workspace.to_str().unwrap().to_owned();
    let output = dsh(&env, &["prompt", "--yes", "--workspace", &workspace, "Describe."]).await;
    let session = session_id_of(&output);
    let requests = env.requests();
    assert_eq!(
        requests.len(),
        2,
        "the mock took the request (a tool message with an image is its 400)"
    );
    let body: Value = serde_json::from_slice(&requests[1].body).unwrap();
    let messages = body["messages"].as_array().unwrap();
    let tools: Vec<&Value> = messages.iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(tools.len(), 2);
    assert!(tools.iter().all(|m| m["content"].is_string()), "{tools:?}");
    // After both results (never between them): one user message with the image.
    let last = messages.last().unwrap();
    assert_eq!(messages[messages.len() - 2]["role"], "tool");
    assert_eq!(last["role"], "user");
    let call_id = tools[0]["tool_call_id"].as_str().unwrap();
    assert_eq!(last["content"][0]["text"], format!("Images of tool result {call_id}:"));
    assert_eq!(
        last["content"][1]["image_url"]["url"],
        format!("data:image/png;base64,{}", base64(&bytes))
    );
    for (index, request) in requests.iter().enumerate() {
        assert_eq!(saw_wire(&env, &session, index as u64 + 1).await, request.body);
    }
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_file_of_an_image_on_a_model_without_images_is_a_one_line_description() {
    let env = Env::new().await;
    let bytes = workspace_png(&env, "shot.png", 5_000, 8);
    env.script(serde_json::json!([
        crate::support::tool_reply("Look.", "read_file", serde_json::json!({"path": "shot.png"})),
        {"content": "It is a PNG."},
    ]))
    .await;
    let workspace = env.workspace.to_str().unwrap().to_owned();
    let output = env.dsh(&["prompt", "--yes", "--workspace", &workspace, "What is it?"]).await;
    assert!(output.status.success(), "{}", describe(&output));
    let session = session_id_of(&output);
    let results = tool_results(&env, &session);
    assert_eq!(
        results[0]["content"],
        "shot.png: image/png, 5000 bytes, 16x16 pixels; not shown: model deepseek-v4-flash does \
         not read images"
    );
    assert_ne!(results[0]["isError"], true, "a description is no error");
    assert!(results[0].get("images").is_none());
    let requests = env.requests();
    let last = String::from_utf8_lossy(&requests[1].body).into_owned();
    assert!(!last.contains(&base64(&bytes)[..64]));
    // (The store may hold the file anyway: the turn's checkpoint records the workspace.)
    env.assert_audit_ok(&session).await;
}

/// The vision profile beside a profile `plain` on the same mock whose model reads no images.
fn vision_and_plain(env: &Env, kind: &str) -> String {
    format!(
        r#"{}
[providers.plain]
kind = "{kind}"
base_url = "{}"
api_key_env = "DEEPSEEK_API_KEY"
model = "deepseek-v4-flash"

[providers.plain.models.deepseek-v4-flash]
context_window = 131072
max_output = 4096
thinking = false
"#,
        vision_profile(env, kind),
        env.mock.base_url()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_with_images_is_never_sent_to_a_model_that_reads_none() {
    let env = Env::new().await;
    std::fs::write(env.user_config(), vision_and_plain(&env, "anthropic")).unwrap();
    let (path, _) = png_file(&env, "shot.png", 4_000, 9);
    let workspace = env.workspace.to_str().unwrap().to_owned();
    let first = dsh(
        &env,
        &["prompt", "--yes", "--workspace", &workspace, "--image", path.to_str().unwrap(), "Look."],
    )
    .await;
    let session = session_id_of(&first);
    assert_eq!(env.requests().len(), 1);

    // Moving it to the plain model (a fork with another profile) is refused, typed, naming the
    // model and the count, saying how to go on; nothing is created. Before the image it works.
    let logs = env.log_files().len();
    let client = env.client().await;
    let fork = |config: Value| serde_json::json!({"sessionId": session, "config": config});
    let said =
        client.err("session/fork", fork(serde_json::json!({"profile": "plain"})), 1021).await;
    for part in ["deepseek-v4-flash", "1 image", "compact", "before its first image"] {
        assert!(said.contains(part), "{part}: {said}");
    }
    assert_eq!(env.log_files().len(), logs, "no fork was created");
    let before_image = serde_json::json!({"sessionId": session, "atStep": 1,
        "config": {"profile": "plain"}});
    let events = env.log_values(&session);
    let prompt_seq = events.iter().find(|e| e["type"] == "user/message").unwrap()["seq"].clone();
    let early = serde_json::json!({"sessionId": session, "atSeq": prompt_seq,
        "config": {"profile": "plain"}});
    client.ok("session/fork", early).await;
    // A fork at step 1 keeps the prompt and its image: refused too.
    client.err("session/fork", before_image, 1021).await;

    // A configuration edit that says the model reads no images: the next step fails cleanly,
    // naming the model and the count; nothing is sent.
    let edited = vision_profile(&env, "anthropic").replace("images = true", "images = false");
    std::fs::write(env.user_config(), edited).unwrap();
    let next =
        run(env.command_plain(&env.key, &["prompt", "--yes", "--session", &session, "More?"]))
            .await;
    let said = describe(&next);
    assert!(said.contains("mock-vision") && said.contains("1 image"), "{said}");
    assert_eq!(env.requests().len(), 1, "nothing was sent");
    let error = env
        .log_values(&session)
        .into_iter()
        .rfind(|line| line["type"] == "step/error")
        .expect("a step/error");
    assert!(error["data"]["error"].as_str().unwrap().contains("mock-vision"), "{error}");
    env.assert_audit_ok(&session).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_prompt_on_a_new_session_of_a_model_without_images_leaves_no_log() {
    let env = Env::new().await;
    let (path, _) = png_file(&env, "shot.png", 500, 10);
    let workspace = env.workspace.to_str().unwrap().to_owned();
    let output = env
        .dsh(&["prompt", "--workspace", &workspace, "--image", path.to_str().unwrap(), "Look."])
        .await;
    assert!(!output.status.success(), "{}", describe(&output));
    let said = describe(&output);
    assert!(said.contains("deepseek-v4-flash") && said.contains("does not read images"), "{said}");
    assert!(env.log_files().is_empty(), "no session was created: {:?}", env.log_files());
    assert!(env.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_never_carries_more_images_than_the_model_takes() {
    let env = Env::new().await;
    let config =
        vision_profile(&env, "anthropic").replace("images = true", "images = true\nmax_images = 2");
    std::fs::write(env.user_config(), config).unwrap();
    // The largest image taken, 3,000,000 bytes: its base64 (4,000,000 bytes) fits in one API
    // frame of `session/prompt`.
    let (big, big_bytes) = png_file(&env, "big.png", 3_000_000, 11);
    let (small, _) = png_file(&env, "small.png", 1_000, 12);
    let workspace = env.workspace.to_str().unwrap().to_owned();
    let first = dsh(
        &env,
        &[
            "prompt",
            "--yes",
            "--workspace",
            &workspace,
            "--image",
            big.to_str().unwrap(),
            "--image",
            small.to_str().unwrap(),
            "Two.",
        ],
    )
    .await;
    let session = session_id_of(&first);
    let requests = env.requests();
    assert_eq!(requests.len(), 1);
    assert!(String::from_utf8_lossy(&requests[0].body).contains(&base64(&big_bytes)));
    // A third image given with a prompt: more than `max_images`; refused before anything is
    // logged, the error says to compact.
    let logged = env.log_values(&session).len();
    let third = run(env.command_plain(
        &env.key,
        &["prompt", "--yes", "--session", &session, "--image", small.to_str().unwrap(), "Three."],
    ))
    .await;
    assert!(!third.status.success());
    let said = describe(&third);
    assert!(
        said.contains("carries 2 images and the prompt 1 more, over the 2")
            && said.contains("compact the session first; nothing was logged"),
        "{said}"
    );
    assert_eq!(env.log_values(&session).len(), logged, "nothing was logged");
    assert_eq!(env.requests().len(), 1, "nothing was sent");
    // The configuration lowered under the session: its next step fails, nothing sent, the error
    // says to compact.
    let lowered =
        vision_profile(&env, "anthropic").replace("images = true", "images = true\nmax_images = 1");
    std::fs::write(env.user_config(), lowered).unwrap();
    let next =
        run(env.command_plain(&env.key, &["prompt", "--yes", "--session", &session, "Go on."]))
            .await;
    let said = describe(&next);
    assert!(
        said.contains("2 images") && said.contains("more than the 1") && said.contains("compact"),
        "{said}"
    );
    assert_eq!(env.requests().len(), 1, "nothing was sent");
    env.assert_audit_ok(&session).await;
}

/// A `read_file` of an image when the conversation already carries as many images as one request
/// takes: the model is told, in the result, and the turn goes on (no image stored in the result).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_file_of_an_image_past_the_models_max_images_is_told_not_attached() {
    let env = Env::new().await;
    let config =
        vision_profile(&env, "anthropic").replace("images = true", "images = true\nmax_images = 1");
    std::fs::write(env.user_config(), config).unwrap();
    let (given, _) = png_file(&env, "given.png", 1_000, 21);
    let read = workspace_png(&env, "shot.png", 5_000, 22);
    env.script(serde_json::json!([
        crate::support::tool_reply("Look.", "read_file", serde_json::json!({"path": "shot.png"})),
        {"content": "I saw the first one only."},
    ]))
    .await;
    let workspace = env.workspace.to_str().unwrap().to_owned();
    let output = dsh(
        &env,
        &[
            "prompt",
            "--yes",
            "--workspace",
            &workspace,
            "--image",
            given.to_str().unwrap(),
            "Both?",
        ],
    )
    .await;
    let session = session_id_of(&output);
    let results = tool_results(&env, &session);
    let content = results[0]["content"].as_str().unwrap();
    assert!(
        content.starts_with("shot.png: image/png, 5000 bytes")
            && content.contains("not shown: the conversation already carries 1 images, the most"),
        "{content}"
    );
    assert!(results[0].get("images").is_none(), "{}", results[0]);
    let requests = env.requests();
    assert_eq!(requests.len(), 2, "the turn went on");
    assert!(!String::from_utf8_lossy(&requests[1].body).contains(&base64(&read)[..64]));
    env.assert_audit_ok(&session).await;
}

/// One API request line holds one image of the largest size, not two: `dsh prompt` says so
/// before anything is created, instead of sending a line the daemon refuses unread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_images_of_the_largest_size_are_refused_before_anything_is_created() {
    let env = Env::new().await;
    std::fs::write(env.user_config(), vision_profile(&env, "anthropic")).unwrap();
    let (first, _) = png_file(&env, "one.png", 3_000_000, 13);
    let (second, _) = png_file(&env, "two.png", 3_000_000, 14);
    let workspace = env.workspace.to_str().unwrap().to_owned();
    let output = run(env.command_plain(
        &env.key,
        &[
            "prompt",
            "--workspace",
            &workspace,
            "--image",
            first.to_str().unwrap(),
            "--image",
            second.to_str().unwrap(),
            "Both.",
        ],
    ))
    .await;
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    let said = describe(&output);
    assert!(said.contains("more than one API request line holds (4194304 bytes)"), "{said}");
    assert!(env.log_files().is_empty(), "nothing was created");
    assert!(env.requests().is_empty());
}
