//! Fuzz target `config`: see `dsh_fuzz::config` (src/config.rs) for what it checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| dsh_fuzz::config::check(data));
