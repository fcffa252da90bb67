//! The `mock_request` fuzz target's regression inputs: every file under
//! `tests/data/fuzz/mock_request/` (the seeds, and any body a fuzzing run found failing,
//! minimized) goes through the target's own checks, `fuzz/src/mock_request.rs`, on stable.

#[path = "../../../../fuzz/src/mock_request.rs"]
mod mock_request;

use std::path::Path;

#[test]
fn every_mock_request_fuzz_input_is_answered_or_rejected_without_a_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fuzz/mock_request");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(!files.is_empty(), "no inputs in {}", dir.display());
    for file in files {
        let body = std::fs::read(&file).unwrap();
        if std::panic::catch_unwind(|| mock_request::check(&body)).is_err() {
            panic!("{} fails the mock_request checks", file.display());
        }
    }
}
