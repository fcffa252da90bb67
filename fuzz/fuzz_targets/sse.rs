//! Fuzz target `sse`: see `dsh_fuzz::sse` (src/sse.rs) for what it checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| dsh_fuzz::sse::check(data));
