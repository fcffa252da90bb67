//! Integration tests of dsh-store: real files in temporary directories.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod fixture;
mod fuzz;

use std::fs;
use std::path::{Path, PathBuf};

use dsh_session::{
    AssistantMessage, AssistantTurn, Event, EventData, ForkOrigin, Severity, StepStart, ToolCall,
    TurnStart, UserMessage, check_log, decode_log,
};
use dsh_store::{
    DshHome, FORK_CUT, FORK_TOOL_RESULT, LiveLog, SessionId, StoreError, SyncPolicy, Workspace,
    read_log,
};
use fixture::{Shape, session_events};
use proptest::prelude::*;

struct Env {
    _temp: tempfile::TempDir,
    home: DshHome,
    workspace: Workspace,
}

fn env() -> Env {
    let temp = tempfile::tempdir().unwrap();
    let project = temp.path().join("my project");
    fs::create_dir(&project).unwrap();
    let home = DshHome::new(temp.path().join("home"));
    let workspace = home.workspace(&project).unwrap();
    Env { _temp: temp, home, workspace }
}

fn id(text: &str) -> SessionId {
    SessionId::parse(text).unwrap()
}

/// Creates session `name` holding a whole log of `shape`, times 1000, 1001, ...
fn write_session(workspace: &Workspace, name: &str, shape: Shape) -> LiveLog {
    let mut log = workspace.create_session_at(&id(name), 1000, SyncPolicy::Never).unwrap();
    for (index, data) in session_events(shape).into_iter().enumerate() {
        log.append_at(data, 1001 + index as u64).unwrap();
    }
    log
}

fn assert_clean(events: &[Event]) {
    let diagnostics = check_log(events);
    let bad: Vec<_> = diagnostics
        .iter()
        .filter(|d| matches!(d.severity, Severity::Error | Severity::Open))
        .map(ToString::to_string)
        .collect();
    assert!(bad.is_empty(), "check_log: {bad:#?}");
}

#[test]
fn path_layout_is_workspaces_dirname_hash_sessions_id_jsonl() {
    let env = env();
    let log = env.workspace.create_session(&id("s1"), SyncPolicy::Boundaries).unwrap();
    let relative = log.path().strip_prefix(env.home.root()).unwrap();
    let parts: Vec<_> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    assert_eq!(parts.len(), 4, "{parts:?}");
    assert_eq!(parts[0], "workspaces");
    let (dirname, hash) = parts[1].rsplit_once('-').unwrap();
    assert_eq!(dirname, "my_project");
    assert_eq!(hash.len(), 12);
    assert_eq!(parts[2], "sessions");
    assert_eq!(parts[3], "s1.jsonl");
    let meta = match &log.session().events()[0].data {
        EventData::SessionMeta(meta) => meta.clone(),
        other => panic!("first event is {other:?}"),
    };
    assert_eq!(meta.session_id, "s1");
    assert_eq!(Path::new(&meta.workspace), env.workspace.path());
    assert!(env.workspace.path().is_absolute());
}

#[test]
fn bad_session_ids_are_refused_before_touching_the_disk() {
    for bad in ["../escape", "a/b", "..", ".x", ""] {
        let error = SessionId::parse(bad).unwrap_err();
        assert!(error.to_string().contains("invalid session id"), "{error}");
    }
}

#[test]
fn create_append_reopen_round_trips_every_event_and_the_fold() {
    let env = env();
    let log = write_session(&env.workspace, "s1", Shape::small());
    let written = log.session().events().to_vec();
    let messages = log.session().messages();
    log.close().unwrap();

    let reopened = env.workspace.open_session(&id("s1"), SyncPolicy::Boundaries).unwrap();
    assert_eq!(reopened.session().events(), written.as_slice());
    assert_eq!(reopened.session().messages(), messages);
    assert_eq!(reopened.session().header(), log_header(&written).as_ref());
    assert!(reopened.recovered().is_none());
    assert_clean(reopened.session().events());

    // The file is exactly the encoded events, one per line, and decodes back.
    let text = fs::read_to_string(reopened.path()).unwrap();
    assert_eq!(decode_log(&text).unwrap(), written);
    assert_eq!(text.lines().count(), written.len());
}

