//! Unit and property tests of the pure core: codec, header laws, derivation cache, checks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use proptest::prelude::*;
use proptest::strategy::ValueTree;

use crate::*;

fn config(model: &str) -> LlmCallConfig {
    LlmCallConfig {
        model: model.to_owned(),
        profile: None,
        wire: None,
        max_tokens: 4096,
        thinking: true,
        reasoning_effort: None,
        temperature: None,
        top_p: None,
        response_format: None,
    }
}

fn tool(name: &str, description: &str) -> ToolSchema {
    ToolSchema {
        name: name.to_owned(),
        description: description.to_owned(),
        parameters: serde_json::json!({"type": "object", "properties": {}}),
    }
}

fn event(seq: u64, data: EventData) -> Event {
    Event { seq, time: 1_000 + seq, data }
}

fn meta() -> EventData {
    EventData::SessionMeta(SessionMeta {
        format_version: FORMAT_VERSION,
        session_id: "s1".to_owned(),
        workspace: "/w".to_owned(),
        forked_from: None,
        pin: None,
        parent: None,
    })
}

fn user(text: &str) -> EventData {
    EventData::UserMessage(UserMessage { text: text.to_owned(), command: None, images: Vec::new() })
}

fn assistant(step: u64, content: &str, calls: &[(&str, &str)]) -> EventData {
    EventData::AssistantMessage(AssistantTurn {
        step,
        message: AssistantMessage {
            content: content.to_owned(),
            reasoning_content: Some(String::new()),
            blocks: Vec::new(),
            tool_calls: calls
                .iter()
                .map(|(id, args)| ToolCall {
                    id: (*id).to_owned(),
                    name: "read_file".to_owned(),
                    arguments: (*args).to_owned(),
                })
                .collect(),
        },
    })
}

fn result(call_id: &str, content: &str) -> EventData {
    EventData::ToolResult(ToolResult {
        call_id: call_id.to_owned(),
        name: "read_file".to_owned(),
        content: content.to_owned(),
        is_error: false,
        seen: None,
        images: Vec::new(),
    })
}

fn header_event(header: EpochHeader) -> EventData {
    EventData::RequestHeader(RequestHeader { reason: SnapshotReason::Initial, header })
}

fn log(data: Vec<EventData>) -> Vec<Event> {
    data.into_iter().enumerate().map(|(i, d)| event(i as u64, d)).collect()
}

// ---- codec ----------------------------------------------------------------------------------

