//! The daemon and its JSON-RPC API, driven by the real `dsh` binary against an in-process mock
//! provider, through the project's typed client (`tests/support`).
//!
//! Each test has its own mock, `$DSH_HOME` and workspace, starts its own daemon (`dsh serve`, or
//! one a client starts on demand) and stops it before it ends — a failing test kills it — so no
//! daemon outlives a test. Waits poll conditions against a deadline; nothing sleeps to let time
//! pass. `DSH_TEST_DAEMON_LOG=debug` passes a log filter to the daemons `dsh serve` starts here.
//!
//! - `methods`: every method over the socket, `dsh stdio` and `dsh stdio --in-process`.
//! - `clients`: shared subscriptions, steering and cancelling from other clients (and the CLI),
//!   busy and queued prompts, catch-up with `fromSeq`, overload answers, turns announced to
//!   daemon subscribers.
//! - `lifecycle`: SIGKILL and restart, SIGTERM, approval timeout, a panicking turn, idle exit.
//! - `bad_input`: malformed and impossible requests on a live daemon.
//! - `provenance`: `workspace/provenance` — which step wrote each line, across sessions.
//! - `security`: permissions, the network listener's token and Origin checks, no key leaks.
//! - `web`: `dsh web`, the browser's login, cookie, Origin rule and security headers.
//! - `websocket`: the network listener's WebSockets, served like the socket (budget included).

mod bad_input;
mod clients;
mod hardening;
mod lifecycle;
mod methods;
mod provenance;
mod security;
mod web;
mod websocket;
