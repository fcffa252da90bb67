//! Integration tests of dsh-session through its public API, kept out of `src/` so that the
//! crate's own sources name no I/O (tests/tidy.rs): the `log_line` fuzz target's regression
//! inputs. Every file under `tests/data/fuzz/log_line/` (the seeds, and any line a fuzzing run
//! found failing, minimized) goes through the target's own checks, `fuzz/src/log_line.rs`; the
//! `prompt_file` target's likewise (`fuzz/src/prompt_file.rs`); and
//! the `log_events` target's generator, `fuzz/src/events.rs`, builds every event kind.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../../../fuzz/src/events.rs"]
mod events;
#[path = "../../../../fuzz/src/log_line.rs"]
mod log_line;
#[path = "../../../../fuzz/src/prompt_file.rs"]
mod prompt_file;

use std::path::Path;

use dsh_session::{EVENT_KINDS, Event, decode_event, encode_event};

#[test]
fn every_log_line_fuzz_input_round_trips_or_is_refused() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fuzz/log_line");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(!files.is_empty(), "no inputs in {}", dir.display());
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        if std::panic::catch_unwind(|| log_line::check(&bytes)).is_err() {
            panic!("{} fails the log_line checks", file.display());
        }
    }
}

/// The `prompt_file` target's inputs (`tests/data/fuzz/prompt_file/`) through its checks.
#[test]
fn every_prompt_file_fuzz_input_parses_and_expands_within_bounds() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fuzz/prompt_file");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(!files.is_empty(), "no inputs in {}", dir.display());
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        if std::panic::catch_unwind(|| prompt_file::check(&bytes)).is_err() {
            panic!("{} fails the prompt_file checks", file.display());
        }
    }
}

/// A new event kind (a line of `event_kinds!`) must be one the fuzzer's structured generator
/// can build, or the folds are never fuzzed over it: this fails naming the kinds it cannot.
#[test]
fn the_log_events_generator_builds_every_event_kind() {
    let missing: Vec<&str> = EVENT_KINDS
        .iter()
        .copied()
        .filter(|kind| events::event_data(kind, 1, &mut events::Input::new(&[])).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "the fuzz generator cannot build the event kinds {missing:?}: add an arm for each to \
         `event_data` in fuzz/src/events.rs"
    );
    let counting: Vec<u8> = (0..=255).collect();
    for kind in EVENT_KINDS {
        for bytes in [&[][..], &[0xff; 64][..], &counting[..]] {
            let data = events::event_data(kind, 3, &mut events::Input::new(bytes)).unwrap();
            assert_eq!(data.kind(), *kind, "event_data built another kind for {kind}");
            let event = Event { seq: 3, time: 3, data };
            assert_eq!(decode_event(&encode_event(&event), 1).unwrap(), event, "{kind}");
        }
    }
    // And a log reaches each: its first byte picks the kind of the event after session/meta.
    for (index, kind) in EVENT_KINDS.iter().enumerate() {
        let log = events::build(&[u8::try_from(index).unwrap(), 0]);
        assert_eq!(log.get(1).map(Event::kind), Some(*kind), "no log starts with {kind}");
    }
}