fn log_header(events: &[Event]) -> Option<dsh_session::EpochHeader> {
    dsh_session::fold_request_header(events)
}

#[test]
fn append_stamps_next_seq_and_time_and_returns_the_event() {
    let env = env();
    let mut log = env.workspace.create_session_at(&id("s1"), 5, SyncPolicy::Always).unwrap();
    let event = log.append_at(EventData::TurnStart(TurnStart { turn: 1 }), 42).unwrap().clone();
    assert_eq!((event.seq, event.time), (1, 42));
    let before = dsh_store::now_ms();
    let event = log
        .append(EventData::UserMessage(UserMessage {
            text: "hi".into(),
            command: None,
            images: Vec::new(),
        }))
        .unwrap();
    assert_eq!(event.seq, 2);
    assert!(event.time >= before);
    assert_eq!(log.session().messages().len(), 1);
}

#[test]
fn creating_an_existing_session_is_refused_and_leaves_it_intact() {
    let env = env();
    let log = write_session(&env.workspace, "s1", Shape::small());
    let before = fs::read(log.path()).unwrap();
    drop(log);
    let error = env.workspace.create_session(&id("s1"), SyncPolicy::Never).unwrap_err();
    assert!(matches!(error, StoreError::SessionExists { .. }), "{error}");
    assert_eq!(fs::read(env.workspace.session_path(&id("s1"))).unwrap(), before);
    // No temporary file is left behind.
    let names: Vec<_> = fs::read_dir(env.workspace.sessions_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["s1.jsonl"]);
}

#[test]
fn a_second_writer_is_refused_with_an_error_naming_the_session() {
    let env = env();
    let _first = env.workspace.create_session(&id("busy-1"), SyncPolicy::Boundaries).unwrap();
    let error = env.workspace.open_session(&id("busy-1"), SyncPolicy::Boundaries).unwrap_err();
    assert!(matches!(error, StoreError::Locked { .. }), "{error}");
    let message = error.to_string();
    assert!(message.contains("busy-1"), "{message}");
    assert!(message.contains("another dsh process"), "{message}");
    // Reading is always allowed.
    assert_eq!(env.workspace.read_session(&id("busy-1")).unwrap().events.len(), 1);
}

#[test]
fn the_lock_is_released_when_the_writer_is_dropped() {
    let env = env();
    let first = env.workspace.create_session(&id("s1"), SyncPolicy::Boundaries).unwrap();
    drop(first);
    env.workspace.open_session(&id("s1"), SyncPolicy::Boundaries).unwrap();
}

#[test]
fn a_second_process_is_refused_while_the_first_holds_the_log() {
    // flock conflicts between open file descriptions, so a child process is the real test.
    let env = env();
    let log = env.workspace.create_session(&id("s1"), SyncPolicy::Boundaries).unwrap();
    let path = log.path().to_owned();
    let status = std::process::Command::new("flock")
        .args(["--nonblock", "--exclusive"])
        .arg(&path)
        .arg("true")
        .status();
    if let Ok(status) = status {
        assert!(!status.success(), "another process could take the lock");
        drop(log);
        let status = std::process::Command::new("flock")
            .args(["--nonblock", "--exclusive"])
            .arg(&path)
            .arg("true")
            .status()
            .unwrap();
        assert!(status.success(), "the lock outlived the writer");
    }
}

fn torn_fixture(env: &Env, tail: &[u8]) -> (PathBuf, Vec<Event>, u64) {
    let log = write_session(&env.workspace, "s1", Shape::small());
    let events = log.session().events().to_vec();
    let path = log.path().to_owned();
    drop(log);
    let whole = fs::metadata(&path).unwrap().len();
    let mut file = fs::OpenOptions::new().append(true).open(&path).unwrap();
    std::io::Write::write_all(&mut file, tail).unwrap();
    (path, events, whole)
}

