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