#[test]
fn encoded_event_has_the_envelope_field_order() {
    let line = encode_event(&event(3, user("hi")));
    assert_eq!(line, r#"{"seq":3,"time":1003,"type":"user/message","data":{"text":"hi"}}"#);
}

#[test]
fn unknown_kind_is_rejected_with_line_and_supported_kinds() {
    let error = decode_event(r#"{"seq":0,"time":1,"type":"foo/bar","data":{}}"#, 7).unwrap_err();
    assert_eq!(error.line, 7);
    let text = error.to_string();
    assert!(
        text.starts_with(
            "line 7: unknown event kind `foo/bar`; this build supports: session/meta, turn/start"
        ),
        "{text}"
    );
}

#[test]
fn unknown_format_version_is_rejected_not_migrated() {
    let line = r#"{"seq":0,"time":1,"type":"session/meta","data":{"formatVersion":3,"sessionId":"s","workspace":"/w"}}"#;
    let error = decode_event(line, 1).unwrap_err();
    assert_eq!(error.kind, DecodeErrorKind::UnknownFormatVersion { found: 3 });
    assert!(error.to_string().contains("reads only version 0"));
}

#[test]
fn bad_payload_names_the_kind() {
    let error = decode_event(r#"{"seq":1,"time":1,"type":"step/start","data":{"step":"x"}}"#, 2)
        .unwrap_err();
    assert!(matches!(&error.kind, DecodeErrorKind::BadData { kind, .. } if kind == "step/start"));
}

#[test]
fn sandbox_fields_are_optional_so_logs_from_before_the_sandbox_still_decode() {
    let old_call = r#"{"seq":5,"time":1,"type":"tool/call","data":{"step":1,"callId":"c1","name":"run_command"}}"#;
    let EventData::ToolCall(call) = decode_event(old_call, 1).unwrap().data else { panic!() };
    assert!(!call.unconfined);
    let old_request = r#"{"seq":4,"time":1,"type":"approval/request","data":{"approvalId":"a","callId":"c1","tool":"run_command","summary":"run_command: ls"}}"#;
    let EventData::ApprovalRequest(request) = decode_event(old_request, 1).unwrap().data else {
        panic!()
    };
    assert_eq!(request.sandbox, None);
    // New fields are written only when they say something, and read back.
    let unconfined = ToolCallStarted {
        step: 1,
        call_id: "c1".into(),
        name: "run_command".into(),
        unconfined: true,
    };
    let line = encode_event(&event(5, EventData::ToolCall(unconfined.clone())));
    assert!(line.ends_with(r#""name":"run_command","unconfined":true}}"#), "{line}");
    assert_eq!(decode_event(&line, 1).unwrap().data, EventData::ToolCall(unconfined));
    let confined = EventData::ToolCall(ToolCallStarted {
        step: 1,
        call_id: "c1".into(),
        name: "run_command".into(),
        unconfined: false,
    });
    assert!(!encode_event(&event(5, confined)).contains("unconfined"));
    let decision = r#"{"seq":6,"time":1,"type":"approval/decision","data":{"approvalId":"a","decision":"allowUnconfined"}}"#;
    let EventData::ApprovalDecision(decision) = decode_event(decision, 1).unwrap().data else {
        panic!()
    };
    assert_eq!(decision.decision, ApprovalVerdict::AllowUnconfined);
}

#[test]
fn decode_log_numbers_lines_from_one() {
    let text = format!("{}\n{}\n", encode_event(&event(0, meta())), "{not json");
    assert_eq!(decode_log(&text).unwrap_err().line, 2);
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z \\n]{0,12}",
        any::<String>(),
        Just("{\"path\": \"a.rs\"}".to_owned()),
        Just("\u{1F600} \"quoted\" \\ tab\t".to_owned()),
    ]
}

fn usage() -> impl Strategy<Value = Usage> {
    (0u64..10_000, 0u64..10_000, 0u64..5000, 0u64..1000, any::<bool>()).prop_map(
        |(hit, miss, out, reasoning, writes)| Usage {
            prompt_tokens: hit + miss,
            cache_hit_tokens: hit,
            cache_miss_tokens: miss,
            completion_tokens: out + reasoning,
            reasoning_tokens: reasoning,
            // Anthropic's writes are part of the miss.
            cache_write_tokens: if writes { miss / 2 } else { 0 },
        },
    )
}

fn any_header() -> impl Strategy<Value = EpochHeader> {
    let tools = proptest::sample::subsequence(vec!["a", "b", "c", "d", "e"], 0..=5)
        .prop_shuffle()
        .prop_flat_map(|names| {
            let n = names.len();
            (Just(names), proptest::collection::vec(0u8..2, n))
        })
        .prop_map(|(names, variants)| {
            names
                .iter()
                .zip(variants)
                .map(|(name, v)| tool(name, &format!("{name} v{v}")))
                .collect()
        });
    let system = proptest::collection::vec(prop_oneof!["base", "rules", "x", "y", ""], 0..6)
        .prop_map(|lines| if lines.is_empty() { None } else { Some(lines.join("\n")) });
    let cfg = (prop_oneof!["m1", "m2"], any::<bool>(), proptest::option::of(0.0f64..2.0)).prop_map(
        |(model, thinking, temperature)| LlmCallConfig { thinking, temperature, ..config(&model) },
    );
    (cfg, system, tools).prop_map(|(config, system, tools)| EpochHeader::new(config, system, tools))
}

fn any_event_data() -> impl Strategy<Value = EventData> {
    let a = prop_oneof![
        Just(meta()),
        (1u64..9).prop_map(|turn| EventData::TurnStart(TurnStart { turn })),
        (1u64..9, proptest::option::of(text())).prop_map(|(turn, error)| EventData::TurnEnd(
            TurnEnd { turn, reason: StopReason::MaxSteps, error }
        )),
        (0u64..9, 0.0f64..2.0).prop_map(|(steps, cost)| EventData::TurnLimit(TurnLimit {
            limit: if steps % 2 == 0 { LimitKind::MaxSteps } else { LimitKind::MaxCost },
            value: steps.into(),
            spent: serde_json::Number::from_f64(cost).unwrap(),
        })),
        text().prop_map(|t| user(&t)),
        text().prop_map(|text| EventData::SteeringMessage(SteeringMessage { text })),
        (text(), proptest::option::of(text())).prop_map(|(text, source)| {
            EventData::ContextMessage(ContextMessage {
                text,
                source,
                instructions: None,
                files: None,
            })
        }),
        (1u64..9, 1u64..9).prop_map(|(step, turn)| EventData::StepStart(StepStart { step, turn })),
        any_header().prop_map(header_event),
        (any_header(), any_header()).prop_filter_map("no delta", |(a, b)| diff_header(&a, &b)
            .map(EventData::RequestHeaderDelta)),
        (text(), 0u64..99).prop_map(|(sha256, bytes)| EventData::RequestSent(RequestSent {
            adapter: "x".to_owned(),
            sha256,
            bytes
        })),
    ];
    let b = prop_oneof![
        (text(), 0u32..3).prop_map(|(fragment, index)| EventData::AssistantChunk(AssistantChunk {
            step: 1,
            delta: ChunkDelta::ToolArgs { index, fragment }
        })),
        (text(), 0u8..3).prop_map(|(text, kind)| EventData::AssistantChunk(AssistantChunk {
            step: 2,
            delta: match kind {
                0 => ChunkDelta::Reasoning { text },
                1 => ChunkDelta::ReasoningSignature { signature: text },
                _ => ChunkDelta::RedactedReasoning { data: text },
            }
        })),
        (
            text(),
            text(),
            proptest::option::of(text()),
            proptest::option::of(text()),
            proptest::option::of(text())
        )
            .prop_map(|(content, args, reasoning, signature, redacted)| {
                let mut data = assistant(1, &content, &[("c1", &args)]);
                if let EventData::AssistantMessage(turn) = &mut data {
                    if let Some(signature) = signature {
                        let bytes = reasoning.as_ref().map_or(0, |text| text.len() as u64);
                        turn.message.blocks.push(ContentBlock::Thinking { bytes, signature });
                    }
                    if let Some(data) = redacted {
                        turn.message.blocks.push(ContentBlock::RedactedThinking { data });
                    }
                    turn.message.blocks.push(ContentBlock::Text { bytes: content.len() as u64 });
                    turn.message.blocks.push(ContentBlock::ToolUse);
                    turn.message.reasoning_content = reasoning;
                }
                data
            }),
        (text(), any::<bool>()).prop_map(|(content, is_error)| EventData::ToolResult(ToolResult {
            call_id: "c1".into(),
            name: "t".into(),
            content,
            is_error,
            seen: None,
            images: Vec::new(),
        })),
        (text(), proptest::option::of(text()), any::<bool>()).prop_map(
            |(step, explanation, done)| {
                let status = if done { PlanStatus::Completed } else { PlanStatus::InProgress };
                EventData::PlanUpdate(PlanUpdate {
                    call_id: "c1".into(),
                    explanation,
                    plan: vec![PlanEntry { step, status }],
                })
            }
        ),
        (text(), usage()).prop_map(|(finish_reason, usage)| EventData::StepEnd(StepEnd {
            step: 1,
            finish_reason,
            usage
        })),
        (text(), any::<bool>()).prop_map(|(error, cancelled)| EventData::StepError(StepError {
            step: 1,
            error,
            cancelled
        })),
        (text(), 0u64..9).prop_map(|(summary, n)| EventData::CompactSummary(CompactSummary {
            profile: None,
            wire: None,
            model: "m".into(),
            max_tokens: n as u32,
            summary
        })),
        (0u64..9, 0u64..9, text()).prop_map(|(start, end, text)| EventData::SurfaceReplace(
            SurfaceReplace { start, end, node: SurfaceNode::Summary { text } }
        )),
        Just(EventData::ApprovalDecision(ApprovalDecision {
            approval_id: "a".into(),
            decision: ApprovalVerdict::AllowAlways
        })),
        (proptest::option::of(1u64..9), proptest::collection::vec(text(), 0..3), any::<bool>())
            .prop_map(|(step, changed, incomplete)| EventData::WorkspaceCheckpoint(
                WorkspaceCheckpoint {
                    step,
                    reason: if step.is_some() {
                        CheckpointReason::Step
                    } else {
                        CheckpointReason::TurnEnd
                    },
                    root: "ab".repeat(32),
                    files: changed.len() as u64,
                    too_large: changed
                        .iter()
                        .map(|path| TooLargeFile { path: path.clone(), size: 1 << 24 })
                        .collect(),
                    changed,
                    incomplete: incomplete.then(|| "disk full".to_owned()),
                }
            )),
        (proptest::option::of(1u64..9), proptest::collection::vec(text(), 0..3), any::<bool>())
            .prop_map(|(to_step, paths, files)| EventData::WorkspaceRewind(WorkspaceRewind {
                from_session: "parent".into(),
                to_step,
                checkpoint: Some("cd".repeat(32)),
                before: files.then(|| "ef".repeat(32)),
                restored: paths.clone(),
                created: paths.clone(),
                deleted: paths,
                forced: files,
                conversation: to_step.is_some(),
                files,
            })),
    ];
    prop_oneof![a, b]
}

proptest! {
    #[test]
    fn log_lines_round_trip(data in proptest::collection::vec(any_event_data(), 1..20)) {
        let events = log(data);
        let text: String = events.iter().map(|e| encode_event(e) + "\n").collect();
        prop_assert_eq!(decode_log(&text).unwrap(), events);
    }
}

// ---- header laws ----------------------------------------------------------------------------

proptest! {
    #[test]
    fn applying_a_diff_reproduces_the_next_header(prev in any_header(), next in any_header()) {
        if let Some(delta) = diff_header(&prev, &next) {
            prop_assert_eq!(apply_header_delta(&prev, &delta).unwrap(), next.clone());
        }
        // The writer's plan always yields a log that folds to `next`.
        let folded = match plan_header_event(Some(&prev), &next, false) {
            HeaderPlan::Unchanged => prev.clone(),
            HeaderPlan::Delta(delta) => apply_header_delta(&prev, &delta).unwrap(),
            HeaderPlan::Snapshot(reason) => {
                prop_assert_eq!(reason, SnapshotReason::Fallback);
                next.clone()
            }
        };
        prop_assert_eq!(folded, next);
    }

    #[test]
    fn fold_over_any_header_history_equals_the_last_header(
        headers in proptest::collection::vec(any_header(), 1..8)
    ) {
        let mut data = vec![meta()];
        let mut previous: Option<EpochHeader> = None;
        for header in &headers {
            match plan_header_event(previous.as_ref(), header, previous.is_none()) {
                HeaderPlan::Unchanged => {}
                HeaderPlan::Delta(delta) => data.push(EventData::RequestHeaderDelta(*delta)),
                HeaderPlan::Snapshot(reason) => data.push(EventData::RequestHeader(RequestHeader {
                    reason,
                    header: header.clone(),
                })),
            }
            previous = Some(header.clone());
        }
        let events = log(data);
        prop_assert_eq!(fold_request_header(&events), headers.last().cloned());
    }
}

#[test]
fn pure_tool_reordering_needs_a_fallback_snapshot() {
    let prev = EpochHeader::new(config("m"), None, vec![tool("a", "x"), tool("b", "y")]);
    let next = EpochHeader::new(config("m"), None, vec![tool("b", "y"), tool("a", "x")]);
    assert_eq!(diff_header(&prev, &next), None);
    assert_eq!(
        plan_header_event(Some(&prev), &next, false),
        HeaderPlan::Snapshot(SnapshotReason::Fallback)
    );
}

#[test]
fn system_delta_trims_common_prefix_and_suffix_lines() {
    let prev = EpochHeader::new(config("m"), Some("a\nb\nc\nd".into()), vec![]);
    let next = EpochHeader::new(config("m"), Some("a\nB\nB2\nd".into()), vec![]);
    let delta = diff_header(&prev, &next).unwrap();
    assert_eq!(
        delta.system,
        Some(SystemDelta { keep_prefix: 1, keep_suffix: 1, lines: vec!["B".into(), "B2".into()] })
    );
    assert_eq!(delta.tools, None);
    assert_eq!(delta.config, None);
}

#[test]
fn tools_delta_is_name_keyed() {
    let prev =
        EpochHeader::new(config("m"), None, vec![tool("a", "x"), tool("b", "y"), tool("c", "z")]);
    let next =
        EpochHeader::new(config("m"), None, vec![tool("a", "x2"), tool("c", "z"), tool("d", "w")]);
    let delta = diff_header(&prev, &next).unwrap().tools.unwrap();
    assert_eq!(delta.removed, vec!["b".to_owned()]);
    assert_eq!(delta.changed, vec![tool("a", "x2")]);
    assert_eq!(delta.added, vec![tool("d", "w")]);
}

#[test]
fn first_request_of_an_instance_always_anchors_a_snapshot() {
    let header = EpochHeader::new(config("m"), Some("s".into()), vec![]);
    assert_eq!(
        plan_header_event(None, &header, true),
        HeaderPlan::Snapshot(SnapshotReason::Initial)
    );
    assert_eq!(
        plan_header_event(Some(&header), &header, true),
        HeaderPlan::Snapshot(SnapshotReason::Resume)
    );
    assert_eq!(plan_header_event(Some(&header), &header, false), HeaderPlan::Unchanged);
}

#[test]
fn empty_system_and_tools_are_canonically_absent() {
    let header = EpochHeader::new(config("m"), Some(String::new()), vec![]);
    assert_eq!(header.system, None);
    assert_eq!(header.tools, None);
    let json = serde_json::to_string(&header).unwrap();
    assert!(!json.contains("system") && !json.contains("tools"), "{json}");
}

#[test]
fn a_delta_before_any_snapshot_is_skipped_and_reported() {
    let delta = HeaderDelta { system: None, tools: None, config: Some(config("m")) };
    let events = log(vec![meta(), EventData::RequestHeaderDelta(delta)]);
    assert_eq!(fold_request_header(&events), None);
    let session = Session::from_events(events);
    assert_eq!(session.anomalies().len(), 1);
}

// ---- derivation -----------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Append(u8, String),
    Replace(usize, usize, String),
    Trim(usize, String),
    LogOnly,
    CloseStep,
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(
        prop_oneof![
            4 => (0u8..4, "[a-z]{0,6}").prop_map(|(kind, text)| Op::Append(kind, text)),
            1 => (0usize..50, 0usize..4, "[a-z]{0,6}").prop_map(|(a, len, t)| Op::Replace(a, len, t)),
            1 => (0usize..50, "[a-z]{0,6}").prop_map(|(a, t)| Op::Trim(a, t)),
            1 => Just(Op::LogOnly),
            1 => Just(Op::CloseStep),
        ],
        0..60,
    )
}

/// The reference derivation: a naive list of (node id, event) projected at the end.
fn naive_messages(events: &[Event]) -> Vec<Message> {
    let mut nodes: Vec<(u64, &Event)> = Vec::new();
    let mut held: Vec<(u64, &Event)> = Vec::new();
    let mut open = false;
    for event in events {
        match &event.data {
            EventData::StepStart(_) => open = true,
            EventData::StepEnd(_) | EventData::StepError(_) | EventData::TurnEnd(_) => {
                open = false;
                nodes.append(&mut held);
            }
            EventData::SteeringMessage(_) | EventData::ContextMessage(_) if open => {
                held.push((event.seq, event));
            }
            EventData::SurfaceReplace(replace) => {
                let start = nodes.iter().position(|(id, _)| *id == replace.start);
                let end = nodes.iter().position(|(id, _)| *id == replace.end);
                if let (Some(start), Some(end)) = (start, end)
                    && start <= end
                {
                    nodes.splice(start..=end, [(event.seq, event)]);
                }
            }
            _ if derive_event_message(event).is_some() => nodes.push((event.seq, event)),
            _ => {}
        }
    }
    nodes.iter().filter_map(|(_, event)| derive_event_message(event)).collect()
}

proptest! {
    #[test]
    fn cached_derivation_equals_a_fresh_derivation(ops in ops()) {
        let mut live = Session::new();
        live.append(event(0, meta())).unwrap();
        for op in ops {
            let seq = live.next_seq();
            let ids: Vec<u64> = live.surface().iter().map(|n| n.id).collect();
            let data = match op {
                Op::Append(0, t) => user(&t),
                Op::Append(1, t) => assistant(1, &t, &[]),
                Op::Append(2, t) => result("c", &t),
                Op::Append(_, t) => EventData::SteeringMessage(SteeringMessage { text: t }),
                Op::LogOnly => EventData::StepStart(StepStart { step: seq, turn: 1 }),
                Op::CloseStep => EventData::StepEnd(StepEnd {
                    step: seq,
                    finish_reason: "stop".into(),
                    usage: Usage::default(),
                }),
                Op::Replace(_, _, _) | Op::Trim(_, _) if ids.is_empty() => user("x"),
                Op::Replace(a, len, text) => {
                    let start = a % ids.len();
                    let end = (start + len).min(ids.len() - 1);
                    EventData::SurfaceReplace(SurfaceReplace {
                        start: ids[start],
                        end: ids[end],
                        node: SurfaceNode::Summary { text },
                    })
                }
                Op::Trim(a, content) => {
                    let id = ids[a % ids.len()];
                    EventData::SurfaceReplace(SurfaceReplace {
                        start: id,
                        end: id,
                        node: SurfaceNode::ToolResult(ToolResult {
                            call_id: "c".into(),
                            name: "t".into(),
                            content,
                            is_error: false,
                            seen: None,
                            images: Vec::new(),
                        }),
                    })
                }
            };
            let (mark, held) = (live.surface_mark(), live.messages());
            let generation = live.surface_generation();
            live.append(event(seq, data)).unwrap();
            // What joined since the mark, added to what was held, is the surface now — or
            // there is no such tail, exactly when a replace rewrote the surface.
            match live.messages_after(mark) {
                Some(tail) => {
                    prop_assert_eq!(live.surface_generation(), generation);
                    let joined: Vec<Arc<Message>> = held.into_iter().chain(tail).collect();
                    prop_assert_eq!(joined, live.messages());
                }
                None => prop_assert_ne!(live.surface_generation(), generation),
            }
            // Interleave reads with appends so the cache is exercised mid-stream.
            let first = live.messages();
            let second = live.messages();
            prop_assert!(first.iter().zip(&second).all(|(a, b)| Arc::ptr_eq(a, b)));
        }
        let cached: Vec<Message> = live.messages().iter().map(|m| (**m).clone()).collect();
        prop_assert_eq!(&cached, &naive_messages(live.events()));
        let refolded = Session::from_events(live.events().to_vec());
        prop_assert_eq!(refolded.messages(), live.messages());
        prop_assert_eq!(refolded.surface_generation(), live.surface_generation());
    }
}

#[test]
fn a_replace_keeps_untouched_projections_shared() {
    let mut session = Session::from_events(log(vec![meta(), user("a"), user("b"), user("c")]));
    let before = session.messages();
    let replace =
        SurfaceReplace { start: 1, end: 2, node: SurfaceNode::Summary { text: "s".into() } };
    session.append(event(4, EventData::SurfaceReplace(replace))).unwrap();
    let after = session.messages();
    assert_eq!(after.len(), 2);
    assert!(matches!(&*after[0], Message::User { content, .. } if content.ends_with('s')));
    assert!(Arc::ptr_eq(&before[2], &after[1]));
    assert_eq!(session.surface_generation(), 1);
    assert_eq!(session.surface()[0].id, 4);
}

#[test]
fn steering_during_an_open_step_joins_after_the_steps_results() {
    let mut events = tool_turn();
    // Steering logged while step 1 runs its tool: between the assistant's call and its result.
    events.insert(6, event(0, EventData::SteeringMessage(SteeringMessage { text: "mid".into() })));
    for (i, e) in events.iter_mut().enumerate() {
        e.seq = i as u64;
    }
    assert_eq!(check_log(&events), vec![]);
    let two = reconstruct_step(&events, 2).unwrap();
    let kinds: Vec<String> = two
        .request
        .messages
        .iter()
        .map(|m| match &**m {
            Message::User { content, .. } => format!("user:{content}"),
            Message::Assistant(_) => "assistant".to_owned(),
            Message::Tool { .. } => "tool".to_owned(),
            Message::System { .. } => "system".to_owned(),
        })
        .collect();
    assert_eq!(kinds, ["user:read a", "assistant", "tool", "user:mid", "user:steer"]);
    let live = Session::from_events(events.clone());
    assert_eq!(live.messages().len(), 6);
}

#[test]
fn append_refuses_a_seq_that_does_not_follow() {
    let mut session = Session::from_events(log(vec![meta()]));
    let error = session.append(event(5, user("x"))).unwrap_err();
    assert_eq!(error, SeqError { expected: 1, found: 5 });
    assert_eq!(session.events().len(), 1);
}

// ---- reconstruction and checks ------------------------------------------------------------

fn tool_turn() -> Vec<Event> {
    let header = EpochHeader::new(config("m"), Some("sys".into()), vec![tool("read_file", "r")]);
    let usage = Usage::default();
    log(vec![
        meta(),
        EventData::TurnStart(TurnStart { turn: 1 }),
        user("read a"),
        EventData::StepStart(StepStart { step: 1, turn: 1 }),
        header_event(header),
        assistant(1, "", &[("c1", "{\"path\":\"a\"}")]),
        EventData::ToolCall(ToolCallStarted {
            step: 1,
            call_id: "c1".into(),
            name: "read_file".into(),
            unconfined: false,
        }),
        result("c1", "A"),
        EventData::StepEnd(StepEnd { step: 1, finish_reason: "tool_calls".into(), usage }),
        EventData::SteeringMessage(SteeringMessage { text: "steer".into() }),
        EventData::StepStart(StepStart { step: 2, turn: 1 }),
        assistant(2, "done", &[]),
        EventData::StepEnd(StepEnd { step: 2, finish_reason: "stop".into(), usage }),
        EventData::TurnEnd(TurnEnd { turn: 1, reason: StopReason::Completed, error: None }),
    ])
}

#[test]
fn reconstruct_uses_events_before_the_step_start_and_the_carried_header() {
    let events = tool_turn();
    assert_eq!(check_log(&events), vec![]);
    let one = reconstruct_step(&events, 1).unwrap();
    assert_eq!(one.boundary_seq, 3);
    assert_eq!(one.header_events, vec![4]);
    assert_eq!(one.request.messages.len(), 1);
    let two = reconstruct_step(&events, 2).unwrap();
    assert_eq!(two.header_events, Vec::<u64>::new());
    assert_eq!(two.request.header, one.request.header);
    let ids: Vec<u64> = two.surface.iter().map(|n| n.id).collect();
    assert_eq!(ids, vec![2, 5, 7, 9]);
    assert_eq!(
        reconstruct(&events, 3).unwrap_err(),
        ReconstructError::StepOutOfRange { step: 3, last: 2 }
    );
}

#[test]
fn checks_find_an_unanswered_tool_call() {
    let mut events = tool_turn();
    events.remove(7);
    for (i, e) in events.iter_mut().enumerate() {
        e.seq = i as u64;
    }
    let found = check_log(&events);
    assert!(found.iter().any(|d| d.message.contains("`c1` unanswered")), "{found:?}");
}

#[test]
fn closing_events_answer_a_repeated_call_id_once_per_call() {
    // Found by the log_events fuzz target: closing_events took one result as the answer to
    // every call with its id, while check_log (and the loop) pair one result with one call, so
    // closing a log whose assistant message repeated an id left the log ill-formed.
    let events = log(vec![
        meta(),
        EventData::TurnStart(TurnStart { turn: 1 }),
        user("go"),
        EventData::StepStart(StepStart { step: 1, turn: 1 }),
        header_event(EpochHeader::new(config("m1"), None, vec![])),
        assistant(1, "", &[("c1", "{}"), ("c1", "{}")]),
        result("c1", "one"),
    ]);
    assert!(check_log(&events).iter().all(|d| d.severity == Severity::Open));
    let closing = Closing { reason: StopReason::Cancelled, error: "cut", tool_result: "cut" };
    let mut closed = events.clone();
    for data in closing_events(&events, closing) {
        closed.push(event(closed.len() as u64, data));
    }
    let kinds: Vec<_> = closed[events.len()..].iter().map(Event::kind).collect();
    assert_eq!(kinds, ["tool/result", "step/error", "turn/end"]);
    assert_eq!(check_log(&closed), vec![]);
}

#[test]
fn checks_find_a_header_after_the_first_response_event() {
    let mut events = tool_turn();
    let header = EpochHeader::new(config("m2"), None, vec![]);
    events.insert(6, event(0, header_event(header)));
    for (i, e) in events.iter_mut().enumerate() {
        e.seq = i as u64;
    }
    let found = check_log(&events);
    assert!(
        found.iter().any(|d| d.message.contains("after step 1's first response event")),
        "{found:?}"
    );
}

#[test]
fn checks_find_gaps_nesting_and_open_turns() {
    let mut events = tool_turn();
    events.truncate(6);
    events[2].seq = 9;
    let found = check_log(&events);
    assert!(found.iter().any(|d| d.message.contains("not contiguous")));
    assert!(
        found.iter().any(|d| d.severity == Severity::Open && d.message.contains("inside step 1"))
    );
    let nested = log(vec![meta(), EventData::StepStart(StepStart { step: 1, turn: 1 })]);
    assert!(check_log(&nested).iter().any(|d| d.message.contains("not open")));
}

#[test]
fn a_turn_limit_stands_between_steps_inside_its_turn() {
    let limit = || {
        EventData::TurnLimit(TurnLimit {
            limit: LimitKind::MaxSteps,
            value: 1u64.into(),
            spent: 1u64.into(),
        })
    };
    let reindex = |mut events: Vec<Event>| {
        for (i, e) in events.iter_mut().enumerate() {
            e.seq = i as u64;
        }
        events
    };
    // After step 1's end, before the turn's end: well-formed.
    let mut events = tool_turn();
    events.truncate(9);
    events.push(event(0, limit()));
    events.push(event(
        0,
        EventData::TurnEnd(TurnEnd { turn: 1, reason: StopReason::Limit, error: None }),
    ));
    assert_eq!(check_log(&reindex(events)), vec![]);
    // Inside a step, or after the turn ended: errors.
    let mut inside = tool_turn();
    inside.insert(6, event(0, limit()));
    let found = check_log(&reindex(inside));
    assert!(found.iter().any(|d| d.message == "turn/limit while step 1 is open"), "{found:?}");
    let mut after = tool_turn();
    after.push(event(0, limit()));
    let found = check_log(&reindex(after));
    assert!(found.iter().any(|d| d.message == "turn/limit outside a turn"), "{found:?}");
}

#[test]
fn a_steps_checkpoint_sits_inside_its_step_and_a_rewind_outside_every_turn() {
    let checkpoint = |step: Option<u64>, reason| {
        EventData::WorkspaceCheckpoint(WorkspaceCheckpoint {
            step,
            reason,
            root: "00".repeat(32),
            files: 1,
            changed: vec![],
            too_large: vec![],
            incomplete: None,
        })
    };
    let rewind = || {
        EventData::WorkspaceRewind(WorkspaceRewind {
            from_session: "parent".into(),
            to_step: Some(1),
            checkpoint: Some("00".repeat(32)),
            before: None,
            restored: vec![],
            created: vec![],
            deleted: vec![],
            forced: false,
            conversation: true,
            files: true,
        })
    };
    let with = |at: usize, data: EventData| {
        let mut events = tool_turn();
        events.insert(at, event(0, data));
        for (i, e) in events.iter_mut().enumerate() {
            e.seq = i as u64;
        }
        check_log(&events)
    };
    // After step 1's message, before its tool call; after the turn; a rewind after the turn.
    assert_eq!(with(6, checkpoint(Some(1), CheckpointReason::Step)), vec![]);
    assert_eq!(with(14, checkpoint(None, CheckpointReason::TurnEnd)), vec![]);
    assert_eq!(with(14, rewind()), vec![]);
    let found = with(6, checkpoint(Some(2), CheckpointReason::Step));
    assert!(found.iter().any(|d| d.message.contains("of step 2 outside that step")), "{found:?}");
    let found = with(10, checkpoint(Some(1), CheckpointReason::Step));
    assert!(found.iter().any(|d| d.message.contains("of step 1 outside that step")), "{found:?}");
    let found = with(6, checkpoint(None, CheckpointReason::TurnEnd));
    assert!(found.iter().any(|d| d.message.contains("inside step 1")), "{found:?}");
    let found = with(6, checkpoint(Some(1), CheckpointReason::Rewind));
    assert!(found.iter().any(|d| d.message.contains("its reason is not step")), "{found:?}");
    let found = with(2, rewind());
    assert!(found.iter().any(|d| d.message == "workspace/rewind inside a turn"), "{found:?}");
}

#[test]
fn a_crafted_system_delta_is_an_error_not_a_panic() {
    let header = EpochHeader::new(config("m"), Some("a\nb".into()), vec![]);
    let delta = HeaderDelta {
        system: Some(SystemDelta { keep_prefix: usize::MAX, keep_suffix: 1, lines: vec![] }),
        tools: None,
        config: None,
    };
    assert!(matches!(
        apply_header_delta(&header, &delta),
        Err(HeaderDeltaError::SystemOutOfRange { have: 2, .. })
    ));
    let events =
        log(vec![meta(), header_event(header.clone()), EventData::RequestHeaderDelta(delta)]);
    assert_eq!(fold_request_header(&events), Some(header));
    assert_eq!(Session::from_events(events).anomalies().len(), 1);
}

#[test]
fn unknown_fields_in_a_surface_payload_are_rejected() {
    let line = r#"{"seq":1,"time":1,"type":"user/message","data":{"text":"hi","hidden":"x"}}"#;
    assert!(matches!(decode_event(line, 2).unwrap_err().kind, DecodeErrorKind::BadData { .. }));
}

#[test]
fn canonical_json_sorts_keys_at_every_depth_whatever_the_map_keeps() {
    // Built in reverse order: a map that keeps insertion order (serde_json's `preserve_order`)
    // would print it so; canonical_json prints sorted keys either way.
    let mut inner = serde_json::Map::new();
    inner.insert("z".to_owned(), serde_json::json!(1));
    inner.insert("a".to_owned(), serde_json::json!([{"y": 1, "b": 2}]));
    let mut outer = serde_json::Map::new();
    outer.insert("type".to_owned(), serde_json::json!("object"));
    outer.insert("properties".to_owned(), serde_json::Value::Object(inner));
    let text = serde_json::to_string(&canonical_json(serde_json::Value::Object(outer))).unwrap();
    assert_eq!(text, r#"{"properties":{"a":[{"b":2,"y":1}],"z":1},"type":"object"}"#);
}

#[test]
fn a_tool_joining_in_the_middle_is_a_delta_that_resends_the_tail() {
    let prev = EpochHeader::new(config("m"), None, vec![tool("a", "x"), tool("c", "z")]);
    let next =
        EpochHeader::new(config("m"), None, vec![tool("a", "x"), tool("b", "y"), tool("c", "z")]);
    let delta = diff_header(&prev, &next).expect("an insertion is a delta");
    let tools = delta.tools.clone().expect("a tools delta");
    assert_eq!(tools.removed, vec!["c".to_owned()]);
    assert_eq!(tools.added, vec![tool("b", "y"), tool("c", "z")]);
    assert_eq!(apply_header_delta(&prev, &delta), Ok(next.clone().canonical()));
}

#[test]
fn the_usage_view_names_the_mcp_servers_whose_tools_changed() {
    let prev =
        EpochHeader::new(config("m"), None, vec![tool("edit_file", "x"), tool("fx__a", "y")]);
    let next = EpochHeader::new(
        config("m"),
        None,
        vec![tool("edit_file", "x"), tool("fx__a", "y2"), tool("gy__b", "z")],
    );
    assert_eq!(
        crate::usage::changed_tool_servers(Some(&prev), Some(&next)),
        vec!["fx".to_owned(), "gy".to_owned()]
    );
    assert!(crate::usage::changed_tool_servers(Some(&prev), Some(&prev)).is_empty());
}

/// The kinds a rebuild from a loaded session skips, each as some event.
fn skipped_kinds() -> impl Strategy<Value = EventData> {
    prop_oneof![
        (1u64..9, text()).prop_map(|(step, name)| EventData::ToolCall(ToolCallStarted {
            step,
            call_id: "c1".into(),
            name,
            unconfined: false,
        })),
        text()
            .prop_map(|text| EventData::ToolProgress(ToolProgress { call_id: "c1".into(), text })),
        (1u64..9, text()).prop_map(|(step, error)| EventData::LlmRetry(LlmRetry {
            step,
            attempt: 1,
            delay_ms: 5,
            error,
        })),
        text().prop_map(|summary| EventData::ApprovalRequest(ApprovalRequest {
            approval_id: "a".into(),
            call_id: "c1".into(),
            tool: "t".into(),
            summary,
            sandbox: None,
        })),
    ]
}

proptest! {
    /// A rebuild from a loaded session (its step index, only the events that shape requests)
    /// equals the fresh fold over every event before the boundary, for every step — and so does
    /// one sharing the session's messages, which takes every node still on the surface from
    /// the surface (the same `Arc`), not from a projection of its own.
    #[test]
    fn a_session_rebuild_equals_the_full_fold(
        data in proptest::collection::vec(prop_oneof![4 => any_event_data(), 1 => skipped_kinds()], 1..60)
    ) {
        let session = Session::from_events(log(data));
        for index in session.steps() {
            let full = reconstruct_step(session.events(), index.step);
            let indexed = reconstruct_session_step(&session, index.step);
            prop_assert_eq!(&indexed, &full);
            let shared = reconstruct_session_step_shared(&session, index.step);
            prop_assert_eq!(&shared, &full);
            let Ok(shared) = shared else { continue };
            for node in &shared.surface {
                if let Some(live) = session.surface().iter().find(|live| live.id == node.id) {
                    prop_assert!(Arc::ptr_eq(&live.message, &node.message), "node {} copied", node.id);
                }
            }
        }
        let beyond = session.last_step() + 1;
        prop_assert_eq!(
            reconstruct_session_step(&session, beyond),
            reconstruct_step(session.events(), beyond)
        );
        prop_assert_eq!(
            reconstruct_session_step_shared(&session, beyond),
            reconstruct_step(session.events(), beyond)
        );
    }
}

/// Every event [`any_event_data`] makes, and those only the usage view reads: an
/// instructions note (it stands until the system prompt is next rewritten) and resume and
/// fallback snapshots.
fn usage_event_data() -> impl Strategy<Value = EventData> {
    let note = text().prop_map(|text| {
        EventData::ContextMessage(ContextMessage {
            text,
            source: Some(INSTRUCTIONS_SOURCE.to_owned()),
            instructions: None,
            files: None,
        })
    });
    let reason = prop_oneof![Just(SnapshotReason::Resume), Just(SnapshotReason::Fallback)];
    let snapshot = (any_header(), reason)
        .prop_map(|(header, reason)| EventData::RequestHeader(RequestHeader { reason, header }));
    prop_oneof![6 => any_event_data(), 1 => note, 1 => snapshot]
}

proptest! {
    /// The usage fold advanced over a growing log, a few events at a time (as a loaded
    /// session's usage view is kept), has the rows of a fold over the whole log at every point.
    #[test]
    fn the_usage_fold_advanced_in_pieces_equals_a_whole_fold(
        data in proptest::collection::vec(usage_event_data(), 1..60),
        cuts in proptest::collection::vec(1usize..8, 1..20),
    ) {
        let events = log(data);
        let mut fold = UsageFold::default();
        let mut at = 0;
        for cut in cuts.iter().cycle() {
            at = (at + cut).min(events.len());
            fold.advance(&events[..at]);
            let whole = usage_rows(&events[..at]);
            prop_assert_eq!(fold.rows(), whole.as_slice());
            let header = fold_request_header(&events[..at]);
            prop_assert_eq!(fold.header(), header.as_ref());
            if at == events.len() {
                break;
            }
        }
    }
}

#[test]
fn the_kinds_a_rebuild_skips_change_neither_fold() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    for _ in 0..64 {
        let data = skipped_kinds().new_tree(&mut runner).unwrap().current();
        assert!(!crate::surface::shapes_request(&data), "{}", data.kind());
        let base = Session::from_events(log(vec![
            meta(),
            header_event(EpochHeader::new(config("m1"), Some("s".into()), Vec::new())),
            user("u"),
            EventData::StepStart(StepStart { step: 1, turn: 1 }),
        ]));
        let mut with = base.clone();
        with.append(event(with.next_seq(), data)).unwrap();
        assert_eq!(with.messages(), base.messages());
        assert_eq!(with.header(), base.header());
        assert_eq!(with.surface_generation(), base.surface_generation());
        // The open step stays open: a steering message still waits for it to close.
        let steer = EventData::SteeringMessage(SteeringMessage { text: "s".into() });
        let mut a = base.clone();
        a.append(event(a.next_seq(), steer.clone())).unwrap();
        with.append(event(with.next_seq(), steer)).unwrap();
        assert_eq!(with.messages(), a.messages());
    }
}

#[test]
fn a_mark_of_another_fold_gets_no_tail() {
    let events = log(vec![meta(), user("a")]);
    let one = Session::from_events(events.clone());
    let two = Session::from_events(events);
    assert!(one.messages_after(one.surface_mark()).is_some_and(|tail| tail.is_empty()));
    assert_eq!(two.messages_after(one.surface_mark()), None);
}

#[test]
fn steering_and_notes_join_the_next_step_and_only_it() {
    let steer = |text: &str| EventData::SteeringMessage(SteeringMessage { text: text.into() });
    let step = |step| EventData::StepStart(StepStart { step, turn: 1 });
    let events = log(vec![
        meta(),                                      // 0
        EventData::TurnStart(TurnStart { turn: 1 }), // 1
        EventData::UserMessage(UserMessage {
            text: "go".into(),
            command: None,
            images: Vec::new(),
        }), // 2
        steer("early"),                              // 3
        step(1),                                     // 4
        steer("during one"),                         // 5
        steer("also during one"),                    // 6
        step(2),                                     // 7
        step(3),                                     // 8
    ]);
    assert_eq!(joined_at(&events, 4), vec![3]);
    assert_eq!(joined_at(&events, 7), vec![5, 6]);
    assert_eq!(joined_at(&events, 8), Vec::<u64>::new());
    // Not a step/start, or past the end: nothing joined there.
    assert_eq!(joined_at(&events, 5), Vec::<u64>::new());
    assert_eq!(joined_at(&events, 99), Vec::<u64>::new());
    // A suffix that reaches back to the previous step/start answers the same.
    assert_eq!(joined_at(&events[4..], 7), vec![5, 6]);
}

#[test]
fn an_event_decodes_from_parts_with_the_log_checks() {
    let meta = serde_json::json!({"formatVersion": 99, "sessionId": "s", "workspace": "/w"});
    let error = Event::from_parts(0, 1, "session/meta", meta).unwrap_err();
    assert!(matches!(error, DecodeErrorKind::UnknownFormatVersion { found: 99 }));
    let error = Event::from_parts(1, 1, "no/such", serde_json::json!({})).unwrap_err();
    assert!(matches!(error, DecodeErrorKind::UnknownKind { .. }));
    let line = r#"{"seq":1,"time":5,"type":"steering/message","data":{"text":"hi"}}"#;
    let event: Event = serde_json::from_value(serde_json::from_str(line).unwrap()).unwrap();
    assert_eq!(event, decode_event(line, 1).unwrap());
    assert_eq!(encode_event(&event), line);
}

#[test]
fn each_hook_run_sits_where_its_event_happens() {
    use crate::{HookEvent, HookOutcome, HookRun};
    let run = |event: HookEvent, call: Option<&str>| {
        EventData::HookRun(HookRun {
            hook: "h".into(),
            source: "/u/c.toml:1".into(),
            event,
            call_id: call.map(Into::into),
            tool: call.map(|_| "read_file".into()),
            outcome: HookOutcome::Ok,
            exit_code: Some(0),
            error: None,
            duration_ms: 1,
            stderr: String::new(),
            stdout_bytes: 0,
            stdout_truncated: false,
            stderr_truncated: false,
            invalid_utf8: false,
        })
    };
    let with = |at: usize, data: EventData| {
        let mut events = tool_turn();
        events.insert(at, event(0, data));
        for (i, e) in events.iter_mut().enumerate() {
            e.seq = i as u64;
        }
        check_log(&events)
    };
    // Before the turn; before call c1 runs and after its result; between steps; after it all.
    assert_eq!(with(1, run(HookEvent::SessionStart, None)), vec![]);
    assert_eq!(with(1, run(HookEvent::UserPromptSubmit, None)), vec![]);
    assert_eq!(with(6, run(HookEvent::PreToolUse, Some("c1"))), vec![]);
    assert_eq!(with(8, run(HookEvent::PostToolUse, Some("c1"))), vec![]);
    assert_eq!(with(9, run(HookEvent::Stop, None)), vec![]);
    assert_eq!(with(9, run(HookEvent::PreCompact, None)), vec![]);
    assert_eq!(with(14, run(HookEvent::PreCompact, None)), vec![]);
    let wrong = [
        (2, run(HookEvent::UserPromptSubmit, None), "(UserPromptSubmit) inside a turn"),
        (8, run(HookEvent::PreToolUse, Some("c1")), "does not wait for"),
        (6, run(HookEvent::PreToolUse, None), "names no tool call"),
        (2, run(HookEvent::PostToolUse, Some("c1")), "(PostToolUse) outside a step"),
        (14, run(HookEvent::Stop, None), "(Stop) outside a turn"),
        (6, run(HookEvent::PreCompact, None), "(PreCompact) inside a step"),
    ];
    for (at, data, message) in wrong {
        let found = with(at, data);
        assert!(found.iter().any(|d| d.message.contains(message)), "{message}: {found:?}");
    }
}

#[test]
fn checks_find_an_image_reference_that_names_no_sha256_or_an_unknown_media_type() {
    let image = |sha256: &str, media_type: &str| crate::ImageRef {
        sha256: sha256.to_owned(),
        size: 10,
        media_type: media_type.to_owned(),
        name: None,
    };
    let prompt =
        |images| EventData::UserMessage(UserMessage { text: "see".into(), command: None, images });
    let log = |images| {
        vec![
            event(0, meta()),
            event(1, EventData::TurnStart(TurnStart { turn: 1 })),
            event(2, prompt(images)),
        ]
    };
    let good = log(vec![image(&"ab".repeat(32), "image/png")]);
    assert!(
        check_log(&good).iter().all(|d| d.severity == Severity::Open),
        "{:?}",
        check_log(&good)
    );
    let bad =
        log(vec![image("../../etc/passwd", "image/png"), image(&"ab".repeat(32), "text/html")]);
    let found: Vec<String> = check_log(&bad).iter().map(ToString::to_string).collect();
    assert!(
        found
            .iter()
            .any(|d| d.contains("seq 2") && d.contains("not named by a lowercase hex SHA-256")),
        "{found:?}"
    );
    assert!(found.iter().any(|d| d.contains("text/html")), "{found:?}");
    // A prompt's images round-trip through the line codec; a prompt without any is written as
    // before (no `images` key).
    let line = encode_event(&good[2]);
    assert!(line.contains("\"images\":[{\"sha256\""), "{line}");
    assert_eq!(decode_event(&line, 3).unwrap(), good[2]);
    assert!(!encode_event(&event(2, user("plain"))).contains("images"));
}
