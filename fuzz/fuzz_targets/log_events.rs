//! Fuzz target `log_events`: logs built from structured input, so that the folds see deep,
//! nearly well-formed event sequences that byte mutation rarely reaches.
//!
//! Every log opens with `session/meta` and has contiguous seqs; the rest is any sequence of
//! events drawn from small vocabularies (a few step and turn numbers, call ids, tool names and
//! texts), so that pairings and nestings happen by chance both right and wrong. Checks: the
//! whole log survives the line codec (encode, then decode, gives it back), and every fold and
//! law of `dsh_fuzz::folds` holds.
#![no_main]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use arbitrary::Arbitrary;
use dsh_session::{
    ApprovalDecision, ApprovalRequest, ApprovalVerdict, AssistantChunk, AssistantMessage,
    AssistantTurn, ChunkDelta, CompactStart, CompactSummary, ContextMessage, EpochHeader, Event,
    EventData, FORMAT_VERSION, HeaderDelta, LimitKind, LlmCallConfig, LlmRetry, McpWait,
    McpWaitReason, RequestHeader, RequestSent, SessionMeta, SnapshotReason, SteeringMessage,
    StepEnd, StepError, StepStart, StopReason, SurfaceNode, SurfaceReplace, SystemDelta, ToolCall,
    ToolCallStarted, ToolProgress, ToolResult, ToolSchema, ToolsDelta, TurnEnd, TurnLimit,
    TurnStart, Usage, UserMessage, decode_log, encode_event,
};
use dsh_session::{CheckpointReason, TooLargeFile, WorkspaceCheckpoint, WorkspaceRewind};
use libfuzzer_sys::fuzz_target;

const TEXTS: &[&str] = &["", "a", "b\nc", "line one\nline two\n", "ü✓", "{\"x\":1}", " "];
const TOOLS: &[&str] = &["read", "write", "run", "list"];
const MODELS: &[&str] = &["m1", "m2"];

/// A small number: steps, turns, indexes.
#[derive(Arbitrary, Debug, Clone, Copy)]
struct Small(u8);

