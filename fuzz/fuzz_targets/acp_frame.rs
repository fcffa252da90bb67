//! Fuzz target `acp_frame`: see `dsh_fuzz::acp_frame` (src/acp_frame.rs) for what it checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| dsh_fuzz::acp_frame::check(data));
