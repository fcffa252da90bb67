//! Golden reconstructions: hand-written logs under `tests/data/<NNN_name>/log.jsonl`, each step's
//! rebuilt request rendered as text and compared with `expected.txt` beside it.
//!
//! Adding a case adds a directory. `UPDATE_EXPECT=1 cargo test` rewrites the expectations.

use std::fmt::Write as _;
use std::path::Path;

use dsh_session::{Message, Severity, check_log, decode_log, reconstruct_step, usage_rows};

fn render(log_text: &str) -> String {
    let events = decode_log(log_text).unwrap();
    let mut out = String::new();
    for diagnostic in check_log(&events) {
        assert_ne!(diagnostic.severity, Severity::Error, "golden log is malformed: {diagnostic}");
    }
    let steps: Vec<u64> = events
        .iter()
        .filter_map(|e| match &e.data {
            dsh_session::EventData::StepStart(start) => Some(start.step),
            _ => None,
        })
        .collect();
    for step in steps {
        let rebuilt = reconstruct_step(&events, step).unwrap();
        let header = &rebuilt.request.header;
        writeln!(
            out,
            "== step {step} (turn {}), boundary seq {}, header events {:?}",
            rebuilt.turn, rebuilt.boundary_seq, rebuilt.header_events
        )
        .unwrap();
        writeln!(out, "config: {}", serde_json::to_string(&header.config).unwrap()).unwrap();
        match &header.system {
            Some(system) => {
                for line in system.split('\n') {
                    writeln!(out, "system | {line}").unwrap();
                }
            }
            None => writeln!(out, "system: none").unwrap(),
        }
        let tools: Vec<&str> = header.tool_list().iter().map(|t| t.name.as_str()).collect();
        writeln!(out, "tools: {tools:?}").unwrap();
        for node in &rebuilt.surface {
            let line = match &*node.message {
                Message::System { content } => format!("system: {content:?}"),
                Message::User { content, .. } => format!("user: {content:?}"),
                Message::Assistant(message) => {
                    let calls: Vec<String> = message
                        .tool_calls
                        .iter()
                        .map(|c| format!("{} {} {}", c.id, c.name, c.arguments))
                        .collect();
                    format!(
                        "assistant: {:?} reasoning={:?} calls={calls:?}",
                        message.content, message.reasoning_content
                    )
                }
                Message::Tool { call_id, content, .. } => format!("tool {call_id}: {content:?}"),
            };
            writeln!(out, "[{:>3}] {line}", node.id).unwrap();
        }
        if let Some(usage) = rebuilt.usage {
            writeln!(out, "usage: {}", serde_json::to_string(&usage).unwrap()).unwrap();
        }
    }
    writeln!(out, "== usage view").unwrap();
    for row in usage_rows(&events) {
        let causes: Vec<String> = row.causes.iter().map(ToString::to_string).collect();
        let usage = row
            .usage
            .map(|u| format!("{}/{}/{}", u.prompt_tokens, u.cache_hit_tokens, u.completion_tokens));
        writeln!(
            out,
            "step {} turn {}: {usage:?} hit {:.1}% dropped={} causes={causes:?}",
            row.step, row.turn, row.hit_percent, row.dropped
        )
        .unwrap();
    }
    out
}

#[test]
fn golden_logs_reconstruct_to_their_expected_requests() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data");
    let mut cases: Vec<_> = std::fs::read_dir(&data).unwrap().map(|e| e.unwrap().path()).collect();
    cases.sort();
    assert!(cases.len() >= 3, "expected at least three golden cases");
    let update = std::env::var_os("UPDATE_EXPECT").is_some();
    let mut failures = Vec::new();
    for case in cases {
        let actual = render(&std::fs::read_to_string(case.join("log.jsonl")).unwrap());
        let expected_path = case.join("expected.txt");
        if update {
            std::fs::write(&expected_path, &actual).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if expected != actual {
            failures.push(format!(
                "{}:\n--- expected\n{expected}\n--- actual\n{actual}",
                case.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}\n(rerun with UPDATE_EXPECT=1 to accept)", failures.join("\n"));
}