impl Small {
    fn n(self) -> u64 {
        u64::from(self.0 % 6)
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
struct Text(u8);

impl Text {
    fn s(self) -> String {
        TEXTS[usize::from(self.0) % TEXTS.len()].to_owned()
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
struct Name(u8);

impl Name {
    fn s(self) -> String {
        TOOLS[usize::from(self.0) % TOOLS.len()].to_owned()
    }
    fn call_id(self) -> String {
        format!("call_{}", self.0 % 4)
    }
}

#[derive(Arbitrary, Debug)]
struct Config {
    model: u8,
    max_tokens: u16,
    thinking: bool,
    effort: Option<Text>,
    temperature: Option<u8>,
}

impl Config {
    fn make(&self) -> LlmCallConfig {
        LlmCallConfig {
            model: MODELS[usize::from(self.model) % MODELS.len()].to_owned(),
            profile: None,
            wire: None,
            max_tokens: u32::from(self.max_tokens),
            thinking: self.thinking,
            reasoning_effort: self.effort.map(Text::s),
            temperature: self.temperature.map(|t| f64::from(t) / 100.0),
            top_p: None,
        }
    }
}

fn tool(name: Name, description: Text) -> ToolSchema {
    ToolSchema {
        name: name.s(),
        description: description.s(),
        parameters: serde_json::json!({"type": "object", "d": description.s()}),
    }
}

fn lines(texts: &[Text]) -> Option<String> {
    (!texts.is_empty()).then(|| texts.iter().map(|t| t.s()).collect::<Vec<_>>().join("\n"))
}

#[derive(Arbitrary, Debug)]
enum Op {
    TurnStart(Small),
    TurnEnd(Small, u8, Option<Text>),
    TurnLimit(u8, u16, u16),
    User(Text),
    Steering(Text),
    Context(Text, bool),
    StepStart {
        step: Small,
        turn: Small,
    },
    Header {
        reason: u8,
        config: Config,
        system: Vec<Text>,
        tools: Vec<(Name, Text)>,
    },
    HeaderDelta {
        system: Option<(u8, u8, Vec<Text>)>,
        added: Vec<(Name, Text)>,
        removed: Vec<Name>,
        changed: Vec<(Name, Text)>,
        config: Option<Config>,
    },
    Sent,
    Chunk(Small, u8, Name, Text),
    Assistant {
        step: Small,
        content: Text,
        reasoning: Option<Text>,
        calls: Vec<(Name, Name, Text)>,
    },
    ToolCall(Small, Name, Name),
    ToolProgress(Name, Text),
    ToolResult(Name, Name, Text, bool),
    StepEnd(Small, [u16; 3]),
    StepError(Small, bool),
    Retry(Small),
    McpWait(Vec<Name>, bool),
    ApprovalRequest(Name, Name),
    ApprovalDecision(Name, u8),
    CompactStart(u16),
    CompactSummary(Text),
    Replace {
        start: u8,
        end: u8,
        summary: bool,
        call: Name,
        content: Text,
    },
    Checkpoint {
        step: Option<Small>,
        reason: u8,
        changed: Vec<Text>,
        too_large: Option<(Text, u16)>,
        incomplete: Option<Text>,
    },
    Rewind {
        to_step: Option<Small>,
        restored: Vec<Text>,
        deleted: Vec<Text>,
        forced: bool,
        conversation: bool,
        files: bool,
    },
}

impl Op {
    fn data(&self, seq: u64) -> EventData {
        match *self {
            Op::TurnStart(turn) => EventData::TurnStart(TurnStart { turn: turn.n() }),
            Op::TurnEnd(turn, reason, error) => EventData::TurnEnd(TurnEnd {
                turn: turn.n(),
                reason: [
                    StopReason::Completed,
                    StopReason::Cancelled,
                    StopReason::Error,
                    StopReason::MaxSteps,
                    StopReason::Limit,
                ][usize::from(reason % 5)],
                error: error.map(Text::s),
            }),
            Op::TurnLimit(kind, value, spent) => EventData::TurnLimit(TurnLimit {
                limit: [
                    LimitKind::MaxSteps,
                    LimitKind::MaxTokens,
                    LimitKind::MaxCost,
                    LimitKind::Timeout,
                ][usize::from(kind % 4)],
                // Whole numbers for steps and tokens, fractions for money and seconds.
                value: if kind % 4 < 2 {
                    u64::from(value).into()
                } else {
                    serde_json::Number::from_f64(f64::from(value) / 1000.0).unwrap()
                },
                spent: if kind % 4 < 2 {
                    u64::from(spent).into()
                } else {
                    serde_json::Number::from_f64(f64::from(spent) / 1000.0).unwrap()
                },
            }),
            Op::User(text) => EventData::UserMessage(UserMessage { text: text.s() }),
            Op::Steering(text) => EventData::SteeringMessage(SteeringMessage { text: text.s() }),
            Op::Context(text, date) => EventData::ContextMessage(ContextMessage {
                text: text.s(),
                source: date.then(|| "date".to_owned()),
                instructions: None,
                files: None,
            }),
            Op::StepStart { step, turn } => {
                EventData::StepStart(StepStart { step: step.n(), turn: turn.n() })
            }
            Op::Header { reason, ref config, ref system, ref tools } => {
                EventData::RequestHeader(RequestHeader {
                    reason: [
                        SnapshotReason::Initial,
                        SnapshotReason::Resume,
                        SnapshotReason::Fallback,
                    ][usize::from(reason % 3)],
                    header: EpochHeader::new(
                        config.make(),
                        lines(system),
                        tools.iter().map(|&(name, text)| tool(name, text)).collect(),
                    ),
                })
            }
            Op::HeaderDelta { ref system, ref added, ref removed, ref changed, ref config } => {
                let tools = ToolsDelta {
                    added: added.iter().map(|&(name, text)| tool(name, text)).collect(),
                    removed: removed.iter().map(|name| name.s()).collect(),
                    changed: changed.iter().map(|&(name, text)| tool(name, text)).collect(),
                };
                let empty =
                    tools.added.is_empty() && tools.removed.is_empty() && tools.changed.is_empty();
                EventData::RequestHeaderDelta(HeaderDelta {
                    system: system.as_ref().map(|(prefix, suffix, texts)| SystemDelta {
                        keep_prefix: usize::from(prefix % 4),
                        keep_suffix: usize::from(suffix % 4),
                        lines: texts.iter().map(|t| t.s()).collect(),
                    }),
                    tools: (!empty).then_some(tools),
                    config: config.as_ref().map(Config::make),
                })
            }
            Op::Sent => EventData::RequestSent(RequestSent {
                adapter: "deepseek-chat/v1".to_owned(),
                sha256: "0".repeat(64),
                bytes: seq,
            }),
            Op::Chunk(step, kind, name, text) => EventData::AssistantChunk(AssistantChunk {
                step: step.n(),
                delta: match kind % 4 {
                    0 => ChunkDelta::Text { text: text.s() },
                    1 => ChunkDelta::Reasoning { text: text.s() },
                    2 => ChunkDelta::ToolCall {
                        index: u32::from(kind / 4 % 3),
                        id: name.call_id(),
                        name: name.s(),
                    },
                    _ => {
                        ChunkDelta::ToolArgs { index: u32::from(kind / 4 % 3), fragment: text.s() }
                    }
                },
            }),
            Op::Assistant { step, content, reasoning, ref calls } => {
                EventData::AssistantMessage(AssistantTurn {
                    step: step.n(),
                    message: AssistantMessage {
                        content: content.s(),
                        reasoning_content: reasoning.map(Text::s),
                        blocks: Vec::new(),
                        tool_calls: calls
                            .iter()
                            .map(|&(id, name, arguments)| ToolCall {
                                id: id.call_id(),
                                name: name.s(),
                                arguments: arguments.s(),
                            })
                            .collect(),
                    },
                })
            }
            Op::ToolCall(step, id, name) => EventData::ToolCall(ToolCallStarted {
                step: step.n(),
                call_id: id.call_id(),
                name: name.s(),
                unconfined: id.0 % 5 == 0,
            }),
            Op::ToolProgress(id, text) => {
                EventData::ToolProgress(ToolProgress { call_id: id.call_id(), text: text.s() })
            }
            Op::ToolResult(id, name, content, is_error) => EventData::ToolResult(ToolResult {
                call_id: id.call_id(),
                name: name.s(),
                content: content.s(),
                is_error,
                seen: None,
            }),
            Op::StepEnd(step, [hit, miss, out]) => EventData::StepEnd(StepEnd {
                step: step.n(),
                finish_reason: "stop".to_owned(),
                usage: Usage {
                    prompt_tokens: u64::from(hit) + u64::from(miss),
                    cache_hit_tokens: u64::from(hit),
                    cache_miss_tokens: u64::from(miss),
                    completion_tokens: u64::from(out),
                    reasoning_tokens: u64::from(out / 2),
                    cache_write_tokens: u64::from(miss / 3),
                },
            }),
            Op::StepError(step, cancelled) => EventData::StepError(StepError {
                step: step.n(),
                error: "failed".to_owned(),
                cancelled,
            }),
            Op::Retry(step) => EventData::LlmRetry(LlmRetry {
                step: step.n(),
                attempt: 1,
                delay_ms: 10,
                error: "retry".to_owned(),
            }),
            Op::McpWait(ref servers, changed) => EventData::McpWait(McpWait {
                servers: servers.iter().map(|name| name.s()).collect(),
                reason: if changed { McpWaitReason::ToolsChanged } else { McpWaitReason::Starting },
            }),
            Op::ApprovalRequest(id, name) => EventData::ApprovalRequest(ApprovalRequest {
                approval_id: format!("approval_{}", id.0 % 4),
                call_id: id.call_id(),
                tool: name.s(),
                summary: "run it".to_owned(),
                sandbox: (id.0 % 2 == 0).then(|| "workspace-write".to_owned()),
            }),
            Op::ApprovalDecision(id, verdict) => EventData::ApprovalDecision(ApprovalDecision {
                approval_id: format!("approval_{}", id.0 % 4),
                decision: [
                    ApprovalVerdict::Allow,
                    ApprovalVerdict::Deny,
                    ApprovalVerdict::AllowAlways,
                    ApprovalVerdict::Timeout,
                    ApprovalVerdict::AllowUnconfined,
                ][usize::from(verdict % 5)],
            }),
            Op::CompactStart(tokens) => EventData::CompactStart(CompactStart {
                reason: "manual".to_owned(),
                tokens_before: u64::from(tokens),
            }),
            Op::CompactSummary(text) => EventData::CompactSummary(CompactSummary {
                profile: None,
                wire: None,
                model: "m1".to_owned(),
                max_tokens: 100,
                summary: text.s(),
            }),
            Op::Replace { start, end, summary, call, content } => {
                // Node ids are seqs of earlier events: point at them, mostly.
                let start = u64::from(start) % seq.max(1);
                let end = u64::from(end) % seq.max(1);
                EventData::SurfaceReplace(SurfaceReplace {
                    start,
                    end,
                    node: if summary {
                        SurfaceNode::Summary { text: content.s() }
                    } else {
                        SurfaceNode::ToolResult(ToolResult {
                            call_id: call.call_id(),
                            name: call.s(),
                            content: content.s(),
                            is_error: false,
                            seen: None,
                        })
                    },
                })
            }
            Op::Checkpoint { step, reason, ref changed, too_large, incomplete } => {
                EventData::WorkspaceCheckpoint(WorkspaceCheckpoint {
                    step: step.map(Small::n),
                    reason: [
                        CheckpointReason::Step,
                        CheckpointReason::TurnEnd,
                        CheckpointReason::Rewind,
                    ][usize::from(reason % 3)],
                    root: format!("{:064x}", seq),
                    files: changed.len() as u64,
                    changed: changed.iter().map(|text| text.s()).collect(),
                    too_large: too_large
                        .map(|(path, size)| TooLargeFile { path: path.s(), size: u64::from(size) })
                        .into_iter()
                        .collect(),
                    incomplete: incomplete.map(Text::s),
                })
            }
            Op::Rewind { to_step, ref restored, ref deleted, forced, conversation, files } => {
                EventData::WorkspaceRewind(WorkspaceRewind {
                    from_session: "parent".to_owned(),
                    to_step: to_step.map(Small::n),
                    checkpoint: Some(format!("{:064x}", seq)),
                    before: files.then(|| format!("{:064x}", seq + 1)),
                    restored: restored.iter().map(|text| text.s()).collect(),
                    created: Vec::new(),
                    deleted: deleted.iter().map(|text| text.s()).collect(),
                    forced,
                    conversation,
                    files,
                })
            }
        }
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let meta = SessionMeta {
        format_version: FORMAT_VERSION,
        session_id: "fuzz".to_owned(),
        workspace: "/w".to_owned(),
        forked_from: None,
        pin: None,
    };
    let mut events = vec![Event { seq: 0, time: 0, data: EventData::SessionMeta(meta) }];
    for op in ops.iter().take(64) {
        let seq = events.len() as u64;
        events.push(Event { seq, time: seq, data: op.data(seq) });
    }
    let text: String = events.iter().map(|event| encode_event(event) + "\n").collect();
    // To turn a failing input into a readable regression log (tests/data/fuzz/log_load/), run
    // the target on it with DSH_FUZZ_WRITE_LOG=<file>.
    if let Some(path) = std::env::var_os("DSH_FUZZ_WRITE_LOG") {
        std::fs::write(path, &text).unwrap();
    }
    assert_eq!(decode_log(&text).unwrap(), events, "a log did not survive the line codec");
    dsh_fuzz::folds::check(&events);
});
