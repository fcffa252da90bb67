//! Fuzz target `admission`: see `dsh_fuzz::admission` (src/admission.rs) for what it checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| dsh_fuzz::admission::check(data));
