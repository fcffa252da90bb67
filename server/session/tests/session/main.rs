//! Integration tests of dsh-session through its public API, kept out of `src/` so that the
//! crate's own sources name no I/O (tests/tidy.rs): the `log_line` fuzz target's regression
//! inputs. Every file under `tests/data/fuzz/log_line/` (the seeds, and any line a fuzzing run
//! found failing, minimized) goes through the target's own checks, `fuzz/src/log_line.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../../../fuzz/src/log_line.rs"]
mod log_line;

use std::path::Path;

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
