//! End-to-end tests of issue 5: the daemon and its JSON-RPC API, driven by the real `dsh` binary
//! against an in-process mock provider.
//!
//! Each test has its own mock, `$DSH_HOME` and workspace, starts its own daemon (`dsh serve`, or
//! one a client starts on demand) and stops it before it ends — a failing test kills it — so no
//! daemon outlives a test. Waits poll conditions against a deadline; nothing sleeps to let time
//! pass.

mod bad_input;
mod clients;
mod lifecycle;
mod methods;
mod security;
mod support;
