//! Tests of the message assembler.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_session::{AssistantMessage, ChunkDelta, ToolCall};

use super::MessageAssembler;

fn assemble(deltas: &[ChunkDelta]) -> AssistantMessage {
    let mut assembler = MessageAssembler::new();
    for delta in deltas {
        assembler.push(delta);
    }
    assembler.finish()
}

fn text(text: &str) -> ChunkDelta {
    ChunkDelta::Text { text: text.to_owned() }
}

fn reasoning(text: &str) -> ChunkDelta {
    ChunkDelta::Reasoning { text: text.to_owned() }
}

fn header(index: u32, id: &str, name: &str) -> ChunkDelta {
    ChunkDelta::ToolCall { index, id: id.to_owned(), name: name.to_owned() }
}

fn args(index: u32, fragment: &str) -> ChunkDelta {
    ChunkDelta::ToolArgs { index, fragment: fragment.to_owned() }
}

#[test]
fn text_and_reasoning_concatenate_exactly_as_received() {
    let message =
        assemble(&[reasoning(""), reasoning("a "), reasoning(" b"), text("x"), text(" \ny")]);
    assert_eq!(
        message,
        AssistantMessage {
            content: "x \ny".to_owned(),
            reasoning_content: Some("a  b".to_owned()),
            blocks: Vec::new(),
            tool_calls: vec![]
        }
    );
}

#[test]
fn an_empty_first_reasoning_delta_makes_reasoning_present_but_empty() {
    assert_eq!(assemble(&[reasoning(""), text("hi")]).reasoning_content, Some(String::new()));
    assert_eq!(assemble(&[text("hi")]).reasoning_content, None);
}

#[test]
fn parallel_tool_calls_assemble_by_index_with_verbatim_arguments() {
    let message = assemble(&[
        text("Two."),
        header(0, "call_00_a", "read"),
        args(0, "{\"pa"),
        args(0, "th\": \"a\"}"),
        header(1, "call_01_b", "ls"),
        args(1, "{}"),
    ]);
    assert_eq!(
        message.tool_calls,
        vec![
            ToolCall {
                id: "call_00_a".to_owned(),
                name: "read".to_owned(),
                arguments: "{\"path\": \"a\"}".to_owned()
            },
            ToolCall {
                id: "call_01_b".to_owned(),
                name: "ls".to_owned(),
                arguments: "{}".to_owned()
            },
        ]
    );
    assert_eq!(message.content, "Two.");
}

#[test]
fn interleaved_fragments_still_land_in_their_own_calls_in_index_order() {
    let message =
        assemble(&[header(1, "b", "second"), header(0, "a", "first"), args(1, "2"), args(0, "1")]);
    let summary: Vec<(&str, &str)> =
        message.tool_calls.iter().map(|call| (call.id.as_str(), call.arguments.as_str())).collect();
    assert_eq!(summary, [("a", "1"), ("b", "2")]);
}

#[test]
fn a_repeated_header_does_not_rename_a_call() {
    let message = assemble(&[header(0, "a", "first"), header(0, "z", "other"), args(0, "{}")]);
    assert_eq!(message.tool_calls[0].id, "a");
    assert_eq!(message.tool_calls[0].name, "first");
}