#[test]
fn a_torn_tail_is_moved_to_a_sidecar_and_appending_continues() {
    let env = env();
    let tail = br#"{"seq":999,"time":1,"type":"assistant/chunk","data":{"st"#;
    let (path, events, whole) = torn_fixture(&env, tail);

    let before = fs::read(&path).unwrap();
    let mut log = LiveLog::open(&path, SyncPolicy::Boundaries).unwrap();
    let torn = log.recovered().unwrap().clone();
    assert_eq!(torn.offset, whole);
    assert_eq!(torn.len, tail.len() as u64);
    // Opening alone (a view) changes nothing: the tail stays until the first append.
    assert_eq!(torn.sidecar, None);
    assert_eq!(fs::read(&path).unwrap(), before);
    assert_eq!(log.session().events(), events.as_slice());

    let next = log.session().last_turn() + 1;
    let appended = log.append(EventData::TurnStart(TurnStart { turn: next })).unwrap().clone();
    let sidecar = log.recovered().unwrap().sidecar.clone().unwrap();
    assert_eq!(sidecar, path.with_file_name(format!("s1.jsonl.torn-{whole}")));
    assert_eq!(fs::read(&sidecar).unwrap(), tail);
    assert_eq!(appended.seq, events.len() as u64);
    drop(log);
    let read = read_log(&path).unwrap();
    assert!(read.torn.is_none());
    assert_eq!(read.events.len(), events.len() + 1);
    assert_eq!(read.events.last(), Some(&appended));
}

#[test]
fn reading_a_torn_log_ignores_and_reports_the_tail_without_modifying_it() {
    let env = env();
    let (path, events, whole) = torn_fixture(&env, b"{\"seq\":");
    let before = fs::read(&path).unwrap();
    let read = read_log(&path).unwrap();
    assert_eq!(read.events, events);
    let torn = read.torn.unwrap();
    assert_eq!((torn.offset, torn.len, torn.sidecar), (whole, 7, None));
    assert_eq!(fs::read(&path).unwrap(), before);
}

#[test]
fn a_complete_line_missing_only_its_newline_is_treated_as_torn() {
    let env = env();
    let log = write_session(&env.workspace, "s1", Shape::small());
    let path = log.path().to_owned();
    let events = log.session().events().to_vec();
    drop(log);
    let bytes = fs::read(&path).unwrap();
    fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
    let log = LiveLog::open(&path, SyncPolicy::Never).unwrap();
    assert_eq!(log.session().events(), &events[..events.len() - 1]);
    let last_line_len = dsh_session::encode_event(events.last().unwrap()).len() as u64;
    assert_eq!(log.recovered().unwrap().len, last_line_len);
}

#[test]
fn a_corrupt_complete_line_is_an_error_naming_the_line_and_nothing_is_modified() {
    let env = env();
    let log = write_session(&env.workspace, "s1", Shape::small());
    let path = log.path().to_owned();
    drop(log);
    let text = fs::read_to_string(&path).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines[4] = lines[4].replace("\"seq\"", "\"sq\"");
    let corrupt = lines.join("\n") + "\n";
    fs::write(&path, &corrupt).unwrap();

    for error in
        [LiveLog::open(&path, SyncPolicy::Never).unwrap_err(), read_log(&path).unwrap_err()]
    {
        match &error {
            StoreError::Decode { cause: source, .. } => assert_eq!(source.line, 5),
            other => panic!("expected a decode error, got {other}"),
        }
        assert!(error.to_string().contains("line 5"), "{error}");
    }
    assert_eq!(fs::read_to_string(&path).unwrap(), corrupt);
}

#[test]
fn a_seq_that_does_not_match_its_line_is_an_error() {
    let env = env();
    let log = write_session(&env.workspace, "s1", Shape::small());
    let path = log.path().to_owned();
    drop(log);
    let text = fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let swapped = [lines[0], lines[2], lines[1]].join("\n") + "\n";
    fs::write(&path, swapped).unwrap();
    let error = read_log(&path).unwrap_err();
    assert!(
        matches!(error, StoreError::SeqMismatch { line: 2, expected: 1, found: 2, .. }),
        "{error}"
    );
}

