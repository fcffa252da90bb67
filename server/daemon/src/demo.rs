//! `dsh demo`: a scripted coding session against the built-in mock provider, in a temporary
//! workspace, with real tool calls (read, edit, run a command, write). Needs no key and no
//! network, ends in seconds, and shows what dsh is for: the per-step cache usage with the logged
//! cause of each drop, one step's "what the model saw", and the audit proving every request was
//! rebuilt from the log byte for byte.
#![allow(clippy::print_stdout)] // the demo is a CLI command

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use dsh_agent::AgentConfig;
use dsh_agent::approval::{ApprovalPolicy, DenyAll};
use dsh_mock::{MockConfig, MockServer};
use dsh_provider::{ApiKey, DeepSeek, DeepSeekConfig, wire_body};
use dsh_session::reconstruct_step;
use dsh_store::DshHome;
use serde_json::json;

use crate::run;
use crate::settings::{DEFAULT_MODEL, Settings};
use crate::views;

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

/// Runs the demo.
pub async fn run_demo(_settings: &Settings, keep: bool) -> anyhow::Result<ExitCode> {
    let temp = tempfile::Builder::new()
        .prefix("dsh-demo-")
        .tempdir()
        .context("creating a temporary directory")?;
    let home = DshHome::new(temp.path().join("home"));
    let workspace = temp.path().join("workspace");
    write_workspace(&workspace).context("writing the demo workspace")?;

    let mock =
        MockServer::start(MockConfig::default()).await.context("starting the mock provider")?;
    mock.script(scripts()).context("scripting the mock provider")?;

    let provider = DeepSeek::new(DeepSeekConfig::new(mock.base_url(), ApiKey::new("sk-test")?))?;
    let session = run::create(&home, &workspace)?;
    let mut config = AgentConfig::new(DEFAULT_MODEL);
    config.approvals = ApprovalPolicy::allow_all();
    config.check_invariants = true;

    println!(
        "dsh demo: a scripted session against the built-in DeepSeek-compatible mock ({})",
        mock.base_url()
    );
    println!("workspace {} · session {}", workspace.display(), session.handle.session_id());
    println!("(tool calls are approved automatically in the demo)\n");

    println!("▶ {TURN_ONE}");
    let agent =
        run::agent(std::sync::Arc::new(provider), &session, config, std::sync::Arc::new(DenyAll))?;
    let (agent, _) = run::run_turn_printing(&session, agent, TURN_ONE.to_owned()).await?;

    println!(
        "\n(the demo appends a line to AGENTS.md: the next request logs a system prompt delta)\n"
    );
    let agents = workspace.join("AGENTS.md");
    std::fs::write(&agents, format!("{AGENTS}{AGENTS_EDIT}"))?;
    println!("▶ {TURN_TWO}");
    let (_agent, _) = run::run_turn_printing(&session, agent, TURN_TWO.to_owned()).await?;

    let events = session.handle.query(|s| s.events().to_vec()).await?;
    println!(
        "\n── per-step usage (prompt tokens, cache hits, misses, output; the logged cause of each drop) ──"
    );
    print!("{}", views::usage_text(&events));

    let delta_step = dsh_session::usage_rows(&events)
        .into_iter()
        .find(|row| {
            row.causes.iter().any(|c| matches!(c, dsh_session::PrefixCause::SystemChanged { .. }))
        })
        .map_or(1, |row| row.step);
    let rebuilt = reconstruct_step(&events, delta_step)?;
    println!("\n── what the model saw at step {delta_step} (rebuilt from the log) ──");
    print!("{}", views::saw_result_text(&views::request_result(&rebuilt, None)));

    let audit = views::audit(&events);
    let recorded = mock.requests();
    let mut identical = 0;
    for (index, record) in recorded.iter().enumerate() {
        let rebuilt = reconstruct_step(&events, index as u64 + 1)?;
        if wire_body(&rebuilt.request) == record.body {
            identical += 1;
        }
    }
    println!("\n── audit ──");
    print!("{}", views::audit_text(&audit));
    println!(
        "{identical} of {} requests the mock received are identical, byte for byte, to the ones rebuilt from the log",
        recorded.len()
    );
    mock.shutdown().await;

    let id = session.handle.session_id().to_owned();
    drop(session);
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
    let ok = audit.ok() && identical == recorded.len() && !recorded.is_empty();
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
