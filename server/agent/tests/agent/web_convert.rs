//! The `web_convert` fuzz target's regression inputs: every file under
//! `tests/data/fuzz/web_convert/` (the seeds, and any input a fuzzing run found failing,
//! minimized) goes through the target's own checks, `fuzz/src/web_convert.rs`: converting a
//! page to Markdown and to text never panics and stays bounded in size and time.

use std::path::Path;

use super::web_convert_check::check;

#[test]
fn every_web_convert_fuzz_input_converts_within_bounds() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fuzz/web_convert");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= 8, "seeds missing in {}", dir.display());
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        // A stack as small as the blocking pool's threads', where web_fetch converts.
        let run = std::thread::Builder::new().stack_size(2 << 20).spawn(move || check(&bytes));
        if run.unwrap().join().is_err() {
            panic!("{} fails the web_convert checks", file.display());
        }
    }
}