#[test]
fn an_unknown_format_version_is_the_typed_error() {
    let env = env();
    let log = env.workspace.create_session(&id("s1"), SyncPolicy::Never).unwrap();
    let path = log.path().to_owned();
    drop(log);
    let text =
        fs::read_to_string(&path).unwrap().replace("\"formatVersion\":0", "\"formatVersion\":7");
    fs::write(&path, text).unwrap();
    for error in
        [LiveLog::open(&path, SyncPolicy::Never).unwrap_err(), read_log(&path).unwrap_err()]
    {
        assert!(
            matches!(error, StoreError::UnsupportedFormatVersion { found: 7, supported: 0, .. }),
            "{error}"
        );
        assert!(error.to_string().contains("never migrated"), "{error}");
    }
}

#[test]
fn a_log_not_opening_with_session_meta_is_refused() {
    let env = env();
    let path = env.workspace.sessions_dir().join("x.jsonl");
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let event = Event { seq: 0, time: 1, data: EventData::TurnStart(TurnStart { turn: 1 }) };
    fs::write(&path, dsh_session::encode_event(&event) + "\n").unwrap();
    assert!(matches!(read_log(&path).unwrap_err(), StoreError::NoMeta { .. }));
}

/// The seq of the first event matching `pick` in a log.
fn seq_of(events: &[Event], pick: impl Fn(&EventData) -> bool) -> u64 {
    events.iter().find(|e| pick(&e.data)).unwrap().seq
}

fn fork_and_check(env: &Env, at_seq: Option<u64>) -> (Vec<Event>, Vec<Event>) {
    let parent = write_session(&env.workspace, "parent", Shape::small());
    let parent_events = parent.session().events().to_vec();
    let fork = env
        .workspace
        .fork_session(&id("parent"), at_seq, &id("child"), SyncPolicy::Boundaries)
        .unwrap();
    let child = fork.session().events().to_vec();
    drop(fork);
    // What is on disk is what the fork folded.
    assert_eq!(read_log(&env.workspace.session_path(&id("child"))).unwrap().events, child);
    assert_clean(&child);
    let cut = at_seq.unwrap_or(parent_events.len() as u64) as usize;
    assert_eq!(&child[1..cut], &parent_events[1..cut], "the fork's prefix is the parent's");
    match &child[0].data {
        EventData::SessionMeta(meta) => {
            assert_eq!(meta.session_id, "child");
            assert_eq!(
                meta.forked_from,
                Some(ForkOrigin { session_id: "parent".into(), seq: cut as u64 })
            );
        }
        other => panic!("{other:?}"),
    }
    (parent_events, child)
}

#[test]
fn a_fork_of_the_whole_log_copies_it_and_adds_nothing() {
    let env = env();
    let (parent, child) = fork_and_check(&env, None);
    assert_eq!(child.len(), parent.len());
}

#[test]
fn a_fork_between_a_tool_call_and_its_result_answers_the_call_and_closes_step_and_turn() {
    let env = env();
    let parent = session_events(Shape::small());
    // Cut right after the first tool/call: the assistant message asked for a tool that never ran.
    let index = parent.iter().position(|d| matches!(d, EventData::ToolCall(_))).unwrap();
    let at_seq = index as u64 + 2; // +1 for session/meta, +1 to keep the tool/call itself
    let (_, child) = fork_and_check(&env, Some(at_seq));
    let closing: Vec<_> = child[at_seq as usize..].iter().map(|e| e.data.clone()).collect();
    assert_eq!(closing.len(), 3, "{closing:#?}");
    match &closing[0] {
        EventData::ToolResult(result) => {
            assert_eq!(result.call_id, "call_1");
            assert_eq!(result.content, FORK_TOOL_RESULT);
            assert!(result.is_error);
        }
        other => panic!("{other:?}"),
    }
    assert!(
        matches!(&closing[1], EventData::StepError(e) if e.step == 1 && e.cancelled && e.error == FORK_CUT)
    );
    assert!(matches!(&closing[2], EventData::TurnEnd(e)
        if e.turn == 1 && e.reason == dsh_session::StopReason::Cancelled && e.error.as_deref() == Some(FORK_CUT)));
}

