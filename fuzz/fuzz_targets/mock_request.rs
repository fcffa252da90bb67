//! Fuzz target `mock_request`: see `dsh_fuzz::mock_request` (src/mock_request.rs) for what it checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| dsh_fuzz::mock_request::check(data));
