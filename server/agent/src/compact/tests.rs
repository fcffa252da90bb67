//! Unit tests of the pressure decision, the trim and the compaction cut.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use dsh_session::{
    AssistantMessage, AssistantTurn, CompactStart, Event, EventData, Message, SessionMeta, StepEnd,
    StepStart, ToolCall, ToolResult, TurnEnd, TurnStart, Usage, UserMessage, check_log,
};

use super::summary::is_valid_cut;
use super::*;

/// Builds a log event by event, with contiguous seqs.
#[derive(Default)]
struct Log {
    events: Vec<Event>,
    turn: u64,
    step: u64,
}

impl Log {
    fn new() -> Log {
        let mut log = Log::default();
        log.push(EventData::SessionMeta(SessionMeta {
            format_version: 0,
            session_id: "s".to_owned(),
            workspace: "/w".to_owned(),
            forked_from: None,
            pin: None,
            parent: None,
        }));
        log
    }

    fn push(&mut self, data: EventData) -> u64 {
        let seq = self.events.len() as u64;
        self.events.push(Event { seq, time: 0, data });
        seq
    }

    fn turn(&mut self, prompt: &str) {
        self.turn += 1;
        self.push(EventData::TurnStart(TurnStart { turn: self.turn }));
        self.push(EventData::UserMessage(UserMessage {
            text: prompt.to_owned(),
            command: None,
            images: Vec::new(),
        }));
    }

    fn end_turn(&mut self) {
        let end =
            TurnEnd { turn: self.turn, reason: dsh_session::StopReason::Completed, error: None };
        self.push(EventData::TurnEnd(end));
    }

    /// One step: an assistant message calling tools with these result sizes (none: a final
    /// answer), the results, and `step/end` with `prompt` tokens.
    fn step(&mut self, results: &[usize], prompt: u64) {
        self.step += 1;
        let step = self.step;
        self.push(EventData::StepStart(StepStart { step, turn: self.turn }));
        let calls: Vec<ToolCall> = (0..results.len())
            .map(|index| ToolCall {
                id: format!("call-{step}-{index}"),
                name: "read_file".to_owned(),
                arguments: "{}".to_owned(),
            })
            .collect();
        let message = AssistantMessage {
            content: if calls.is_empty() { "done".to_owned() } else { String::new() },
            reasoning_content: None,
            blocks: Vec::new(),
            tool_calls: calls.clone(),
        };
        self.push(EventData::AssistantMessage(AssistantTurn { step, message }));
        for (call, size) in calls.iter().zip(results) {
            self.push(EventData::ToolResult(ToolResult {
                call_id: call.id.clone(),
                name: call.name.clone(),
                content: "x".repeat(*size),
                is_error: false,
                seen: None,
                images: Vec::new(),
            }));
        }
        let usage = Usage { prompt_tokens: prompt, completion_tokens: 10, ..Usage::default() };
        let finish = if calls.is_empty() { "stop" } else { "tool_calls" }.to_owned();
        self.push(EventData::StepEnd(StepEnd { step, finish_reason: finish, usage }));
    }

    fn session(&self) -> Session {
        Session::from_events(self.events.clone())
    }
}

fn config() -> ContextConfig {
    ContextConfig {
        trim_min_bytes: 1000,
        trim_keep_head_bytes: 100,
        trim_keep_tail_bytes: 50,
        trim_min_gain: 0.0,
        keep_recent_turns: 1,
        ..ContextConfig::with_window(10_000)
    }
}

#[test]
fn trim_keeps_head_and_tail_on_char_boundaries_and_says_what_was_cut() {
    let text = format!("{}{}{}", "h".repeat(99), "é".repeat(500), "t".repeat(49));
    let trimmed = trim_content(&text, &config()).unwrap();
    assert!(trimmed.starts_with(&"h".repeat(99)));
    // The tail's first character would be split: the cut moves past it.
    assert!(trimmed.ends_with(&format!("context ...]\n{}", "t".repeat(49))), "{trimmed}");
    assert!(trimmed.contains("[... trimmed 1000 bytes (1 lines) of this tool result"), "{trimmed}");
    assert_eq!(trim_content("short", &config()), None);
}

#[test]
fn below_the_trim_threshold_nothing_happens() {
    let mut log = Log::new();
    log.turn("go");
    log.step(&[5000], 1000);
    log.step(&[], 5980);
    assert_eq!(decide(&log.session(), &config()), Decision::None);
}

