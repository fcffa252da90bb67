//! Fuzz target `prompt_file`: see `dsh_fuzz::prompt_file` (src/prompt_file.rs) for what it
//! checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| dsh_fuzz::prompt_file::check(data));
