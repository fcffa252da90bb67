//! Tidy checks: crate edges point inward, the CLI reaches sessions only through the protocol,
//! every Rust file opens with `//!`, the session crate does no I/O and reads no clock, no
//! JSON-RPC envelope is spelled outside `protocol/src/jsonrpc.rs`, the provider's two wire
//! formats never import each other.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace_root() -> PathBuf {
    // This binary is a test target of server/cli.
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// Our crates and the crates of ours each may depend on (normal dependencies).
const ALLOWED_EDGES: &[(&str, &[&str])] = &[
    ("dsh-session", &[]),
    ("dsh-store", &["dsh-session"]),
    ("dsh-provider", &["dsh-session"]),
    ("dsh-mock", &[]),
    // The command sandbox knows nothing of sessions: the agent runs commands through it, the
    // daemon reports it, the CLI hosts its helper (`dsh sandbox-exec`) and `dsh doctor`.
    ("dsh-sandbox", &[]),
    // Workspace checkpoints (rewind): files and an object store, nothing of sessions.
    ("dsh-checkpoint", &[]),
    ("dsh-agent", &["dsh-session", "dsh-store", "dsh-provider", "dsh-sandbox"]),
    ("dsh-protocol", &["dsh-session"]),
    // Configuration files: the session crate's vocabulary (provider kinds, wire options,
    // prices), nothing that runs.
    ("dsh-config", &["dsh-session", "dsh-sandbox"]),
    (
        "dsh-daemon",
        &[
            "dsh-agent",
            "dsh-provider",
            "dsh-store",
            "dsh-session",
            "dsh-protocol",
            "dsh-sandbox",
            "dsh-config",
            "dsh-checkpoint",
        ],
    ),
    // The CLI: a client of the daemon through its typed client and the protocol (plus the pure
    // log vocabulary it prints, and the mock for `dsh mock`/`dsh demo`). It reaches no session
    // except through the protocol: no agent, no store, no provider.
    // `dsh config` reads the configuration files itself (no daemon needed).
    (
        "dsh",
        &[
            "dsh-acp",
            "dsh-lsp",
            "dsh-daemon",
            "dsh-protocol",
            "dsh-session",
            "dsh-mock",
            "dsh-sandbox",
            "dsh-config",
        ],
    ),
    // The ACP front: a client of the daemon through its typed client and the protocol.
    ("dsh-acp", &["dsh-daemon", "dsh-protocol"]),
    // The LSP front: likewise a client of the daemon through its typed client and the protocol
    // (its "what the model saw" text is the daemon's own rendering, `dsh_daemon::views`).
    ("dsh-lsp", &["dsh-daemon", "dsh-protocol"]),
];

