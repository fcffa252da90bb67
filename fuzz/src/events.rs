//! The structured log generator of the `log_events` target: logs built from the fuzzer's bytes
//! out of small vocabularies (a few step and turn numbers, call ids, tool names and texts), so
//! that pairings and nestings happen by chance both right and wrong and the folds see deep,
//! nearly well-formed event sequences that byte mutation rarely builds.
//!
//! The kinds come from the session crate's own list, `EVENT_KINDS` (made by its `event_kinds!`
//! macro): [`build`] draws each event's kind from it, and [`event_data`] builds a payload for a
//! kind. A kind it has no arm for is `None`, and the session crate's test
//! `the_log_events_generator_builds_every_event_kind` fails naming it — so a new event kind
//! is one arm here. Only `dsh_session` and `serde_json`: the session crate's integration test
//! includes this file by path.

use dsh_session::PromptCommand;
use dsh_session::{
    ApprovalDecision, ApprovalRequest, ApprovalVerdict, AssistantChunk, AssistantMessage,
    AssistantTurn, ChangeKind, ChunkDelta, CompactStart, CompactSummary, ContentBlock,
    ContextMessage, EVENT_KINDS, EpochHeader, Event, EventData, FORMAT_VERSION, FileChange,
    FileSeen, ForkOrigin, HeaderDelta, ImageRef, InstructionFile, LimitKind, LlmCallConfig,
    LlmRetry, McpWait, McpWaitReason, PlanEntry, PlanStatus, PlanUpdate, RequestHeader,
    RequestSent, ResponseFormat, SessionMeta, SessionPin, SnapshotReason, SteeringMessage, StepEnd,
    StepError, StepStart, StopReason, SurfaceNode, SurfaceReplace, SystemDelta, ToolCall,
    ToolCallStarted, ToolProgress, ToolResult, ToolSchema, ToolsDelta, TurnEnd, TurnLimit,
    TurnStart, Usage, UserMessage,
};
use dsh_session::{CheckpointReason, TooLargeFile, WorkspaceCheckpoint, WorkspaceRewind};
use dsh_session::{HookEvent, HookOutcome, HookRun};
use dsh_session::{ParentLink, TaskContext, TaskSpawn};

/// The most events after `session/meta` in one log.
pub const MAX_EVENTS: usize = 64;

const TEXTS: &[&str] = &["", "a", "b\nc", "line one\nline two\n", "ü✓", "{\"x\":1}", " "];
const TOOLS: &[&str] = &["read", "write", "run", "list", "update_plan"];
const MODELS: &[&str] = &["m1", "m2"];
const PATHS: &[&str] = &["a.rs", "src/b.rs", "AGENTS.md"];

/// The fuzzer's bytes, read front to back; past their end every read is 0.
pub struct Input<'a> {
    bytes: &'a [u8],
}

impl<'a> Input<'a> {
    /// Reads `bytes`.
    pub fn new(bytes: &'a [u8]) -> Input<'a> {
        Input { bytes }
    }

    /// Whether every byte was read.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    fn byte(&mut self) -> u8 {
        let Some((&first, rest)) = self.bytes.split_first() else { return 0 };
        self.bytes = rest;
        first
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }

    fn flag(&mut self) -> bool {
        self.byte() & 1 == 1
    }

    fn pick<T: Copy>(&mut self, options: &[T]) -> T {
        options[usize::from(self.byte()) % options.len()]
    }

    /// A step, turn or index: 0 to 5.
    fn small(&mut self) -> u64 {
        u64::from(self.byte() % 6)
    }

    /// How many items of a list: 0 to `max`.
    fn count(&mut self, max: u8) -> usize {
        usize::from(self.byte() % (max + 1))
    }

    fn text(&mut self) -> String {
        self.pick(TEXTS).to_owned()
    }

    fn some_text(&mut self) -> Option<String> {
        self.flag().then(|| self.text())
    }

    fn tool(&mut self) -> String {
        self.pick(TOOLS).to_owned()
    }

    fn call_id(&mut self) -> String {
        format!("call_{}", self.byte() % 4)
    }

