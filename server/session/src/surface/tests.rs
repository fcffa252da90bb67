//! Replay equals live across surface rewrites: random well-formed sessions of turns, tool steps,
//! steering, trims, compactions and abandoned compactions, folded live event by event and from
//! scratch; and the compaction/trim rules of the log checks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;

use crate::*;

#[derive(Clone, Debug)]
enum Op {
    /// A new turn with this prompt.
    Prompt(String),
    /// A step answering with this many tool calls (0: a final answer).
    Step(usize, String),
    /// A steering message.
    Steer(String),
    /// Trim the n-th original tool result on the surface (modulo their count).
    Trim(usize),
    /// Compact up to the n-th valid cut (modulo their count), or only log `compact/start`.
    Compact(usize, bool),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(
        prop_oneof![
            1 => "[a-z]{1,8}".prop_map(Op::Prompt),
            4 => (0usize..3, "[a-z]{0,8}").prop_map(|(calls, text)| Op::Step(calls, text)),
            1 => "[a-z]{1,8}".prop_map(Op::Steer),
            2 => (0usize..20).prop_map(Op::Trim),
            1 => (0usize..20, any::<bool>()).prop_map(|(cut, ok)| Op::Compact(cut, ok)),
        ],
        1..50,
    )
}

/// A live session plus the bookkeeping to generate well-formed events.
struct Writer {
    live: Session,
    turn: u64,
    turn_open: bool,
    step: u64,
    /// After every event: the live surface generation and nodes.
    generations: Vec<(u64, Vec<SurfaceEntry>)>,
}

impl Writer {
    fn push(&mut self, data: EventData) -> u64 {
        let seq = self.live.next_seq();
        self.live.append(Event { seq, time: seq, data }).unwrap();
        self.generations.push((self.live.surface_generation(), self.live.surface().to_vec()));
        seq
    }

    fn prompt(&mut self, text: String) {
        if self.turn_open {
            let end = TurnEnd { turn: self.turn, reason: StopReason::Completed, error: None };
            self.push(EventData::TurnEnd(end));
        }
        self.turn += 1;
        self.turn_open = true;
        self.push(EventData::TurnStart(TurnStart { turn: self.turn }));
        self.push(EventData::UserMessage(UserMessage { text, command: None, images: Vec::new() }));
    }

    fn step(&mut self, calls: usize, text: String) {
        if !self.turn_open {
            self.prompt("go".to_owned());
        }
        self.step += 1;
        let step = self.step;
        let start = self.push(EventData::StepStart(StepStart { step, turn: self.turn }));
        if step == 1 {
            let config = LlmCallConfig {
                model: "m".to_owned(),
                profile: None,
                wire: None,
                max_tokens: 100,
                thinking: false,
                reasoning_effort: None,
                temperature: None,
                top_p: None,
                response_format: None,
            };
            let header = EpochHeader::new(config, Some("system".to_owned()), Vec::new());
            self.push(EventData::RequestHeader(RequestHeader {
                reason: SnapshotReason::Initial,
                header,
            }));
        }
        let tool_calls: Vec<ToolCall> = (0..calls)
            .map(|index| ToolCall {
                id: format!("call-{start}-{index}"),
                name: "read_file".to_owned(),
                arguments: "{}".to_owned(),
            })
            .collect();
        let content = if calls == 0 && text.is_empty() { "done".to_owned() } else { text.clone() };
        let message = AssistantMessage {
            content,
            reasoning_content: None,
            blocks: Vec::new(),
            tool_calls: tool_calls.clone(),
        };
        self.push(EventData::AssistantMessage(AssistantTurn { step, message }));
        for call in tool_calls {
            self.push(EventData::ToolResult(ToolResult {
                call_id: call.id,
                name: call.name,
                content: format!("{text}{text}{text}"),
                is_error: false,
                seen: None,
                images: Vec::new(),
            }));
        }
        let end = StepEnd { step, finish_reason: "stop".to_owned(), usage: Usage::default() };
        self.push(EventData::StepEnd(end));
    }

    fn trim(&mut self, pick: usize) {
        let results: Vec<ToolResult> = self
            .live
            .surface()
            .iter()
            .filter_map(|node| match &self.live.events()[node.id as usize].data {
                EventData::ToolResult(result) => Some(result.clone()),
                _ => None,
            })
            .collect();
        let ids: Vec<u64> = self
            .live
            .surface()
            .iter()
            .filter(|node| {
                matches!(self.live.events()[node.id as usize].data, EventData::ToolResult(_))
            })
            .map(|node| node.id)
            .collect();
        if ids.is_empty() {
            return;
        }
        let index = pick % ids.len();
        let node = SurfaceNode::ToolResult(ToolResult {
            content: "[trimmed]".to_owned(),
            ..results[index].clone()
        });
        let id = ids[index];
        self.push(EventData::SurfaceReplace(SurfaceReplace { start: id, end: id, node }));
    }

