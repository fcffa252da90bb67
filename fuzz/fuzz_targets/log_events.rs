//! Fuzz target `log_events`: see `dsh_fuzz::log_events` (src/log_events.rs) for what it checks
//! and `dsh_fuzz::events` (src/events.rs) for how the bytes become a log.
//!
//! To see the log an input builds, run the target on it with `DSH_FUZZ_WRITE_LOG=<file>`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(path) = std::env::var_os("DSH_FUZZ_WRITE_LOG") {
        let (_, text) = dsh_fuzz::log_events::log_text(data);
        if let Err(error) = std::fs::write(&path, text) {
            panic!("writing {}: {error}", path.to_string_lossy());
        }
    }
    dsh_fuzz::log_events::check(data);
});
