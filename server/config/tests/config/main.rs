//! Integration tests of dsh-config through its public API: the `config` fuzz target's
//! regression inputs. Every file under `tests/data/fuzz/config/` (the seeds, and any input a
//! fuzzing run found failing, minimized) goes through the target's own checks,
//! `fuzz/src/config.rs`: a workspace's file never loosens what the user's file sets.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../../../fuzz/src/config.rs"]
mod config;

use std::path::Path;

#[test]
fn every_config_fuzz_input_resolves_without_loosening_the_users_file() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fuzz/config");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(!files.is_empty(), "no inputs in {}", dir.display());
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        if std::panic::catch_unwind(|| config::check(&bytes)).is_err() {
            panic!("{} fails the config checks", file.display());
        }
    }
}