    fn compact(&mut self, pick: usize, succeeds: bool) {
        // Valid cuts: prefixes whose tool calls are all answered inside them.
        let surface = self.live.surface().to_vec();
        let mut open = std::collections::HashSet::new();
        let mut cuts = Vec::new();
        for (position, node) in surface.iter().enumerate() {
            match &*node.message {
                Message::Assistant(assistant) => {
                    open.extend(assistant.tool_calls.iter().map(|call| call.id.clone()));
                }
                Message::Tool { call_id, .. } => {
                    open.remove(call_id);
                }
                _ => {}
            }
            if open.is_empty() && position + 1 < surface.len() {
                cuts.push(position);
            }
        }
        if cuts.is_empty() {
            return;
        }
        let end = surface[cuts[pick % cuts.len()]].id;
        let start = CompactStart { reason: "pressure".to_owned(), tokens_before: 0 };
        self.push(EventData::CompactStart(start));
        if !succeeds {
            return;
        }
        let summary = format!("summary of {}..={end}", surface[0].id);
        self.push(EventData::CompactSummary(CompactSummary {
            profile: None,
            wire: None,
            model: "m".to_owned(),
            max_tokens: 100,
            summary: summary.clone(),
        }));
        let node = SurfaceNode::Summary { text: summary };
        self.push(EventData::SurfaceReplace(SurfaceReplace { start: surface[0].id, end, node }));
    }
}

fn run(ops: Vec<Op>) -> Writer {
    let mut writer = Writer {
        live: Session::new(),
        turn: 0,
        turn_open: false,
        step: 0,
        generations: Vec::new(),
    };
    writer.push(EventData::SessionMeta(SessionMeta {
        format_version: FORMAT_VERSION,
        session_id: "s".to_owned(),
        workspace: "/w".to_owned(),
        forked_from: None,
        pin: None,
        parent: None,
    }));
    for op in ops {
        match op {
            Op::Prompt(text) => writer.prompt(text),
            Op::Step(calls, text) => writer.step(calls, text),
            Op::Steer(text) => {
                writer.push(EventData::SteeringMessage(SteeringMessage { text }));
            }
            Op::Trim(pick) => writer.trim(pick),
            Op::Compact(pick, succeeds) => writer.compact(pick, succeeds),
        }
    }
    writer
}

proptest! {
    #[test]
    fn replay_reproduces_every_surface_generation_of_the_live_run(ops in ops()) {
        let writer = run(ops);
        let events = writer.live.events();
        // Every prefix, folded from scratch, is the live surface at that point.
        for (index, (generation, surface)) in writer.generations.iter().enumerate() {
            let replayed = Session::from_events(events[..=index].iter().cloned());
            prop_assert_eq!(replayed.surface_generation(), *generation);
            prop_assert_eq!(replayed.surface(), &surface[..]);
            prop_assert!(replayed.anomalies().is_empty());
        }
        // Every step's reconstruction sees the live surface at its boundary.
        for index in writer.live.steps() {
            let rebuilt = reconstruct_step(events, index.step).unwrap();
            let (_, live_surface) = &writer.generations[index.start_seq as usize - 1];
            prop_assert_eq!(&rebuilt.surface, live_surface);
        }
        // Generated sessions are well-formed, abandoned compactions included.
        let errors: Vec<Diagnostic> =
            check_log(events).into_iter().filter(|d| d.severity == Severity::Error).collect();
        prop_assert!(errors.is_empty(), "{:?}", errors);
    }
}

fn compacted_session() -> Writer {
    run(vec![
        Op::Prompt("a".to_owned()),
        Op::Step(2, "x".to_owned()),
        Op::Step(0, "y".to_owned()),
        Op::Prompt("b".to_owned()),
    ])
}

fn errors(events: &[Event]) -> Vec<String> {
    check_log(events)
        .into_iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| d.to_string())
        .collect()
}

#[test]
fn an_abandoned_compaction_is_well_formed() {
    let mut writer = compacted_session();
    writer.compact(0, false);
    // A log that ends right after `compact/start` is only open (inside a turn), never broken.
    assert_eq!(errors(writer.live.events()), Vec::<String>::new());
    writer.step(0, "z".to_owned());
    writer.compact(0, true);
    assert_eq!(errors(writer.live.events()), Vec::<String>::new());
    assert_eq!(writer.live.surface_generation(), 1);
}

#[test]
fn checks_find_a_summary_without_its_compact_events() {
    let mut writer = compacted_session();
    let id = writer.live.surface()[0].id;
    let node = SurfaceNode::Summary { text: "s".to_owned() };
    writer.push(EventData::SurfaceReplace(SurfaceReplace { start: id, end: id, node }));
    writer.push(EventData::CompactSummary(CompactSummary {
        profile: None,
        wire: None,
        model: "m".to_owned(),
        max_tokens: 1,
        summary: "s".to_owned(),
    }));
    let found = errors(writer.live.events());
    assert!(found.iter().any(|e| e.contains("summary surface/replace without a compact/summary")));
    assert!(found.iter().any(|e| e.contains("compact/summary without a compact/start")));
}

#[test]
fn checks_find_a_trim_under_another_call_id() {
    let mut writer = compacted_session();
    let tool_ids: Vec<u64> = writer
        .live
        .surface()
        .iter()
        .filter(|node| matches!(*node.message, Message::Tool { .. }))
        .map(|node| node.id)
        .collect();
    let wrong = ToolResult {
        call_id: "someone-else".to_owned(),
        name: "read_file".to_owned(),
        content: "x".to_owned(),
        is_error: false,
        seen: None,
        images: Vec::new(),
    };
    let node = SurfaceNode::ToolResult(wrong.clone());
    let (start, end) = (tool_ids[0], tool_ids[0]);
    writer.push(EventData::SurfaceReplace(SurfaceReplace { start, end, node }));
    let node = SurfaceNode::ToolResult(wrong);
    let (start, end) = (tool_ids[1], tool_ids[1] + 1);
    writer.push(EventData::SurfaceReplace(SurfaceReplace { start, end, node }));
    let found = errors(writer.live.events());
    assert!(found.iter().any(|e| e.contains("which is not that call's result")), "{found:?}");
    assert!(found.iter().any(|e| e.contains("must replace exactly one node")), "{found:?}");
}