    fn approval_id(&mut self) -> String {
        format!("approval_{}", self.byte() % 4)
    }

    fn sha256(&mut self) -> Option<String> {
        self.flag().then(|| format!("{:064x}", self.byte()))
    }

    /// Image references a log may hold (the objects need not exist: the folds never read them).
    fn images(&mut self) -> Vec<ImageRef> {
        self.list(2, |input| ImageRef {
            sha256: format!("{:064x}", input.byte()),
            size: u64::from(input.byte()),
            media_type: input
                .pick(&["image/png", "image/jpeg", "image/gif", "image/webp"])
                .to_owned(),
            name: input.flag().then(|| input.pick(PATHS).to_owned()),
        })
    }

    fn list<T>(&mut self, max: u8, mut item: impl FnMut(&mut Self) -> T) -> Vec<T> {
        (0..self.count(max)).map(|_| item(self)).collect()
    }

    fn config(&mut self) -> LlmCallConfig {
        LlmCallConfig {
            model: self.pick(MODELS).to_owned(),
            profile: None,
            wire: None,
            max_tokens: u32::from(self.u16()),
            thinking: self.flag(),
            reasoning_effort: self.some_text(),
            temperature: self.flag().then(|| f64::from(self.byte()) / 100.0),
            top_p: None,
            response_format: self.flag().then_some(ResponseFormat::JsonObject),
        }
    }

    fn tool_schema(&mut self) -> ToolSchema {
        let description = self.text();
        ToolSchema {
            name: self.tool(),
            parameters: serde_json::json!({"type": "object", "d": description}),
            description,
        }
    }

    fn tool_result(&mut self) -> ToolResult {
        ToolResult {
            call_id: self.call_id(),
            name: self.tool(),
            content: self.text(),
            is_error: self.flag(),
            images: self.images(),
            seen: self.flag().then(|| {
                self.list(2, |input| FileSeen {
                    path: input.pick(PATHS).to_owned(),
                    sha256: input.sha256(),
                })
            }),
        }
    }

    /// A number as `turn/limit` writes it: whole for steps and tokens, a fraction for money
    /// and seconds.
    fn number(&mut self, whole: bool) -> serde_json::Number {
        let value = self.u16();
        if whole {
            u64::from(value).into()
        } else {
            serde_json::Number::from_f64(f64::from(value) / 1000.0).unwrap_or_else(|| 0.into())
        }
    }
}

/// A log built from `data`: `session/meta` at seq 0, then up to [`MAX_EVENTS`] events with
/// contiguous seqs, each of a kind drawn from `EVENT_KINDS`.
pub fn build(data: &[u8]) -> Vec<Event> {
    let meta = SessionMeta {
        format_version: FORMAT_VERSION,
        session_id: "fuzz".to_owned(),
        workspace: "/w".to_owned(),
        forked_from: None,
        pin: None,
        parent: None,
    };
    let mut events = vec![Event { seq: 0, time: 0, data: EventData::SessionMeta(meta) }];
    let mut input = Input::new(data);
    while !input.is_empty() && events.len() <= MAX_EVENTS {
        let kind = input.pick(EVENT_KINDS);
        // A second `session/meta` makes the log ill-formed, which skips the laws that need a
        // well-formed one: draw it a quarter as often.
        if kind == "session/meta" && !input.byte().is_multiple_of(4) {
            continue;
        }
        let seq = events.len() as u64;
        if let Some(data) = event_data(kind, seq, &mut input) {
            events.push(Event { seq, time: seq, data });
        }
    }
    events
}