#[test]
fn trimming_batches_every_large_answered_result_but_not_the_unseen_ones() {
    let mut log = Log::new();
    log.turn("go");
    log.step(&[5000, 200, 3000], 1000);
    log.step(&[4000], 6500);
    let session = log.session();
    // The last step's result has not been seen by the model yet: it stays.
    let ids: Vec<u64> = session
        .surface()
        .iter()
        .filter(|n| matches!(&*n.message, Message::Tool { content, .. } if content.len() >= 3000))
        .map(|n| n.id)
        .collect();
    assert_eq!(decide(&session, &config()), Decision::Trim(ids[..2].to_vec()));
}

#[test]
fn a_trimmed_result_is_never_trimmed_again() {
    let mut log = Log::new();
    log.turn("go");
    log.step(&[5000], 1000);
    log.step(&[], 6500);
    let session = log.session();
    let Decision::Trim(ids) = decide(&session, &config()) else { panic!("expected a trim") };
    for data in trim_events(&session, &ids, &config()) {
        log.push(data);
    }
    // Acted on: no decision until the next step ends, and then nothing left to trim.
    assert_eq!(decide(&log.session(), &config()), Decision::None);
    log.end_turn();
    log.turn("again");
    log.step(&[], 6600);
    assert_eq!(decide(&log.session(), &config()), Decision::None);
    assert!(check_log(&log.events).iter().all(|d| d.severity != dsh_session::Severity::Error));
}

#[test]
fn a_trim_that_frees_too_little_waits_for_compaction() {
    let mut log = Log::new();
    log.turn("go");
    log.step(&[1200], 1000);
    log.step(&[], 6500);
    let stingy = ContextConfig { trim_min_gain: 0.9, ..config() };
    assert_eq!(decide(&log.session(), &stingy), Decision::None);
}

#[test]
fn compaction_keeps_the_latest_turns_and_never_splits_a_call_from_its_result() {
    let mut log = Log::new();
    log.turn("one");
    for _ in 0..3 {
        // Below the trim limit: compaction is the only relief.
        log.step(&[900], 1000);
    }
    log.step(&[], 1000);
    log.end_turn();
    log.turn("two");
    log.step(&[100, 100], 1000);
    log.step(&[], 8500);
    let session = log.session();
    let Decision::Compact { start, end } = decide(&session, &config()) else {
        panic!("expected a compaction")
    };
    let surface = session.surface();
    let end_position = surface.iter().position(|n| n.id == end).unwrap();
    assert_eq!(start, surface[0].id);
    // The cut lands on turn two's prompt.
    assert!(
        matches!(&*surface[end_position + 1].message, Message::User { content, .. } if content == "two")
    );
    assert!(is_valid_cut(&surface[..=end_position]));
}

#[test]
fn at_the_compaction_threshold_a_trim_that_frees_enough_comes_first() {
    let mut log = Log::new();
    log.turn("one");
    log.step(&[2000], 1000);
    log.step(&[], 1000);
    log.end_turn();
    log.turn("two");
    log.step(&[], 8500);
    assert!(matches!(decide(&log.session(), &config()), Decision::Trim(ids) if ids.len() == 1));
}

#[test]
fn right_after_a_rewrite_only_an_emergency_compacts() {
    let mut log = Log::new();
    log.turn("one");
    log.step(&[500], 1000);
    log.step(&[], 1000);
    log.end_turn();
    log.turn("two");
    log.push(EventData::SurfaceReplace(dsh_session::SurfaceReplace {
        start: 2,
        end: 2,
        node: SurfaceNode::Summary { text: "s".to_owned() },
    }));
    log.step(&[], 8500);
    assert_eq!(decide(&log.session(), &config()), Decision::None);
    log.end_turn();
    log.turn("three");
    log.step(&[], 9500);
    assert!(matches!(decide(&log.session(), &config()), Decision::Compact { .. }));
}

#[test]
fn in_one_long_turn_the_cut_moves_past_tool_results() {
    let mut log = Log::new();
    log.turn("one");
    for _ in 0..6 {
        log.step(&[300, 300], 1000);
    }
    log.step(&[], 8500);
    let session = log.session();
    let (_, end) = plan_compaction(&session, &config()).unwrap();
    let surface = session.surface();
    let cut = surface.iter().position(|n| n.id == end).unwrap() + 1;
    assert!(cut >= 2 && cut < surface.len());
    assert!(is_valid_cut(&surface[..cut]));
    assert!(!matches!(&*surface[cut].message, Message::Tool { .. }));
}

#[test]
fn a_failed_attempt_is_retried_only_in_a_later_turn() {
    let mut log = Log::new();
    log.turn("one");
    log.step(&[], 1000);
    log.end_turn();
    log.turn("two");
    log.step(&[], 9000);
    log.end_turn();
    log.turn("three");
    assert!(matches!(decide(&log.session(), &config()), Decision::Compact { .. }));
    log.push(EventData::CompactStart(CompactStart {
        reason: "pressure".to_owned(),
        tokens_before: 9000,
    }));
    assert_eq!(decide(&log.session(), &config()), Decision::None);
    log.end_turn();
    log.turn("four");
    assert!(matches!(decide(&log.session(), &config()), Decision::Compact { .. }));
}

