//! `dsh demo`: a scripted coding session against the built-in mock provider, in a temporary
//! workspace, with real tool calls (read, edit, run a command, write). Needs no key and no
//! network, ends in seconds, and shows what dsh is for: the per-step cache usage with the logged
//! cause of each drop, one step's "what the model saw", and the audit proving every request was
//! rebuilt from the log byte for byte.
#![allow(clippy::print_stdout)] // the demo is a CLI command

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use dsh_daemon::DaemonConfig;
use dsh_daemon::startup::DshHome;
use dsh_mock::{MockConfig, MockServer};
use dsh_protocol::method;
use dsh_protocol::{SessionCreateParams, SessionParams, SessionRequestParams};
use dsh_session::PrefixCause;
use serde_json::json;

use crate::commands::{PrivateDaemon, TurnRequest, stream_turn};
use crate::text;

const GREET: &str = "#!/bin/sh\necho \"Helo, $1!\"\n";
const TEST: &str = "#!/bin/sh\nout=$(sh src/greet.sh dsh)\nif [ \"$out\" = \"Hello, dsh!\" ]; then echo PASS; else echo \"FAIL: got '$out'\"; exit 1; fi\n";
const AGENTS: &str = "# Project notes\n\nShell scripts use /bin/sh, not bash.\n";
const AGENTS_EDIT: &str = "Every script takes the name to greet as $1.\n";

const TURN_ONE: &str = "The greeting in src/greet.sh has a typo. Fix it and run the test.";
const TURN_TWO: &str = "Add a farewell script src/bye.sh in the same style and try it.";

/// The mock's replies, one per request, in order.
fn scripts() -> serde_json::Value {
    json!([
        { "reasoning": "The user wants the typo fixed. I'll read the script first.",
          "tool_calls": [{ "name": "read_file", "arguments": "{\"path\": \"src/greet.sh\"}" }] },
        { "reasoning": "It says Helo. An exact replacement fixes it.",
          "tool_calls": [{ "name": "edit_file", "arguments": "{\"path\": \"src/greet.sh\", \"old_string\": \"Helo\", \"new_string\": \"Hello\"}" }] },
        { "reasoning": "Now the test.",
          "tool_calls": [{ "name": "run_command", "arguments": "{\"command\": \"sh test.sh\"}" }] },
        { "reasoning": "The test passes.",
          "content": "Fixed the typo in `src/greet.sh` (\"Helo\" → \"Hello\"); `sh test.sh` prints PASS." },
        { "reasoning": "Same style as greet.sh: /bin/sh, the name in $1.",
          "tool_calls": [{ "name": "write_file", "arguments": "{\"path\": \"src/bye.sh\", \"content\": \"#!/bin/sh\\necho \\\"Goodbye, $1!\\\"\\n\"}" }] },
        { "reasoning": "Try it.",
          "tool_calls": [{ "name": "run_command", "arguments": "{\"command\": \"sh src/bye.sh dsh\"}" }] },
        { "reasoning": "It works.",
          "content": "Added `src/bye.sh`; `sh src/bye.sh dsh` prints \"Goodbye, dsh!\"." }
    ])
}

fn write_workspace(root: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(root.join("src"))?;
    std::fs::write(root.join("src/greet.sh"), GREET)?;
    std::fs::write(root.join("test.sh"), TEST)?;
    std::fs::write(root.join("AGENTS.md"), AGENTS)?;
    Ok(())
}

