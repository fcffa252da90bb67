//! End-to-end tests of issue 4: the real `dsh` binary against an in-process mock provider.
//!
//! Each test starts its own mock on loopback, a temporary state directory and workspace, and
//! spawns `dsh` with `--home`, `--base-url` and `DEEPSEEK_API_KEY=sk-test` (the first command
//! starts the daemon for that home; the test shuts it down when it ends). Requests the mock
//! recorded are compared, byte for byte, with what `dsh` rebuilds from its log.

mod compact;
mod confinement;
mod faults;
mod header;
mod resume;
mod support;
mod wire;
