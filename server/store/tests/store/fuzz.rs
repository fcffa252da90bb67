//! The regression inputs of the fuzz targets over whole logs, on stable, through the targets'
//! own checks: every file under `tests/data/fuzz/log_load/` (the seeds, and any log a fuzzing
//! run found failing, minimized) is read as a log file and folded (`fuzz/src/log_load.rs` and
//! `fuzz/src/folds.rs`); every file under `tests/data/fuzz/log_events/` is the input of the
//! structured generator (`fuzz/src/events.rs`), whose log is folded the same way
//! (`fuzz/src/log_events.rs`).

#[path = "../../../../fuzz/src/events.rs"]
mod events;
#[path = "../../../../fuzz/src/folds.rs"]
mod folds;
#[path = "../../../../fuzz/src/log_events.rs"]
mod log_events;
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

#[test]
fn every_log_events_fuzz_input_builds_a_log_that_folds_without_a_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fuzz/log_events");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(!files.is_empty(), "no inputs in {}", dir.display());
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        if std::panic::catch_unwind(|| log_events::check(&bytes)).is_err() {
            panic!("{} fails the log_events checks", file.display());
        }
    }
}