#[test]
fn the_summarize_request_has_no_tools_thinking_off_and_the_rendered_region() {
    let mut log = Log::new();
    log.turn("read it");
    log.step(&[5000], 1000);
    log.step(&[], 1000);
    let session = log.session();
    let surface = session.surface();
    let request = summarize_request(
        &session,
        surface[0].id,
        surface[2].id,
        &crate::AgentConfig::new("deepseek-v4-flash").default_call,
        512,
        &config(),
    )
    .unwrap();
    assert_eq!(request.header.tools, None);
    assert!(!request.header.config.thinking);
    assert_eq!(request.header.config.max_tokens, 512);
    let Message::User { content, .. } = &*request.messages[0] else { panic!() };
    assert!(content.starts_with("Conversation to summarize:\n\n[user]\nread it\n"), "{content}");
    assert!(content.contains("(calls call-1-0 read_file {})"));
    assert!(content.contains("[... trimmed"));
    assert!(!content.contains("done"));
}

/// Images are in a request's body as base64 (a 3 MB image is 4 MB of it) but cost a provider
/// about 1,600 tokens: the tokens-per-byte ratio is the text's, and a new image projects as
/// about that many tokens — so that image-heavy sessions compact in time.
#[test]
fn images_count_as_their_token_estimate_not_their_base64_in_the_pressure() {
    let image = |seed: char| dsh_session::ImageRef {
        sha256: seed.to_string().repeat(64),
        size: 3_000_000,
        media_type: "image/png".to_owned(),
        name: None,
    };
    let mut log = Log::new();
    log.turn("look at these");
    let dsh_session::EventData::UserMessage(prompt) = &mut log.events.last_mut().unwrap().data
    else {
        unreachable!()
    };
    prompt.images = vec![image('a'), image('b')];
    log.push(EventData::StepStart(StepStart { step: 1, turn: 1 }));
    // 4,000 bytes of text and two images of 4,000,000 base64 bytes each.
    log.push(EventData::RequestSent(dsh_session::RequestSent {
        adapter: "anthropic-messages/v1".to_owned(),
        sha256: "0".repeat(64),
        bytes: 4_000 + 2 * 4_000_000,
    }));
    let call =
        ToolCall { id: "c".to_owned(), name: "read_file".to_owned(), arguments: "{}".into() };
    let message = AssistantMessage {
        content: String::new(),
        reasoning_content: None,
        blocks: Vec::new(),
        tool_calls: vec![call],
    };
    log.push(EventData::AssistantMessage(AssistantTurn { step: 1, message }));
    log.push(EventData::ToolResult(ToolResult {
        call_id: "c".to_owned(),
        name: "read_file".to_owned(),
        content: "c.png: image/png".to_owned(),
        is_error: false,
        seen: None,
        images: vec![image('c')],
    }));
    // 1,000 text tokens and 3,200 for the two images.
    let usage = Usage { prompt_tokens: 4_200, completion_tokens: 10, ..Usage::default() };
    let end = StepEnd { step: 1, finish_reason: "tool_calls".to_owned(), usage };
    log.push(EventData::StepEnd(end));
    let pressure = pressure(&log.session()).unwrap();
    // The ratio over text and images at 6,400 bytes each: 4,200 / 16,800.
    assert!((pressure.tokens_per_byte - 0.25).abs() < 1e-9, "{}", pressure.tokens_per_byte);
    // The new image (and its result's text) projects as about 1,600 tokens.
    let added = pressure.projected - pressure.used;
    assert!((1_600..1_700).contains(&added), "{added}");
}

/// The summarize call's input names a tool result's images as it names a prompt's (the
/// summary describes the images it replaces), never their bytes.
#[test]
fn the_region_to_summarize_names_the_images_of_tool_results() {
    let mut log = Log::new();
    log.turn("Look at the screenshot.");
    log.step(&[10], 100);
    let mut events = log.events.clone();
    for event in &mut events {
        if let EventData::ToolResult(result) = &mut event.data {
            result.images = vec![dsh_session::ImageRef {
                sha256: "ab".repeat(32),
                size: 4_321,
                media_type: "image/png".to_owned(),
                name: Some("shot.png".to_owned()),
            }];
        }
    }
    let session = Session::from_events(events);
    let text = render_region(session.surface(), &config());
    assert!(
        text.contains("[tool result call-1-0]\nxxxxxxxxxx\n[image: image/png, 4321 bytes]"),
        "{text}"
    );
    assert!(!text.contains(&"ab".repeat(32)), "{text}");
}