/// Runs the demo: a private daemon in this process (the library's in-process runner, the same
/// code `dsh serve` runs), spoken to through the typed client like any front.
pub async fn run_demo(
    keep: bool,
    settings: &crate::settings::Settings,
) -> anyhow::Result<ExitCode> {
    let temp = tempfile::Builder::new()
        .prefix("dsh-demo-")
        .tempdir()
        .context("creating a temporary directory")?;
    let home = temp.path().join("home");
    let workspace = temp.path().join("workspace");
    write_workspace(&workspace).context("writing the demo workspace")?;
    let workspace = workspace.canonicalize().context("resolving the demo workspace")?;

    let mock =
        MockServer::start(MockConfig::default()).await.context("starting the mock provider")?;
    mock.script(scripts()).context("scripting the mock provider")?;

    let mut config =
        DaemonConfig::builtin(DshHome::new(&home), mock.base_url()).with_key("sk-test")?;
    config.auto_approve = true;
    config.check_invariants = true;
    // The demo's commands run in the sandbox, as a real session's do.
    config.sandbox = settings.sandbox.clone();
    config.sandbox_helper = Some(std::path::PathBuf::from(crate::settings::SANDBOX_HELPER));
    let mut private = PrivateDaemon::start(config);
    let client = Arc::clone(&private.client);
    client.initialize("dsh-demo").await?;
    let created = client
        .call::<method::SessionCreate>(SessionCreateParams {
            workspace: workspace.display().to_string(),
            model: None,
            config: None,
            mcp_servers: None,
            images: None,
        })
        .await?;
    let id = created.session_id;

    println!(
        "dsh demo: a scripted session against the built-in DeepSeek-compatible mock ({})",
        mock.base_url()
    );
    println!("workspace {} · session {id}", workspace.display());
    println!("(tool calls are approved automatically in the demo)\n");

    println!("▶ {TURN_ONE}");
    stream_turn(&client, &mut private.inbox, &id, demo_turn(TURN_ONE)).await?;
    println!(
        "\n(the demo appends a line to AGENTS.md: it joins the next request as a logged note, so \
         the cached prefix holds — the `rewrite` policy would rewrite the system prompt instead)\n"
    );
    std::fs::write(workspace.join("AGENTS.md"), format!("{AGENTS}{AGENTS_EDIT}"))?;
    println!("▶ {TURN_TWO}");
    stream_turn(&client, &mut private.inbox, &id, demo_turn(TURN_TWO)).await?;

    let session = || SessionParams { session_id: id.clone() };
    let usage = client.call::<method::SessionUsage>(session()).await?;
    println!(
        "\n── per-step usage (prompt tokens, cache hits, misses, output; the logged cause of each drop) ──"
    );
    print!("{}", text::usage_table(&usage));

    // The step the edit reached: the first of turn two (a note under `append`, a system prompt
    // delta under `rewrite`).
    let delta_step = usage
        .rows
        .iter()
        .find(|entry| {
            entry.row.turn == 2
                || entry.row.causes.iter().any(|c| matches!(c, PrefixCause::SystemChanged { .. }))
        })
        .map_or(1, |entry| entry.row.step);
    if let Some(entry) = usage.rows.iter().find(|entry| entry.row.step == delta_step) {
        println!(
            "\nstep {delta_step}, the first request after the AGENTS.md edit: {:.1}% of its prompt \
             served from the cache",
            entry.row.hit_percent
        );
    }
    let request = |step: u64| SessionRequestParams { session_id: id.clone(), step, diff: None };
    let saw = client.call::<method::SessionRequest>(request(delta_step)).await?;
    println!("\n── what the model saw at step {delta_step} (rebuilt from the log) ──");
    print!("{}", dsh_daemon::views::request_text(&saw, false));

    let audit = client.call::<method::SessionAudit>(session()).await?;
    let recorded = mock.requests();
    let mut identical = 0;
    for (index, record) in recorded.iter().enumerate() {
        let rebuilt = client.call::<method::SessionRequest>(request(index as u64 + 1)).await?;
        if rebuilt.wire.body.as_bytes() == record.body.as_slice() {
            identical += 1;
        }
    }
    println!("\n── audit ──");
    print!("{}", text::audit_text(&audit));
    println!(
        "{identical} of {} requests the mock received are identical, byte for byte, to the ones rebuilt from the log",
        recorded.len()
    );
    // Stopping the in-process daemon flushes the log.
    drop(client);
    private.stop().await?;
    mock.shutdown().await;

    if keep {
        let root = temp.keep();
        println!("\nkept {}; explore it with:", root.display());
        let home = root.join("home");
        println!("  dsh --home {} usage {id}", home.display());
        println!("  dsh --home {} saw {id} --step {delta_step} --diff", home.display());
        println!("  dsh --home {} audit {id}", home.display());
    } else {
        println!(
            "\n(run `dsh demo --keep` to keep the session and explore it with dsh usage / saw / audit)"
        );
    }
    let ok = audit.ok && identical == recorded.len() && !recorded.is_empty();
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// A turn of the demo: its tool calls approved, no budget, printed as text.
fn demo_turn(text: &str) -> TurnRequest {
    TurnRequest {
        text: text.to_owned(),
        yes: true,
        limits: None,
        output_schema: None,
        json: false,
        attachments: Vec::new(),
    }
}
