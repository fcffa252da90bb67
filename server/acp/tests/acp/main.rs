//! Integration tests of dsh-acp through its public API: the `acp_frame` fuzz target's
//! regression inputs. Every file under `tests/data/fuzz/acp_frame/` (the seeds, and any input a
//! fuzzing run found failing, minimized) goes through the target's own checks,
//! `fuzz/src/acp_frame.rs`: client frames through the front's conversions, log events through
//! its `session/update` fold.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../../../fuzz/src/acp_frame.rs"]
mod acp_frame;

use std::path::Path;

#[test]
fn every_acp_frame_fuzz_input_is_translated_or_refused_within_bounds() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fuzz/acp_frame");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(!files.is_empty(), "no inputs in {}", dir.display());
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        if std::panic::catch_unwind(|| acp_frame::check(&bytes)).is_err() {
            panic!("{} fails the acp_frame checks", file.display());
        }
    }
}
