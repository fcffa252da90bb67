//! The `log_load` fuzz target's regression inputs: every file under `tests/data/fuzz/log_load/`
//! (the seeds, and any log a fuzzing run of `log_load` or `log_events` found failing,
//! minimized) is read as a log file and folded through the target's own checks,
//! `fuzz/src/log_load.rs` and `fuzz/src/folds.rs`, on stable.

#[path = "../../../../fuzz/src/folds.rs"]
mod folds;
#[path = "../../../../fuzz/src/log_load.rs"]
mod log_load;

use std::path::Path;

#[test]
fn every_log_load_fuzz_input_reads_and_folds_without_a_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fuzz/log_load");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(!files.is_empty(), "no inputs in {}", dir.display());
    let temp = tempfile::tempdir().unwrap();
    let scratch = temp.path().join("fuzz.jsonl");
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        if std::panic::catch_unwind(|| log_load::check(&scratch, &bytes)).is_err() {
            panic!("{} fails the log_load checks", file.display());
        }
    }
}
