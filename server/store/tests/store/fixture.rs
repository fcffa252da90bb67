//! Realistic, well-formed session logs of any size, for the tests and the benchmark.

use dsh_session::{
    AssistantChunk, AssistantMessage, AssistantTurn, ChunkDelta, EpochHeader, EventData,
    LlmCallConfig, RequestHeader, RequestSent, SnapshotReason, StepEnd, StepStart, StopReason,
    ToolCall, ToolCallStarted, ToolProgress, ToolResult, ToolSchema, TurnEnd, TurnStart, Usage,
    UserMessage, diff_header,
};

/// How big a generated log is.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Number of turns.
    pub turns: u64,
    /// Steps per turn; every step but a turn's last calls one tool.
    pub steps_per_turn: u64,
    /// `assistant/chunk` events per step.
    pub chunks_per_step: usize,
    /// Bytes of text per chunk.
    pub chunk_bytes: usize,
    /// Bytes of each tool result.
    pub tool_result_bytes: usize,
    /// A `request/header-delta` every this many steps (0: never).
    pub delta_every: u64,
}

impl Shape {
    /// A small log for unit-sized tests.
    pub fn small() -> Self {
        Shape {
            turns: 3,
            steps_per_turn: 3,
            chunks_per_step: 4,
            chunk_bytes: 12,
            tool_result_bytes: 40,
            delta_every: 4,
        }
    }
}

fn filler(seed: u64, len: usize) -> String {
    const WORDS: &[&str] =
        &["fn", "let", "match", "the", "cache", "prefix", "log", "\"quoted\"", "é", "\n", "\t"];
    let mut text = String::with_capacity(len + 8);
    let mut state = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    while text.len() < len {
        state =
            state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        text.push_str(WORDS[(state >> 33) as usize % WORDS.len()]);
        text.push(' ');
    }
    text
}

/// The header of step 1.
pub fn header() -> EpochHeader {
    let tool = |name: &str| ToolSchema {
        name: name.to_owned(),
        description: format!("The {name} tool. {}", filler(name.len() as u64, 200)),
        parameters: serde_json::json!({
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path"],
        }),
    };
    let config = LlmCallConfig {
        model: "deepseek-chat".to_owned(),
        profile: None,
        wire: None,
        max_tokens: 8192,
        thinking: false,
        reasoning_effort: None,
        temperature: Some(0.2),
        top_p: None,
        response_format: None,
    };
    let system =
        (0..60).map(|line| format!("rule {line}: {}", filler(line, 80))).collect::<Vec<_>>();
    let tools = ["read", "write", "edit", "bash", "grep", "glob", "web"].map(tool).to_vec();
    EpochHeader::new(config, Some(system.join("\n")), tools)
}

/// Every event after `session/meta` of a well-formed, closed log of the given shape.
pub fn session_events(shape: Shape) -> Vec<EventData> {
    let mut events = Vec::new();
    let mut current = header();
    let mut step = 0u64;
    for turn in 1..=shape.turns {
        events.push(EventData::TurnStart(TurnStart { turn }));
        events.push(EventData::UserMessage(UserMessage {
            images: Vec::new(),
            text: format!("  turn {turn}: please {}\nsecond line", filler(turn, 30)),
            command: None,
        }));
        for step_of_turn in 1..=shape.steps_per_turn {
            step += 1;
            events.push(EventData::StepStart(StepStart { step, turn }));
            if step == 1 {
                events.push(EventData::RequestHeader(RequestHeader {
                    reason: SnapshotReason::Initial,
                    header: current.clone(),
                }));
            } else if step.is_multiple_of(shape.delta_every) {
                let mut next = current.clone();
                let system = next.system.clone().unwrap_or_default();
                next.system = Some(format!("{system}\nnote for step {step}"));
                if let Some(delta) = diff_header(&current, &next) {
                    events.push(EventData::RequestHeaderDelta(delta));
                    current = next;
                }
            }
            events.push(EventData::RequestSent(RequestSent {
                adapter: "deepseek-chat/v1".to_owned(),
                sha256: format!("{:064x}", step),
                bytes: 1000 + step,
            }));
            let mut content = String::new();
            for chunk in 0..shape.chunks_per_step {
                let text = filler(step * 1000 + chunk as u64, shape.chunk_bytes);
                content.push_str(&text);
                events.push(EventData::AssistantChunk(AssistantChunk {
                    step,
                    delta: ChunkDelta::Text { text },
                }));
            }
            let calls_tool = step_of_turn < shape.steps_per_turn;
            let call_id = format!("call_{step}");
            let mut tool_calls = Vec::new();
            if calls_tool {
                let arguments = format!("{{\"path\":\"src/file_{step}.rs\"}}");
                events.push(EventData::AssistantChunk(AssistantChunk {
                    step,
                    delta: ChunkDelta::ToolCall {
                        index: 0,
                        id: call_id.clone(),
                        name: "read".into(),
                    },
                }));
                events.push(EventData::AssistantChunk(AssistantChunk {
                    step,
                    delta: ChunkDelta::ToolArgs { index: 0, fragment: arguments.clone() },
                }));
                tool_calls.push(ToolCall { id: call_id.clone(), name: "read".into(), arguments });
            }
            events.push(EventData::AssistantMessage(AssistantTurn {
                step,
                message: AssistantMessage {
                    content,
                    reasoning_content: None,
                    blocks: Vec::new(),
                    tool_calls,
                },
            }));
            if calls_tool {
                events.push(EventData::ToolCall(ToolCallStarted {
                    step,
                    call_id: call_id.clone(),
                    name: "read".into(),
                    unconfined: false,
                }));
                events.push(EventData::ToolProgress(ToolProgress {
                    call_id: call_id.clone(),
                    text: "reading".into(),
                }));
                events.push(EventData::ToolResult(ToolResult {
                    call_id,
                    name: "read".into(),
                    content: filler(step + 7, shape.tool_result_bytes),
                    is_error: false,
                    seen: None,
                    images: Vec::new(),
                }));
            }
            events.push(EventData::StepEnd(StepEnd {
                step,
                finish_reason: if calls_tool { "tool_calls" } else { "stop" }.to_owned(),
                usage: Usage {
                    prompt_tokens: 1000 * step,
                    cache_hit_tokens: 900 * step,
                    cache_miss_tokens: 100 * step,
                    completion_tokens: 50 + step,
                    reasoning_tokens: 0,
                    cache_write_tokens: 0,
                },
            }));
        }
        events.push(EventData::TurnEnd(TurnEnd {
            turn,
            reason: StopReason::Completed,
            error: None,
        }));
    }
    events
}
