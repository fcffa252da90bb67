//! Fuzz target `web_convert`: see `dsh_fuzz::web_convert` (src/web_convert.rs) for what it checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| dsh_fuzz::web_convert::check(data));
