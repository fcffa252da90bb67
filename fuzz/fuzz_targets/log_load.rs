//! Fuzz target `log_load`: see `dsh_fuzz::log_load` (src/log_load.rs) for what it checks.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

/// One scratch log file per process, in memory when the machine has /dev/shm.
fn scratch() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let shm = PathBuf::from("/dev/shm");
        let dir = if shm.is_dir() { shm } else { std::env::temp_dir() };
        dir.join(format!("dsh-fuzz-log-load-{}.jsonl", std::process::id()))
    })
}

fuzz_target!(|bytes: &[u8]| dsh_fuzz::log_load::check(scratch(), bytes));