#[test]
fn a_fork_right_after_step_start_closes_the_step_and_the_turn() {
    let env = env();
    let probe = write_session(&env.workspace, "probe", Shape::small());
    let at_seq = seq_of(probe.session().events(), |d| {
        matches!(d, EventData::StepStart(StepStart { step: 2, .. }))
    }) + 1;
    drop(probe);
    let (_, child) = fork_and_check(&env, Some(at_seq));
    assert_eq!(child.len() as u64, at_seq + 2);
}

#[test]
fn a_fork_between_turns_adds_no_closing_events() {
    let env = env();
    let probe = write_session(&env.workspace, "probe", Shape::small());
    let at_seq = seq_of(probe.session().events(), |d| {
        matches!(d, EventData::TurnStart(TurnStart { turn: 2 }))
    });
    drop(probe);
    let (_, child) = fork_and_check(&env, Some(at_seq));
    assert_eq!(child.len() as u64, at_seq);
}

#[test]
fn a_fork_at_every_seq_is_well_formed() {
    let env = env();
    let parent = write_session(&env.workspace, "parent", Shape::small());
    let events = parent.session().events().to_vec();
    for at_seq in 1..=events.len() as u64 {
        let child = dsh_store::fork_events(&events, Some(at_seq), &id("c"), 9).unwrap();
        assert_clean(&child);
        assert_eq!(&child[1..at_seq as usize], &events[1..at_seq as usize]);
    }
}

