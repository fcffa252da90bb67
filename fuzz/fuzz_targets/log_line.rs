//! Fuzz target `log_line`: see `dsh_fuzz::log_line` (src/log_line.rs) for what it checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| dsh_fuzz::log_line::check(data));