#[test]
fn crate_edges_point_inward() {
    let output = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(workspace_root())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED_EDGES.iter().copied().collect();
    let mut violations = Vec::new();
    for package in metadata["packages"].as_array().unwrap() {
        let name = package["name"].as_str().unwrap();
        let Some(allowed_deps) = allowed.get(name) else {
            violations.push(format!("{name} is not listed in ALLOWED_EDGES"));
            continue;
        };
        for dependency in package["dependencies"].as_array().unwrap() {
            let dep = dependency["name"].as_str().unwrap();
            let normal = dependency["kind"].is_null();
            if dep.starts_with("dsh") && normal && !allowed_deps.contains(&dep) {
                violations.push(format!("{name} -> {dep} is not an allowed edge"));
            }
        }
    }
    assert!(violations.is_empty(), "{violations:#?}");
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy();
        if path.is_dir() {
            if !matches!(&*name, "target" | "node_modules" | ".git") {
                rust_files(&path, out);
            }
        } else if name.ends_with(".rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_rust_file_opens_with_a_module_doc() {
    let mut files = Vec::new();
    for dir in ["server", "tests", "protocol"] {
        let dir = workspace_root().join(dir);
        if dir.exists() {
            rust_files(&dir, &mut files);
        }
    }
    assert!(files.len() > 10, "found only {} files", files.len());
    let missing: Vec<_> = files
        .iter()
        .filter(|path| !std::fs::read_to_string(path).unwrap().starts_with("//!"))
        .collect();
    assert!(missing.is_empty(), "files without a leading //! doc: {missing:#?}");
}

#[test]
fn the_session_crate_does_no_io_and_reads_no_clock() {
    let mut files = Vec::new();
    rust_files(&workspace_root().join("server/session/src"), &mut files);
    assert!(!files.is_empty());
    let forbidden = [
        "tokio",
        "std::fs",
        "std::env",
        "SystemTime::now",
        "Instant",
        "deadline",
        "std::net",
        "std::process",
        "rand::",
        "fastrand",
    ];
    let mut found = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        for name in forbidden {
            if text.contains(name) {
                found.push(format!("{} names `{name}`", path.display()));
            }
        }
    }
    let manifest =
        std::fs::read_to_string(workspace_root().join("server/session/Cargo.toml")).unwrap();
    for name in ["tokio", "rand", "fastrand"] {
        if manifest.contains(name) {
            found.push(format!("server/session/Cargo.toml depends on `{name}`"));
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn the_cli_reaches_sessions_only_through_the_protocol() {
    // Besides its crate edges (above): of the daemon library, the CLI uses the typed client,
    // the lifecycle entry points (`dsh serve`, the in-process runner), the configuration and
    // the views of results — never the live sessions or the method handlers.
    let mut files = Vec::new();
    rust_files(&workspace_root().join("server/cli/src"), &mut files);
    assert!(!files.is_empty());
    let forbidden =
        ["dsh_daemon::daemon", "dsh_daemon::live", "dsh_daemon::api", "Daemon::new", "LiveSession"];
    let mut found = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        for name in forbidden {
            if text.contains(name) {
                found.push(format!("{} names `{name}`", path.display()));
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn json_rpc_envelopes_are_spelled_in_one_place() {
    // Requests, responses and notifications are built by `dsh_protocol::jsonrpc` only: a hand
    // spelled `"jsonrpc": "2.0"` anywhere else in Rust is a second client or transport. The
    // exceptions write malformed or borderline lines on purpose: the admission table and the
    // bad-input tests.
    let crafted = [
        "protocol/src/jsonrpc.rs",
        "tests/tidy.rs",
        "server/daemon/src/admission/tests.rs",
        "tests/api/bad_input.rs",
    ];
    let mut files = Vec::new();
    for dir in ["server", "protocol/src", "tests"] {
        rust_files(&workspace_root().join(dir), &mut files);
    }
    let mut found = Vec::new();
    for path in &files {
        if crafted.iter().any(|allowed| path.ends_with(allowed)) {
            continue;
        }
        let text = std::fs::read_to_string(path).unwrap();
        if text.contains("\"jsonrpc\": \"2.0\"") || text.contains("\"jsonrpc\":\"2.0\"") {
            found.push(path.display().to_string());
        }
    }
    assert!(found.is_empty(), "hand-built JSON-RPC envelopes in {found:#?}");
}

#[test]
fn fronts_and_editors_read_events_typed_never_by_string_key() {
    // The API's event carries the log's typed event: a front matches `EventData` variants, VS
    // Code narrows `SessionEvent` by its `type`, and each Neovim handler takes the generated
    // payload class of its kind. Reading a payload by key (`data["step"]`), casting it
    // (`e.data as StepEnd`) or decoding it a second time would be an untyped reader again.
    let root = workspace_root();
    let mut found = Vec::new();
    let mut rust = Vec::new();
    for dir in ["server/acp/src", "server/lsp/src", "server/cli/src"] {
        rust_files(&root.join(dir), &mut rust);
    }
    for path in rust.iter().filter(|path| !path.ends_with("tests.rs")) {
        let text = std::fs::read_to_string(path).unwrap();
        for pattern in ["data[\"", ".data.get(\"", "decode_event(", "data.as_object("] {
            if text.contains(pattern) {
                found.push(format!("{} reads an event with `{pattern}`", path.display()));
            }
        }
    }
    // VS Code's sources and the browser viewer's (`dsh web`) narrow events alike.
    let typescript =
        ["editors/vscode/src", "web/src"].map(|dir| std::fs::read_dir(root.join(dir)).unwrap());
    for entry in typescript.into_iter().flatten() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.ends_with(".ts") || name.ends_with(".generated.ts") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for pattern in [".data as ", "data as unknown", ".data[\""] {
            if text.contains(pattern) {
                found.push(format!("{} reads an event with `{pattern}`", path.display()));
            }
        }
    }
    // Neovim: every handler of the transcript is annotated with its kind's generated payload.
    let protocol = std::fs::read_to_string(root.join("editors/nvim/lua/dsh/protocol.lua")).unwrap();
    let payloads: std::collections::HashMap<&str, &str> = protocol
        .lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix("{ kind = \"")?;
            let (kind, rest) = rest.split_once("\", payload = \"")?;
            Some((kind, rest.split_once('"')?.0))
        })
        .collect();
    assert!(payloads.len() > 20, "the generated kinds table was not found");
    let transcript =
        std::fs::read_to_string(root.join("editors/nvim/lua/dsh/transcript.lua")).unwrap();
    let lines: Vec<&str> = transcript.lines().collect();
    let mut handlers = 0;
    for (index, line) in lines.iter().enumerate() {
        let Some(rest) = line.strip_prefix("handlers[\"") else { continue };
        let kind = rest.split('"').next().unwrap();
        handlers += 1;
        let expected = format!("---@param data dsh.{}", payloads.get(kind).copied().unwrap_or("?"));
        let annotated = lines[..index].iter().rev().take_while(|l| l.starts_with("---@param"));
        if !annotated.clone().any(|l| *l == expected) {
            found.push(format!("transcript.lua's `{kind}` handler lacks `{expected}`"));
        }
        if lines[index..].iter().take_while(|l| **l != "end").any(|l| l.contains("ev.data")) {
            found.push(format!("transcript.lua's `{kind}` handler reads `ev.data`"));
        }
    }
    assert!(handlers > 15, "found only {handlers} Neovim handlers");
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn the_provider_formats_never_import_each_other() {
    // Chat completions (`chat.rs`, its decoder `chunk.rs`) and Anthropic Messages
    // (`anthropic.rs`, `anthropic/`) build on the provider's shared modules only; `format.rs`
    // is the one place that knows both. A path is read from `crate::` through its name, or
    // through the `{…}` group it opens.
    let source = workspace_root().join("server/provider/src");
    let sides: [(&[&str], &[&str]); 2] =
        [(&["chat", "chunk"], &["anthropic"]), (&["anthropic"], &["chat", "chunk"])];
    let mut found = Vec::new();
    for (modules, others) in sides {
        let mut files = Vec::new();
        for module in modules {
            files.push(source.join(format!("{module}.rs")));
            if source.join(module).is_dir() {
                rust_files(&source.join(module), &mut files);
            }
        }
        for path in &files {
            let text = std::fs::read_to_string(path).unwrap();
            let code: Vec<&str> =
                text.lines().filter(|line| !line.trim_start().starts_with("//")).collect();
            let code = code.join(" ");
            for (at, _) in code.match_indices("crate::") {
                let rest = &code[at + "crate::".len()..];
                let end = if rest.starts_with('{') {
                    rest.find('}').map_or(rest.len(), |end| end + 1)
                } else {
                    rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len())
                };
                let words = rest[..end].split(|c: char| !(c.is_alphanumeric() || c == '_'));
                for word in words.filter(|word| others.contains(word)) {
                    found.push(format!("{} names `crate::{word}`", path.display()));
                }
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn the_daemon_fronts_import_one_way_serve_then_network_then_websocket() {
    // `serve.rs` starts the network front; `network.rs` hands upgrades to `network/websocket.rs`;
    // what more than one of them needs (the overload message, the transport) lives below them
    // (`daemon.rs`, `connection.rs`). A name back up the chain would be a cycle.
    let source = workspace_root().join("server/daemon/src");
    let rules = [
        ("network.rs", &["crate::serve"][..]),
        ("network/websocket.rs", &["crate::serve", "crate::network", "super::"][..]),
    ];
    let mut found = Vec::new();
    for (file, forbidden) in rules {
        let text = std::fs::read_to_string(source.join(file)).unwrap();
        for name in forbidden {
            if text.contains(name) {
                found.push(format!("server/daemon/src/{file} names `{name}`"));
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}