/// An event of `kind` to be logged at `seq`, its fields drawn from `input`; `None` for a kind
/// this generator does not know (a test fails then).
pub fn event_data(kind: &str, seq: u64, input: &mut Input) -> Option<EventData> {
    Some(match kind {
        "session/meta" => EventData::SessionMeta(SessionMeta {
            format_version: FORMAT_VERSION,
            session_id: "fuzz".to_owned(),
            workspace: "/w".to_owned(),
            forked_from: input
                .flag()
                .then(|| ForkOrigin { session_id: "parent".to_owned(), seq: input.small() }),
            pin: input.flag().then(|| SessionPin {
                model: Some(input.pick(MODELS).to_owned()),
                max_steps: input.flag().then(|| u32::from(input.byte())),
                ..SessionPin::default()
            }),
            parent: input.flag().then(|| ParentLink {
                session_id: "parent".to_owned(),
                tool_call_id: input.call_id(),
                depth: u32::from(input.byte() % 4),
            }),
        }),
        "turn/start" => EventData::TurnStart(TurnStart { turn: input.small() }),
        "turn/end" => EventData::TurnEnd(TurnEnd {
            turn: input.small(),
            reason: input.pick(&[
                StopReason::Completed,
                StopReason::Cancelled,
                StopReason::Error,
                StopReason::MaxSteps,
                StopReason::Limit,
                StopReason::OutputInvalid,
            ]),
            error: input.some_text(),
        }),
        "turn/limit" => {
            let limit = input.pick(&[
                LimitKind::MaxSteps,
                LimitKind::MaxTokens,
                LimitKind::MaxCost,
                LimitKind::Timeout,
            ]);
            let whole = matches!(limit, LimitKind::MaxSteps | LimitKind::MaxTokens);
            EventData::TurnLimit(TurnLimit {
                limit,
                value: input.number(whole),
                spent: input.number(whole),
            })
        }
        "user/message" => EventData::UserMessage(UserMessage {
            text: input.text(),
            command: input.flag().then(|| PromptCommand {
                name: input.pick(&["review", "fix"]).into(),
                source: input.text(),
            }),
            images: input.images(),
        }),
        "steering/message" => EventData::SteeringMessage(SteeringMessage { text: input.text() }),
        "context/message" => EventData::ContextMessage(ContextMessage {
            text: input.text(),
            source: input.flag().then(|| input.pick(&["date", "instructions", "workspace"]).into()),
            instructions: input.flag().then(|| {
                input.list(2, |input| InstructionFile {
                    name: input.pick(PATHS).to_owned(),
                    text: input.text(),
                })
            }),
            files: input.flag().then(|| {
                input.list(2, |input| FileChange {
                    path: input.pick(PATHS).to_owned(),
                    change: input.pick(&[
                        ChangeKind::Edited,
                        ChangeKind::Added,
                        ChangeKind::Deleted,
                        ChangeKind::Replaced,
                    ]),
                    sha256: input.sha256(),
                })
            }),
        }),
        "step/start" => {
            EventData::StepStart(StepStart { step: input.small(), turn: input.small() })
        }
        "request/header" => EventData::RequestHeader(RequestHeader {
            reason: input.pick(&[
                SnapshotReason::Initial,
                SnapshotReason::Resume,
                SnapshotReason::Fallback,
            ]),
            header: {
                let config = input.config();
                let system = input.list(3, Input::text);
                let system = (!system.is_empty()).then(|| system.join("\n"));
                EpochHeader::new(config, system, input.list(3, Input::tool_schema))
            },
        }),
        "request/header-delta" => {
            let system = input.flag().then(|| SystemDelta {
                keep_prefix: input.count(3),
                keep_suffix: input.count(3),
                lines: input.list(3, Input::text),
            });
            let tools = ToolsDelta {
                added: input.list(2, Input::tool_schema),
                removed: input.list(2, Input::tool),
                changed: input.list(2, Input::tool_schema),
            };
            let empty =
                tools.added.is_empty() && tools.removed.is_empty() && tools.changed.is_empty();
            EventData::RequestHeaderDelta(HeaderDelta {
                system,
                tools: (!empty).then_some(tools),
                config: input.flag().then(|| input.config()),
            })
        }
        "request/sent" => EventData::RequestSent(RequestSent {
            adapter: "deepseek-chat/v1".to_owned(),
            sha256: "0".repeat(64),
            bytes: seq,
        }),
        "assistant/chunk" => EventData::AssistantChunk(AssistantChunk {
            step: input.small(),
            delta: match input.byte() % 6 {
                0 => ChunkDelta::Text { text: input.text() },
                1 => ChunkDelta::Reasoning { text: input.text() },
                2 => ChunkDelta::ToolCall {
                    index: u32::from(input.byte() % 3),
                    id: input.call_id(),
                    name: input.tool(),
                },
                3 => ChunkDelta::ToolArgs {
                    index: u32::from(input.byte() % 3),
                    fragment: input.text(),
                },
                4 => ChunkDelta::ReasoningSignature { signature: input.text() },
                _ => ChunkDelta::RedactedReasoning { data: input.text() },
            },
        }),
        "assistant/message" => {
            let step = input.small();
            let content = input.text();
            let reasoning_content = input.some_text();
            let tool_calls = input.list(3, |input| ToolCall {
                id: input.call_id(),
                name: input.tool(),
                arguments: input.text(),
            });
            // Blocks, as Anthropic's messages have them: mostly in step with the texts and
            // calls, sometimes not.
            let blocks = match input.byte() % 4 {
                0 => {
                    let mut blocks = Vec::new();
                    if let Some(reasoning) = &reasoning_content {
                        let signature = input.text();
                        blocks.push(ContentBlock::Thinking {
                            bytes: reasoning.len() as u64,
                            signature,
                        });
                    }
                    blocks.push(ContentBlock::Text { bytes: content.len() as u64 });
                    blocks.extend(tool_calls.iter().map(|_| ContentBlock::ToolUse));
                    blocks
                }
                1 => input.list(3, |input| match input.byte() % 4 {
                    0 => ContentBlock::Thinking { bytes: input.small(), signature: input.text() },
                    1 => ContentBlock::RedactedThinking { data: input.text() },
                    2 => ContentBlock::Text { bytes: input.small() },
                    _ => ContentBlock::ToolUse,
                }),
                _ => Vec::new(),
            };
            EventData::AssistantMessage(AssistantTurn {
                step,
                message: AssistantMessage { content, reasoning_content, blocks, tool_calls },
            })
        }
        "tool/call" => EventData::ToolCall(ToolCallStarted {
            step: input.small(),
            call_id: input.call_id(),
            name: input.tool(),
            unconfined: input.byte().is_multiple_of(5),
        }),
        "tool/progress" => {
            EventData::ToolProgress(ToolProgress { call_id: input.call_id(), text: input.text() })
        }
        "tool/result" => EventData::ToolResult(input.tool_result()),
        "plan/update" => EventData::PlanUpdate(PlanUpdate {
            call_id: input.call_id(),
            explanation: input.some_text(),
            plan: input.list(6, |input| PlanEntry {
                step: input.text(),
                status: input.pick(&[
                    PlanStatus::Pending,
                    PlanStatus::InProgress,
                    PlanStatus::Completed,
                ]),
            }),
        }),
        "step/end" => {
            let (hit, miss, out) = (input.u16(), input.u16(), input.u16());
            EventData::StepEnd(StepEnd {
                step: input.small(),
                finish_reason: input.pick(&["stop", "tool_calls", "length"]).to_owned(),
                usage: Usage {
                    prompt_tokens: u64::from(hit) + u64::from(miss),
                    cache_hit_tokens: u64::from(hit),
                    cache_miss_tokens: u64::from(miss),
                    completion_tokens: u64::from(out),
                    reasoning_tokens: u64::from(out / 2),
                    cache_write_tokens: u64::from(miss / 3),
                },
            })
        }
        "step/error" => EventData::StepError(StepError {
            step: input.small(),
            error: "failed".to_owned(),
            cancelled: input.flag(),
        }),
        "llm/retry" => EventData::LlmRetry(LlmRetry {
            step: input.small(),
            attempt: 1,
            delay_ms: 10,
            error: "retry".to_owned(),
        }),
        "mcp/wait" => EventData::McpWait(McpWait {
            servers: input.list(2, Input::tool),
            reason: input.pick(&[McpWaitReason::Starting, McpWaitReason::ToolsChanged]),
        }),
        "hook/run" => {
            let event = input.pick(&HookEvent::ALL);
            let call = event.is_tool_event() && input.flag();
            let outcome = input.pick(&[HookOutcome::Ok, HookOutcome::Blocked, HookOutcome::Failed]);
            EventData::HookRun(HookRun {
                hook: input.pick(&["guard", "PostToolUse.1", "notes"]).to_owned(),
                source: "/home/u/.config/dsh/config.toml:3".to_owned(),
                event,
                call_id: call.then(|| input.call_id()),
                tool: call.then(|| input.tool()),
                outcome,
                exit_code: match outcome {
                    HookOutcome::Ok => Some(0),
                    HookOutcome::Blocked => Some(2),
                    HookOutcome::Failed => input.flag().then_some(1),
                },
                error: (outcome == HookOutcome::Failed).then(|| "timed out after 1 s".to_owned()),
                duration_ms: input.small(),
                stderr: input.text(),
                stdout_bytes: input.small(),
                stdout_truncated: input.flag(),
                stderr_truncated: input.flag(),
                invalid_utf8: input.flag(),
            })
        }
        "approval/request" => EventData::ApprovalRequest(ApprovalRequest {
            approval_id: input.approval_id(),
            call_id: input.call_id(),
            tool: input.tool(),
            summary: "run it".to_owned(),
            sandbox: input.flag().then(|| "workspace-write".to_owned()),
        }),
        "approval/decision" => EventData::ApprovalDecision(ApprovalDecision {
            approval_id: input.approval_id(),
            decision: input.pick(&[
                ApprovalVerdict::Allow,
                ApprovalVerdict::Deny,
                ApprovalVerdict::AllowAlways,
                ApprovalVerdict::Timeout,
                ApprovalVerdict::AllowUnconfined,
            ]),
        }),
        "compact/start" => EventData::CompactStart(CompactStart {
            reason: "manual".to_owned(),
            tokens_before: u64::from(input.u16()),
        }),
        "compact/summary" => EventData::CompactSummary(CompactSummary {
            profile: None,
            wire: None,
            model: "m1".to_owned(),
            max_tokens: 100,
            summary: input.text(),
        }),
        "surface/replace" => {
            // Node ids are seqs of earlier events: point at them, mostly.
            let start = u64::from(input.byte()) % seq.max(1);
            let end = u64::from(input.byte()) % seq.max(1);
            let node = if input.flag() {
                SurfaceNode::Summary { text: input.text() }
            } else {
                SurfaceNode::ToolResult(input.tool_result())
            };
            EventData::SurfaceReplace(SurfaceReplace { start, end, node })
        }
        "workspace/checkpoint" => {
            let step = input.flag().then(|| input.small());
            let changed = input.list(3, Input::text);
            EventData::WorkspaceCheckpoint(WorkspaceCheckpoint {
                step,
                reason: input.pick(&[
                    CheckpointReason::Step,
                    CheckpointReason::TurnEnd,
                    CheckpointReason::Rewind,
                ]),
                root: format!("{seq:064x}"),
                files: changed.len() as u64,
                changed,
                too_large: input.list(1, |input| TooLargeFile {
                    path: input.text(),
                    size: u64::from(input.u16()),
                }),
                incomplete: input.flag().then(|| input.text()),
            })
        }
        "workspace/rewind" => {
            let files = input.flag();
            EventData::WorkspaceRewind(WorkspaceRewind {
                from_session: "parent".to_owned(),
                to_step: input.flag().then(|| input.small()),
                checkpoint: input.flag().then(|| format!("{seq:064x}")),
                before: files.then(|| format!("{:064x}", seq + 1)),
                restored: input.list(3, Input::text),
                created: input.list(2, Input::text),
                deleted: input.list(2, Input::text),
                forced: input.flag(),
                conversation: input.flag(),
                files,
            })
        }
        "task/spawn" => EventData::TaskSpawn(TaskSpawn {
            call_id: input.call_id(),
            session_id: format!("child-{seq}"),
            context: input.pick(&[TaskContext::Fresh, TaskContext::Fork]),
            description: input.text(),
            depth: u32::from(input.byte() % 4),
        }),
        _ => return None,
    })
}
