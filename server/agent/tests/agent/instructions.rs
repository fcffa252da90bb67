//! The `append` instruction policy under any interleaving of instruction edits, compactions,
//! header changes and new loop instances: every request rebuilds from the log byte for byte (the
//! loop's own invariant check, on, and a rebuild of every step here), the surface folds the same
//! from scratch, and at every step the model knows the instruction files as they are on disk —
//! from the system prompt and the notes standing on the surface.

use std::sync::Arc;

use dsh_agent::approval::{ApprovalPolicy, DenyAll};
use dsh_agent::compact::{ContextConfig, compact_now};
use dsh_agent::prompt::{INSTRUCTION_FILES, InstructionPolicy, instructions_in, read_instructions};
use dsh_agent::tools::{ToolConfig, Toolbox, Workspace};
use dsh_agent::{Agent, AgentConfig, CallOverrides};
use dsh_provider::{sha256_hex, wire_body};
use dsh_session::{
    InstructionFile, InstructionFold, Session, Severity, check_log, reconstruct_step,
};
use proptest::prelude::*;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::support::Fixture;

#[derive(Clone, Debug)]
enum Op {
    /// Write AGENTS.md (`true`) or `.dsh/instructions.md` with one of a few texts.
    Edit(bool, usize),
    /// Delete AGENTS.md.
    Delete,
    /// Compact the session now.
    Compact,
    /// A new loop instance (a resume snapshot), on another model when `true`.
    NewLoop(bool),
    /// A new loop instance under the `rewrite` policy.
    Rewrite,
}

const TEXTS: &[&str] = &[
    "# Notes\n\nKeep it short.\n",
    "# Notes\n\nKeep it short.\nAnd plain.\n",
    "# Notes\n\nKeep it short.\n\n# Workspace instructions (.dsh/instructions.md)\n\nA heading.\n",
    "",
];

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<bool>(), 0..TEXTS.len()).prop_map(|(agents, text)| Op::Edit(agents, text)),
        1 => Just(Op::Delete),
        2 => Just(Op::Compact),
        1 => any::<bool>().prop_map(Op::NewLoop),
        1 => Just(Op::Rewrite),
    ]
}

fn agent(fixture: &Fixture, model: &str, policy: InstructionPolicy) -> Agent {
    let mut config = AgentConfig::new("deepseek-v4-flash");
    config.overrides = CallOverrides { model: Some(model.to_owned()), ..CallOverrides::default() };
    config.approvals = ApprovalPolicy::allow_all();
    config.check_invariants = true;
    config.date_context = false;
    config.instructions = policy;
    let toolbox =
        Arc::new(Toolbox::new(Workspace::new(&fixture.workspace).unwrap(), ToolConfig::default()));
    Agent::new(
        Arc::new((*fixture.provider).clone()),
        toolbox,
        Arc::new(DenyAll),
        config,
        &fixture.workspace,
    )
}

