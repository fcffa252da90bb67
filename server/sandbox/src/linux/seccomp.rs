//! The seccomp layer, with the network off: a command can make no Unix socket.
//!
//! Landlock has no right for connecting to a pathname Unix socket (`connect` needs no file
//! access it checks), and a network namespace separates only abstract sockets: a command could
//! reach any socket file it can name — another dsh daemon's (and answer its approvals), the
//! Docker daemon, an ssh or gpg agent, D-Bus, X11, a database. The path a socket connects to
//! cannot be seen by a seccomp filter (it is behind a pointer), so the filter refuses to make
//! Unix sockets at all: `socket(AF_UNIX, …)` fails with `EACCES`. A stream or seqpacket
//! `socketpair` still works (a connected pair reaches nobody); a datagram pair does not (its
//! ends can `sendto` any datagram socket by path). `io_uring` is refused too, since it can
//! make sockets without the `socket` call. On x86-64 the x32 numbers of the same calls are
//! refused as well; other architectures' numbers never reach the filter's rules (the program
//! kills a process that calls under another architecture).
//!
//! What breaks: programs that make Unix sockets even inside the workspace — Python's
//! `multiprocessing` with the `forkserver` start method (the default from Python 3.14) or a
//! manager, test suites that serve on
//! a socket file, `ssh`/`gpg` agents, the Docker CLI, X11 and Wayland clients. With
//! `--sandbox-network` the filter is not installed.

use std::collections::BTreeMap;

use nix::libc;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use super::SetupError;

/// The x32 ABI's flag on x86-64 syscall numbers.
#[cfg(target_arch = "x86_64")]
const X32: i64 = 0x4000_0000;

/// Installs the filter on this thread (the helper is single-threaded) and what it `exec`s;
/// `no_new_privs` must be set.
pub(super) fn restrict() -> Result<(), SetupError> {
    let program = program()?;
    seccompiler::apply_filter(&program)
        .map_err(|error| SetupError::Other(format!("installing the seccomp filter: {error}")))
}

fn program() -> Result<BpfProgram, SetupError> {
    fn failed(error: impl std::fmt::Display) -> SetupError {
        SetupError::Other(format!("building the seccomp filter: {error}"))
    }
    let af_unix = u64::try_from(libc::AF_UNIX).unwrap_or(1);
    let is_unix = || {
        SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, af_unix).map_err(failed)
    };
    let unix = SeccompRule::new(vec![is_unix()?]).map_err(failed)?;
    // The socket type is the low bits of the second argument (flags above them).
    let datagram = SeccompCondition::new(
        1,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::MaskedEq(0xf),
        u64::try_from(libc::SOCK_DGRAM).unwrap_or(2),
    )
    .map_err(failed)?;
    let unix_datagram_pair = SeccompRule::new(vec![is_unix()?, datagram]).map_err(failed)?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    let mut deny = |number: i64, rule: Option<&SeccompRule>| {
        rules.insert(number, rule.into_iter().cloned().collect());
        #[cfg(target_arch = "x86_64")]
        rules.insert(number | X32, rule.into_iter().cloned().collect());
    };
    deny(libc::SYS_socket, Some(&unix));
    // A datagram pair is not connected for good: `sendto` with a path reaches any datagram
    // socket (journald, syslog, `sd_notify`). Stream and seqpacket pairs stay allowed.
    deny(libc::SYS_socketpair, Some(&unix_datagram_pair));
    for io_uring in
        [libc::SYS_io_uring_setup, libc::SYS_io_uring_enter, libc::SYS_io_uring_register]
    {
        deny(io_uring, None);
    }
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(failed)?;
    let errno = u32::try_from(libc::EACCES).unwrap_or(13);
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(errno), arch)
        .map_err(failed)?;
    BpfProgram::try_from(filter).map_err(failed)
}
