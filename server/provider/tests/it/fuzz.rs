//! The `sse` fuzz target's regression inputs: every file under `tests/data/fuzz/sse/` (the
//! seeds, and any input a fuzzing run found failing, minimized) goes through the target's own
//! checks, `fuzz/src/sse.rs`, on stable.

#[path = "../../../../fuzz/src/sse.rs"]
mod sse;

use std::path::Path;

#[test]
fn every_sse_fuzz_input_decodes_the_same_whatever_the_chunking() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fuzz/sse");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(!files.is_empty(), "no inputs in {}", dir.display());
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        if std::panic::catch_unwind(|| sse::check(&bytes)).is_err() {
            panic!("{} fails the sse checks", file.display());
        }
    }
}
