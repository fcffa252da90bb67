//! Unit tests of the crate's pure helpers: ids, dates, directory names, titles, line splitting.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use dsh_session::{Event, EventData, FORMAT_VERSION, SessionMeta, UserMessage, encode_event};

use crate::id::utc_from_unix_ms;
use crate::log::parse_log;
use crate::{DshHome, SessionId, StoreError, is_boundary, title_of, workspace_dir_name};

#[test]
fn utc_conversion_matches_known_dates() {
    assert_eq!(utc_from_unix_ms(0), (1970, 1, 1, 0, 0, 0));
    // 2000-02-29T12:34:56Z, a leap day in a century leap year.
    assert_eq!(utc_from_unix_ms(951_827_696_000), (2000, 2, 29, 12, 34, 56));
    // 2026-11-30T17:01:53.999Z
    assert_eq!(utc_from_unix_ms(1_796_058_113_999), (2026, 11, 30, 17, 1, 53));
}

#[test]
fn generated_ids_are_sortable_valid_and_distinct() {
    let mut rng = fastrand::Rng::with_seed(7);
    let first = SessionId::generate(1_796_058_113_999, &mut rng);
    let second = SessionId::generate(1_796_058_114_000, &mut rng);
    assert!(first.as_str().starts_with("20261130-170153-"), "{first}");
    assert_eq!(first.as_str().len(), "20261130-170153-".len() + 6);
    assert!(first < second);
    assert_eq!(SessionId::parse(first.as_str()).unwrap(), first);
    let many: std::collections::HashSet<_> =
        (0..1000).map(|_| SessionId::generate(0, &mut rng)).collect();
    assert_eq!(many.len(), 1000);
}

#[test]
fn ids_with_separators_dots_or_odd_characters_are_refused() {
    for bad in
        ["", ".", "..", "../x", "a/b", "a\\b", ".hidden", "a b", "a\0b", "é", &"x".repeat(129)]
    {
        let error = SessionId::parse(bad).unwrap_err();
        assert!(matches!(error, StoreError::InvalidSessionId { .. }), "{bad:?}: {error}");
        assert!(error.to_string().contains("invalid session id"), "{error}");
    }
    for good in ["abc", "20261130-170153-k3x9qa", "my_session.2", "A-1"] {
        assert_eq!(SessionId::parse(good).unwrap().as_str(), good);
    }
}

#[test]
fn workspace_dir_name_is_sanitized_dirname_dash_hash() {
    let name = workspace_dir_name(Path::new("/home/me/my project"));
    let (dirname, hash) = name.rsplit_once('-').unwrap();
    assert_eq!(dirname, "my_project");
    assert_eq!(hash.len(), 12);
    assert!(hash.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_ne!(name, workspace_dir_name(Path::new("/other/my project")));
    assert!(workspace_dir_name(Path::new("/")).starts_with("root-"));
}

#[test]
fn home_resolution_prefers_explicit_then_dsh_home_then_xdg_then_home() {
    let some = |s: &str| Some(s.into());
    let root = |home: DshHome| home.root().to_owned();
    let explicit = DshHome::resolve(Some(Path::new("/x")), some("/d"), some("/s"), some("/h"));
    assert_eq!(root(explicit.unwrap()), Path::new("/x"));
    let dsh = DshHome::resolve(None, some("/d"), some("/s"), some("/h")).unwrap();
    assert_eq!(root(dsh), Path::new("/d"));
    let xdg = DshHome::resolve(None, some(""), some("/s"), some("/h")).unwrap();
    assert_eq!(root(xdg), Path::new("/s/dsh"));
    let relative_xdg = DshHome::resolve(None, None, some("rel"), some("/h")).unwrap();
    assert_eq!(root(relative_xdg), Path::new("/h/.local/state/dsh"));
    assert!(matches!(DshHome::resolve(None, None, None, None), Err(StoreError::NoHome)));
}

#[test]
fn title_is_first_nonblank_line_trimmed_and_cut_to_80_chars() {
    assert_eq!(title_of("\n  fix the bug  \nmore"), "fix the bug");
    let long = "é".repeat(100);
    let title = title_of(&long);
    assert_eq!(title.chars().count(), 80);
    assert!(title.ends_with('…'));
    assert_eq!(title_of(&"a".repeat(80)), "a".repeat(80));
}

#[test]
fn boundaries_are_the_events_people_and_the_model_acted_on() {
    assert!(is_boundary(&EventData::UserMessage(UserMessage {
        text: String::new(),
        command: None,
        images: Vec::new()
    })));
    let chunk = dsh_session::AssistantChunk {
        step: 1,
        delta: dsh_session::ChunkDelta::Text { text: "x".into() },
    };
    assert!(!is_boundary(&EventData::AssistantChunk(chunk)));
}

fn meta_line() -> String {
    let meta = SessionMeta {
        format_version: FORMAT_VERSION,
        session_id: "s".into(),
        workspace: "/w".into(),
        forked_from: None,
        pin: None,
        parent: None,
    };
    encode_event(&Event { seq: 0, time: 1, data: EventData::SessionMeta(meta) })
}

#[test]
fn parse_separates_whole_lines_from_a_torn_tail() {
    let line = meta_line();
    let text = format!("{line}\n{}", &line[..10]);
    let read = parse_log(Path::new("s.jsonl"), text.as_bytes()).unwrap();
    assert_eq!(read.events.len(), 1);
    let torn = read.torn.unwrap();
    assert_eq!((torn.offset, torn.len), (line.len() as u64 + 1, 10));
    assert_eq!(read.len, line.len() as u64 + 1);
}

#[test]
fn an_empty_line_is_a_decode_error_not_skipped() {
    let text = format!("{}\n\n", meta_line());
    let error = parse_log(Path::new("s.jsonl"), text.as_bytes()).unwrap_err();
    assert!(
        matches!(&error, StoreError::Decode { cause: source, .. } if source.line == 2),
        "{error}"
    );
}