#[test]
fn a_fork_with_an_assistant_message_whose_calls_are_partly_answered_answers_the_rest() {
    let events = vec![
        Event { seq: 0, time: 0, data: meta("p") },
        Event { seq: 1, time: 0, data: EventData::TurnStart(TurnStart { turn: 1 }) },
        Event { seq: 2, time: 0, data: EventData::StepStart(StepStart { step: 1, turn: 1 }) },
        Event {
            seq: 3,
            time: 0,
            data: EventData::AssistantMessage(AssistantTurn {
                step: 1,
                message: AssistantMessage {
                    content: String::new(),
                    reasoning_content: None,
                    blocks: Vec::new(),
                    tool_calls: vec![call("a"), call("b")],
                },
            }),
        },
        Event {
            seq: 4,
            time: 0,
            data: EventData::ToolResult(dsh_session::ToolResult {
                call_id: "a".into(),
                name: "read".into(),
                content: "ok".into(),
                is_error: false,
                seen: None,
                images: Vec::new(),
            }),
        },
    ];
    let child = dsh_store::fork_events(&events, None, &id("c"), 9).unwrap();
    let answered: Vec<_> = child[5..]
        .iter()
        .filter_map(|e| match &e.data {
            EventData::ToolResult(r) => Some(r.call_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(answered, ["b"]);
    // The parent has no request header: only the structural findings matter here.
    let structural: Vec<_> = check_log(&child)
        .into_iter()
        .filter(|d| d.severity == Severity::Open || d.message.contains("unanswered"))
        .collect();
    assert!(structural.is_empty(), "{structural:?}");
}

fn meta(session: &str) -> EventData {
    EventData::SessionMeta(dsh_session::SessionMeta {
        format_version: 0,
        session_id: session.into(),
        workspace: "/w".into(),
        forked_from: None,
        pin: None,
        parent: None,
    })
}

fn call(id: &str) -> ToolCall {
    ToolCall { id: id.into(), name: "read".into(), arguments: "{}".into() }
}

#[test]
fn fork_points_outside_the_log_are_clear_errors() {
    let env = env();
    let parent = write_session(&env.workspace, "parent", Shape::small());
    let len = parent.session().events().len() as u64;
    drop(parent);
    for at_seq in [0, len + 1, u64::MAX] {
        let error = env
            .workspace
            .fork_session(&id("parent"), Some(at_seq), &id("child"), SyncPolicy::Never)
            .unwrap_err();
        assert!(
            matches!(&error, StoreError::ForkOutOfRange { at_seq: a, len: l, .. } if *a == at_seq && *l == len),
            "{error}"
        );
        assert!(error.to_string().contains("parent"), "{error}");
    }
    assert!(!env.workspace.session_path(&id("child")).exists());
    // Forking onto an existing id is refused too.
    let error = env
        .workspace
        .fork_session(&id("parent"), None, &id("parent"), SyncPolicy::Never)
        .unwrap_err();
    assert!(matches!(error, StoreError::SessionExists { .. }), "{error}");
}

#[test]
fn listing_shows_title_times_turns_fork_origin_and_last_usage() {
    let env = env();
    drop(write_session(&env.workspace, "a-first", Shape::small()));
    let empty = env.workspace.create_session_at(&id("b-empty"), 77, SyncPolicy::Never).unwrap();
    drop(empty);
    let fork = env
        .workspace
        .fork_session(&id("a-first"), Some(5), &id("c-fork"), SyncPolicy::Never)
        .unwrap();
    drop(fork);
    // A stray file and a torn tail do not disturb the listing.
    fs::write(env.workspace.sessions_dir().join("notes.txt"), "x").unwrap();
    let broken = env.workspace.sessions_dir().join("d-broken.jsonl");
    fs::write(&broken, "not json\n").unwrap();

    let listing = env.workspace.list_sessions().unwrap();
    let ids: Vec<_> = listing.sessions.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["a-first", "b-empty", "c-fork"]);
    assert_eq!(listing.errors.len(), 1);
    assert_eq!(listing.errors[0].0, broken);

    let first = &listing.sessions[0];
    let events = session_events(Shape::small());
    assert_eq!(first.title.as_deref().unwrap().split(':').next(), Some("turn 1"));
    assert!(!first.title.as_deref().unwrap().contains('\n'));
    assert_eq!(first.created_ms, 1000);
    assert_eq!(first.updated_ms, 1000 + events.len() as u64);
    assert_eq!(first.turns, 3);
    assert_eq!(first.steps, 9);
    assert_eq!(first.forked_from, None);
    let usage = first.last_usage.unwrap();
    assert_eq!((usage.prompt_tokens, usage.cache_hit_tokens), (9000, 8100));

    let empty = &listing.sessions[1];
    assert_eq!((empty.title.as_deref(), empty.turns, empty.created_ms), (None, 0, 77));
    assert_eq!(empty.last_usage, None);

    let fork = &listing.sessions[2];
    assert_eq!(fork.forked_from, Some(ForkOrigin { session_id: "a-first".into(), seq: 5 }));
    assert_eq!(fork.turns, 1);
}

#[test]
fn a_session_is_found_by_id_across_workspaces() {
    let env = env();
    let other_dir = env._temp.path().join("other");
    fs::create_dir(&other_dir).unwrap();
    let other = env.home.workspace(&other_dir).unwrap();
    drop(env.workspace.create_session(&id("here"), SyncPolicy::Never).unwrap());
    drop(other.create_session(&id("there"), SyncPolicy::Never).unwrap());
    drop(other.create_session(&id("both"), SyncPolicy::Never).unwrap());
    drop(env.workspace.create_session(&id("both"), SyncPolicy::Never).unwrap());

    assert_eq!(env.home.find_session(&id("there")).unwrap(), other.session_path(&id("there")));
    assert_eq!(
        env.home.find_session(&id("here")).unwrap(),
        env.workspace.session_path(&id("here"))
    );
    assert!(matches!(
        env.home.find_session(&id("nowhere")).unwrap_err(),
        StoreError::SessionNotFound { .. }
    ));
    assert!(matches!(
        env.home.find_session(&id("both")).unwrap_err(),
        StoreError::AmbiguousSession { .. }
    ));
}

#[test]
fn generated_sessions_get_distinct_valid_ids() {
    let env = env();
    let a = env.workspace.create_new_session(SyncPolicy::Never).unwrap();
    let b = env.workspace.create_new_session(SyncPolicy::Never).unwrap();
    assert_ne!(a.session_id(), b.session_id());
    SessionId::parse(a.session_id()).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any byte truncation of a valid log that keeps its first line recovers a prefix of its
    /// events: reading never fails, and opening for writing recovers, keeps the torn bytes in a
    /// sidecar, and appends on. A cut inside the first line is an empty log, an error.
    #[test]
    fn any_truncation_recovers_a_prefix(
        turns in 1u64..4,
        steps in 1u64..4,
        chunks in 0usize..5,
        cut_ratio in 0.0f64..=1.0,
    ) {
        let env = env();
        let shape = Shape { turns, steps_per_turn: steps, chunks_per_step: chunks, chunk_bytes: 9, tool_result_bytes: 30, delta_every: 2 };
        let log = write_session(&env.workspace, "s1", shape);
        let events = log.session().events().to_vec();
        let path = log.path().to_owned();
        drop(log);
        let bytes = fs::read(&path).unwrap();
        let cut = ((bytes.len() as f64) * cut_ratio) as usize;
        fs::write(&path, &bytes[..cut]).unwrap();
        let whole = bytes[..cut].iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);

        if whole == 0 {
            // A cut inside the first line (session/meta) leaves no session: reading and opening
            // both say the log is empty, and the bytes stay where they are.
            let error = read_log(&path).unwrap_err();
            prop_assert!(matches!(error, StoreError::Empty { .. }), "{}", error);
            let error = LiveLog::open(&path, SyncPolicy::Never).err().unwrap();
            prop_assert!(matches!(error, StoreError::Empty { .. }), "{}", error);
            prop_assert_eq!(fs::read(&path).unwrap(), bytes[..cut].to_vec());
            return Ok(());
        }
        let read = read_log(&path).unwrap();
        prop_assert_eq!(&read.events[..], &events[..read.events.len()]);
        prop_assert_eq!(read.torn.as_ref().map(|t| (t.offset, t.len)),
            (whole < cut).then_some((whole as u64, (cut - whole) as u64)));

        match LiveLog::open(&path, SyncPolicy::Never) {
            Ok(mut log) => {
                prop_assert_eq!(log.session().events(), &read.events[..]);
                prop_assert_eq!(fs::read(&path).unwrap(), bytes[..cut].to_vec());
                let appended = log.append_at(EventData::UserMessage(UserMessage { text: "again".into(), command: None, images: Vec::new() }), 1).unwrap().seq;
                if let Some(torn) = log.recovered() {
                    let sidecar = fs::read(torn.sidecar.as_ref().unwrap()).unwrap();
                    prop_assert_eq!(&sidecar[..], &bytes[whole..cut]);
                }
                prop_assert_eq!(appended, read.events.len() as u64);
                drop(log);
                let reread = read_log(&path).unwrap();
                prop_assert!(reread.torn.is_none());
                prop_assert_eq!(reread.events.len(), read.events.len() + 1);
            }
            Err(error) => prop_assert!(false, "opening a log with whole lines failed: {}", error),
        }
    }
}

/// Opens a log, waiting out a lock that a child process of another test briefly inherited
/// (`a_second_process_is_refused_while_the_first_holds_the_log` forks `flock` while other
/// tests' logs are open: until the child `exec`s, it shares their open file descriptions).
fn open_when_free(path: &Path) -> LiveLog {
    for _ in 0..100 {
        match LiveLog::open(path, SyncPolicy::Never) {
            Err(StoreError::Locked { .. }) => {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            opened => return opened.unwrap(),
        }
    }
    panic!("{} stayed locked", path.display());
}

#[test]
fn a_second_torn_tail_at_the_same_offset_gets_its_own_sidecar() {
    let env = env();
    let (path, _, whole) = torn_fixture(&env, b"first torn");
    let mut log = open_when_free(&path);
    log.recover_torn_tail().unwrap();
    drop(log);
    let mut file = fs::OpenOptions::new().append(true).open(&path).unwrap();
    std::io::Write::write_all(&mut file, b"second").unwrap();
    let mut log = open_when_free(&path);
    log.recover_torn_tail().unwrap();
    let sidecar = log.recovered().unwrap().sidecar.clone().unwrap();
    assert_eq!(sidecar, path.with_file_name(format!("s1.jsonl.torn-{whole}.1")));
    assert_eq!(fs::read(&sidecar).unwrap(), b"second");
    let first = path.with_file_name(format!("s1.jsonl.torn-{whole}"));
    assert_eq!(fs::read(first).unwrap(), b"first torn");
}