async fn run(ops: Vec<Op>) {
    let fixture = Fixture::new().await;
    let write = |name: &str, text: &str| {
        let path = fixture.workspace.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("AGENTS.md", TEXTS[0]);
    let mut model = "deepseek-v4-flash";
    let mut policy = InstructionPolicy::Append;
    let mut loop_instance = agent(&fixture, model, policy);
    // The instruction files on disk at each step.
    let mut expected: Vec<(u64, Vec<InstructionFile>)> = Vec::new();
    for (turn, op) in ops.into_iter().enumerate() {
        match op {
            Op::Edit(agents, text) => {
                write(if agents { "AGENTS.md" } else { ".dsh/instructions.md" }, TEXTS[text]);
            }
            Op::Delete => {
                let _ = std::fs::remove_file(fixture.workspace.join("AGENTS.md"));
            }
            Op::Compact => {
                fixture
                    .script(json!([{ "match": { "has_tools": false }, "content": "Summary." }]))
                    .await;
                let mut context = ContextConfig::with_window(64_000);
                context.keep_recent_turns = 1;
                let call = dsh_session::LlmCallConfig {
                    model: model.to_owned(),
                    ..AgentConfig::new(model).default_call
                };
                compact_now(
                    &fixture.provider,
                    &fixture.session,
                    &context,
                    &call,
                    &CancellationToken::new(),
                )
                .await
                .unwrap();
            }
            Op::NewLoop(other_model) => {
                if other_model {
                    model = if model == "deepseek-v4-flash" {
                        "deepseek-v4-pro"
                    } else {
                        "deepseek-v4-flash"
                    };
                }
                loop_instance = agent(&fixture, model, policy);
            }
            Op::Rewrite => {
                policy = InstructionPolicy::Rewrite;
                loop_instance = agent(&fixture, model, policy);
            }
        }
        fixture
            .script(json!([
                { "reasoning": "Look.", "tool_calls": [{ "name": "list_dir", "arguments": "{}" }] },
                { "content": format!("Turn {turn} done.") },
            ]))
            .await;
        let outcome = loop_instance
            .run_turn(&fixture.session, &format!("Turn {turn}."), &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(outcome.error, None);
        let on_disk = read_instructions(&fixture.workspace, INSTRUCTION_FILES);
        let last = fixture.session.query(|s| s.last_step()).await.unwrap();
        let first = expected.last().map_or(1, |(step, _)| step + 1);
        expected.extend((first..=last).map(|step| (step, on_disk.clone())));
    }

    let (events, live) =
        fixture.session.query(|s| (s.events().to_vec(), s.messages())).await.unwrap();
    let from_scratch = Session::from_events(events.clone());
    assert_eq!(from_scratch.messages(), live, "the surface folds the same from scratch");
    let errors: Vec<_> =
        check_log(&events).into_iter().filter(|d| d.severity == Severity::Error).collect();
    assert!(errors.is_empty(), "{errors:?}");

    let bodies = fixture.mock.requests();
    let loop_bodies: Vec<_> =
        bodies.iter().filter(|r| r.body.windows(8).any(|w| w == b"\"tools\":")).collect();
    assert_eq!(loop_bodies.len() as u64, expected.len() as u64);
    let sandbox = Toolbox::new(Workspace::new(&fixture.workspace).unwrap(), ToolConfig::default())
        .sandbox()
        .prompt_text();
    for (index, (step, on_disk)) in expected.iter().enumerate() {
        let rebuilt = reconstruct_step(&events, *step).unwrap();
        let body = wire_body(&rebuilt.request);
        assert_eq!(Some(sha256_hex(&body)), rebuilt.sent.map(|sent| sent.sha256), "step {step}");
        assert_eq!(body, loop_bodies[index].body, "step {step} was sent as rebuilt");
        // What the model knows at this step: the standing note, else the system prompt.
        let mut fold = InstructionFold::default();
        let boundary = rebuilt.boundary_seq;
        for event in events
            .iter()
            .filter(|event| event.seq < boundary || rebuilt.header_events.contains(&event.seq))
        {
            fold.push(event);
        }
        let noted =
            fold.noted().filter(|noted| rebuilt.surface.iter().any(|entry| entry.id == noted.seq));
        let known = match noted {
            Some(noted) => noted.files.clone(),
            None => {
                let system = rebuilt.request.header.system.as_deref().unwrap();
                instructions_in(system, &fixture.workspace, INSTRUCTION_FILES, &sandbox)
                    .map(|(files, _)| files)
                    .unwrap_or_else(|| panic!("step {step}: the system prompt parses"))
            }
        };
        assert_eq!(&known, on_disk, "step {step}: the model knows the files as they are");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
    #[test]
    fn any_interleaving_rebuilds_byte_for_byte_and_the_model_knows_the_files(
        ops in proptest::collection::vec(op(), 1..7)
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(run(ops));
    }
}

mod chain {
    //! The instruction chain as read from disk: the names a root file goes by, the caps, the
    //! nested files found from the paths the agent touched.

    use dsh_agent::prompt::{
        INSTRUCTIONS_TOTAL_CAP_BYTES, InstructionSources, nested_instruction_dirs,
        read_instruction_sources,
    };
    use dsh_sandbox::beneath::Beneath;

    fn write(root: &std::path::Path, path: &str, text: &str) {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn a_root_file_is_read_from_the_first_of_its_names_present() {
        let dir = tempfile::tempdir().unwrap();
        let beneath = Beneath::open(dir.path(), Vec::new()).unwrap();
        let sources = InstructionSources::workspace(&["AGENTS.md", ".dsh/instructions.md"]);
        assert!(read_instruction_sources(&beneath, &sources).is_empty());
        write(dir.path(), "CLAUDE.md", "claude");
        let names = |sources: &InstructionSources| -> Vec<String> {
            read_instruction_sources(&beneath, sources).into_iter().map(|f| f.name).collect()
        };
        assert_eq!(names(&sources), ["CLAUDE.md"]);
        write(dir.path(), "AGENTS.md", "agents");
        assert_eq!(names(&sources), ["AGENTS.md"]);
        write(dir.path(), "AGENTS.override.md", "override");
        write(dir.path(), ".dsh/instructions.md", "dsh");
        assert_eq!(names(&sources), ["AGENTS.override.md", ".dsh/instructions.md"]);
        // A configured name that is not `AGENTS.md` has no other names.
        assert_eq!(names(&InstructionSources::workspace(&["CLAUDE.md"])), ["CLAUDE.md"]);
    }

    #[test]
    fn the_total_cap_cuts_the_files_past_it_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let global = dir.path().join("user/AGENTS.md");
        write(dir.path(), "user/AGENTS.md", &"g".repeat(60 * 1024));
        let workspace = dir.path().join("ws");
        // Over the per-file cap: cut at 64 KiB, said.
        write(&workspace, "AGENTS.md", &"a".repeat(70 * 1024));
        write(&workspace, "sub/AGENTS.md", &"s".repeat(10 * 1024));
        let beneath = Beneath::open(&workspace, Vec::new()).unwrap();
        let sources = InstructionSources {
            global: Some(global.clone()),
            files: vec!["AGENTS.md".to_owned()],
            nested: vec!["sub".to_owned()],
        };
        let files = read_instruction_sources(&beneath, &sources);
        assert_eq!(files.len(), 3);
        assert_eq!(files[0].name, global.display().to_string());
        assert_eq!(files[0].text.len(), 60 * 1024);
        assert!(files[1].text.ends_with("[... instruction file cut at 64 KiB ...]"));
        assert!(files[2].text.ends_with("they exceed 128 KiB in all ...]"), "{}", &files[2].text);
        let total: usize = files.iter().map(|f| f.text.len()).sum();
        assert!(total <= INSTRUCTIONS_TOTAL_CAP_BYTES + 200, "{total}");
    }

    #[test]
    fn nested_dirs_are_the_touched_paths_ancestors_with_instructions_of_their_own() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        write(&root, "AGENTS.md", "root");
        write(&root, "a/AGENTS.md", "a");
        write(&root, "a/b/CLAUDE.md", "ab");
        write(&root, "a/b/c/x.rs", "x");
        write(&root, "d/AGENTS.md", "never touched");
        write(dir.path(), "outside.md", "secret");
        std::fs::create_dir_all(root.join("e")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("outside.md"), root.join("e/AGENTS.md"))
            .unwrap();
        let beneath = Beneath::open(&root, Vec::new()).unwrap();
        let touched = ["a/b/c/x.rs".to_owned(), "e/y.txt".to_owned(), "top.txt".to_owned()];
        assert_eq!(nested_instruction_dirs(&beneath, touched.iter()), ["a", "a/b"]);
    }
}
