//! The helper on Linux: Landlock and namespaces, without a line of unsafe code of ours.
//!
//! # Processes of one confined command (with namespaces)
//! ```text
//! daemon ── outer ─┬─ init   (PID 1 of the new PID namespace: mounts /proc, reaps orphans)
//!                  └─ sh -c COMMAND   (PID 2: the user's own identity, Landlock)
//! ```
//! 1. **Outer** (the process the daemon starts, in the daemon's process group) unshares a user
//!    namespace (mapping the user to root inside it, so it may mount), a mount namespace, a PID
//!    namespace and — when the network is off — a network namespace with nothing but a
//!    loopback interface that is down. It covers the hidden paths (state and configuration
//!    directories, secrets) with empty file systems, and without Landlock also covers homes
//!    and temporary directories (binding the workspace and the readable trees back) and makes
//!    every other mount read-only.
//! 2. A PID namespace only applies to children, and `/proc` must be mounted from inside it:
//!    outer starts **init** (this binary again), which mounts a fresh `/proc` — the daemon's
//!    `/proc/PID/environ` and every process outside the sandbox vanish from it — says it is
//!    ready on a pipe, and then reaps orphans until outer is gone and nothing else is left.
//! 3. Outer then confines itself: it enters a nested user namespace that maps the user back to
//!    their own id — so it, and the command after it, keep no capability over the mount, PID
//!    or network namespaces (nothing can unmount what hides the state directory) and the
//!    command sees its own uid — sets `no_new_privs`, applies Landlock, and starts the
//!    **command** (PID 2), whose exact exit status it waits for and reports as its own.
//! 4. When the command ends, outer lets init go if nothing else runs in the namespace (so no
//!    process is left); otherwise it leaves init and the leftovers to the daemon, which kills
//!    the process group after collecting their last output, as it always did.
//!
//! Without namespaces (Landlock only), outer applies Landlock and `exec`s the command itself.

mod landlock;
mod mounts;
mod seccomp;

use std::ffi::OsString;
use std::io::{BufRead as _, Write as _};
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use std::os::fd::OwnedFd;

use nix::errno::Errno;
use nix::fcntl::{OFlag, open, openat};
use nix::sched::{CloneFlags, unshare};
use nix::sys::stat::Mode;
use nix::unistd::{getgid, getuid};

use crate::helper::{SETUP_FAILED, Stage};
use crate::plan::{Layers, Plan};
use crate::probe::{Availability, Support};

/// This binary, as every process (in any mount or PID namespace) can `exec` it.
const SELF_EXE: &str = "/proc/self/exe";

/// Why the sandbox could not be set up.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SetupError {
    /// A system call failed.
    #[error("{what}: {errno}")]
    Sys {
        /// What was being done.
        what: String,
        /// How it failed.
        errno: Errno,
    },
    /// A file or process operation failed.
    #[error("{what}: {error}")]
    Io {
        /// What was being done.
        what: String,
        /// How it failed.
        error: std::io::Error,
    },
    /// Landlock refused the ruleset.
    #[error("landlock: {0}")]
    Landlock(#[from] ::landlock::RulesetError),
    /// The command's program does not exist.
    #[error("{0}: command not found")]
    NotFound(String),
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

/// The exit status for a command that does not exist (as a shell reports it).
const NOT_FOUND: i32 = 127;

pub(crate) fn sys(what: impl Into<String>) -> impl FnOnce(Errno) -> SetupError {
    let what = what.into();
    move |errno| SetupError::Sys { what, errno }
}

pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SetupError {
    let what = what.into();
    move |error| SetupError::Io { what, error }
}

/// Runs one stage (see [`crate::helper::sandbox_exec`]).
pub(crate) fn run(stage: Stage, plan: Option<&str>, command: &[OsString]) -> i32 {
    let plan = || -> Result<Plan, SetupError> {
        let text = plan.ok_or_else(|| SetupError::Other("no --plan given".to_owned()))?;
        serde_json::from_str(text)
            .map_err(|error| SetupError::Other(format!("the plan does not parse: {error}")))
    };
    let result = match stage {
        Stage::Noop => Ok(0),
        Stage::Probe => Ok(probe()),
        Stage::Init => init(plan().ok().as_ref()),
        Stage::Outer => plan().and_then(|plan| outer(&plan, command)),
    };
    match result {
        Ok(code) => code,
        Err(SetupError::NotFound(program)) => {
            // As a shell reports a command it cannot find.
            eprintln!("dsh sandbox: {program}: command not found");
            NOT_FOUND
        }
        Err(error) => {
            // This goes where the command's output goes: the model reads why nothing ran.
            eprintln!("dsh sandbox: {error}; the command did not run");
            SETUP_FAILED
        }
    }
}

fn outer(plan: &Plan, command: &[OsString]) -> Result<i32, SetupError> {
    if command.is_empty() {
        return Err(SetupError::Other("no command given".to_owned()));
    }
    if !plan.layers.namespaces {
        if !plan.layers.landlock {
            return Err(SetupError::Other("the plan has no confinement layer".to_owned()));
        }
        landlock::restrict(plan)?;
        no_unix_sockets(plan)?;
        limit(plan)?;
        return Err(exec(command));
    }
    let cwd = std::env::current_dir().map_err(io("reading the working directory"))?;
    let (uid, gid) = (getuid().as_raw(), getgid().as_raw());
    let mut flags = CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWPID;
    if !plan.network {
        flags |= CloneFlags::CLONE_NEWNET;
    }
    unshare(flags).map_err(sys("creating the user, mount and PID namespaces"))?;
    let own_proc = open_own_proc()?;
    // Root inside, so that this process may mount; it drops back to the user before the
    // command starts.
    write_id_maps(&own_proc, 0, uid, 0, gid)?;
    mounts::prepare(plan)?;
    // The working directory still points into the mounts as they were; resolve it again, so
    // the command works in the new view (its binds, its read-only remounts).
    std::env::set_current_dir(&cwd).map_err(io(format!("entering {}", cwd.display())))?;

    let init = Init::start(plan)?;
    // From here on this process is as confined as the command: it only waits and reports.
    drop_to_user(&own_proc, uid, gid)?;
    nix::sys::prctl::set_no_new_privs().map_err(sys("setting no_new_privs"))?;
    if plan.layers.landlock {
        landlock::restrict(plan)?;
    }
    no_unix_sockets(plan)?;
    limit(plan)?;
    let (program, args) = split_command(command)?;
    let child = match Command::new(program).args(args).spawn() {
        Ok(child) => child,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(SetupError::NotFound(Path::new(program).display().to_string()));
        }
        Err(error) => return Err(io(format!("running {}", Path::new(program).display()))(error)),
    };
    let status = wait(child)?;
    init.finish();
    Ok(propagate(status))
}

/// With the network off, the seccomp filter: no Unix socket, no io_uring (`seccomp.rs`).
fn no_unix_sockets(plan: &Plan) -> Result<(), SetupError> {
    if plan.network {
        return Ok(());
    }
    nix::sys::prctl::set_no_new_privs().map_err(sys("setting no_new_privs"))?;
    seccomp::restrict()
}

fn split_command(command: &[OsString]) -> Result<(&OsString, &[OsString]), SetupError> {
    command.split_first().ok_or_else(|| SetupError::Other("no command given".to_owned()))
}

/// PID 1 of the command's namespace. Dropped, it is told to go (its keepalive pipe closes)
/// and waited for — unless other processes still need it. Outer cannot kill it: once confined,
/// Landlock forbids signals to processes outside the sandbox, init included.
struct Init {
    child: Child,
    /// Open while outer wants init: init leaves when this closes and nothing else is left.
    keepalive: Option<std::io::PipeWriter>,
    /// Leave init running (the command left processes behind).
    leave: bool,
}

impl Drop for Init {
    fn drop(&mut self) {
        drop(self.keepalive.take());
        if !self.leave {
            // Before outer confines itself (a failed setup) this ends init at once; after, init
            // sees its keepalive close, finds itself alone, and exits within one poll.
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Init {
    fn start(plan: &Plan) -> Result<Init, SetupError> {
        let (ready_reader, ready_writer) = std::io::pipe().map_err(io("creating a pipe"))?;
        let (keepalive_reader, keepalive_writer) =
            std::io::pipe().map_err(io("creating a pipe"))?;
        let mut command = Command::new(SELF_EXE);
        command
            .args(["sandbox-exec", "--stage", "init", "--plan", &plan.to_json()])
            .stdin(keepalive_reader)
            .stdout(ready_writer);
        let spawned = command.spawn();
        // The command holds our copy of the write end; without dropping it, a failed init
        // would never report end-of-file.
        drop(command);
        let child = spawned.map_err(io("starting the namespace's init"))?;
        let init = Init { child, keepalive: Some(keepalive_writer), leave: false };
        let mut line = String::new();
        let read = std::io::BufReader::new(ready_reader).read_line(&mut line);
        if read.is_err() || line.trim() != "ready" {
            return Err(SetupError::Other("the namespace's init did not start".to_owned()));
        }
        Ok(init)
    }

    /// The command has ended: with nothing else left in the namespace, init goes now (and
    /// the namespace with it, on drop); otherwise the leftovers and init stay for the daemon,
    /// which collects their last output and then kills the whole process group.
    fn finish(mut self) {
        self.leave = !mounts::only_init_left();
    }
}

/// Enters a nested user namespace mapping the user's own ids (`uid`, `gid`, outside every
/// namespace) to the outer namespace's root: this process and the command keep no capability
/// over the namespaces outer set up. `own_proc` is this process's `/proc` directory, opened
/// before the namespace's own `/proc` (which does not show this process) covered it.
fn drop_to_user(own_proc: &OwnedFd, uid: u32, gid: u32) -> Result<(), SetupError> {
    unshare(CloneFlags::CLONE_NEWUSER).map_err(sys("creating the nested user namespace"))?;
    write_id_maps(own_proc, uid, 0, gid, 0)
}

/// This process's `/proc` directory.
fn open_own_proc() -> Result<OwnedFd, SetupError> {
    let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    open("/proc/self", flags, Mode::empty()).map_err(sys("opening /proc/self"))
}

/// Writes this process's id maps after `unshare(CLONE_NEWUSER)`: `inside_uid` is
/// `outside_uid` of the parent namespace (likewise for groups; `setgroups` is denied first,
/// as an unprivileged gid map requires). `own_proc` is this process's `/proc` directory.
fn write_id_maps(
    own_proc: &OwnedFd,
    inside_uid: u32,
    outside_uid: u32,
    inside_gid: u32,
    outside_gid: u32,
) -> Result<(), SetupError> {
    let write = |name: &str, text: String| {
        let what = || format!("writing /proc/self/{name}");
        let descriptor = openat(own_proc, name, OFlag::O_WRONLY | OFlag::O_CLOEXEC, Mode::empty())
            .map_err(|errno| sys(what())(errno))?;
        std::fs::File::from(descriptor).write_all(text.as_bytes()).map_err(io(what()))
    };
    write("setgroups", "deny".to_owned())?;
    write("uid_map", format!("{inside_uid} {outside_uid} 1\n"))?;
    write("gid_map", format!("{inside_gid} {outside_gid} 1\n"))
}

/// Replaces this process with the command; returns only when that fails.
fn exec(command: &[OsString]) -> SetupError {
    let Some((program, args)) = command.split_first() else {
        return SetupError::Other("no command given".to_owned());
    };
    let error = Command::new(program).args(args).exec();
    let shown = Path::new(program).display().to_string();
    if error.kind() == std::io::ErrorKind::NotFound {
        return SetupError::NotFound(shown);
    }
    SetupError::Other(format!("running {shown}: {error}"))
}

fn wait(mut child: Child) -> Result<ExitStatus, SetupError> {
    child.wait().map_err(io("waiting for the command"))
}

/// The exit status to report for the command's: its code, or — when a signal killed it — the
/// same signal, re-raised on this process (with core dumps off: the command already dumped, if
/// it was going to), so the daemon sees what it would have seen without the sandbox.
fn propagate(status: ExitStatus) -> i32 {
    if let Some(code) = status.code() {
        return code;
    }
    let Some(signal) = status.signal() else { return SETUP_FAILED };
    if let Ok(signal) = nix::sys::signal::Signal::try_from(signal) {
        let _ = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_CORE, 0, 0);
        let _ = nix::sys::signal::raise(signal);
    }
    // Still here: the signal is ignored by this process (SIGPIPE); report it as a shell does.
    128 + signal
}

/// The command's resource limits, set on this process before it starts (or becomes) the
/// command: data memory, file size and CPU time per process (`u64::MAX`: unlimited). Processes
/// are bounded by the PID namespace's `pid_max` (init sets it), never by `RLIMIT_NPROC`, which
/// counts every process of the user and would fail a busy desktop's forks.
fn limit(plan: &Plan) -> Result<(), SetupError> {
    use nix::sys::resource::{RLIM_INFINITY, Resource, setrlimit};
    let limits = plan.limits;
    for (resource, value, what) in [
        (Resource::RLIMIT_DATA, limits.memory, "memory"),
        (Resource::RLIMIT_FSIZE, limits.file_size, "file size"),
        (Resource::RLIMIT_CPU, limits.cpu_seconds, "CPU time"),
    ] {
        let value = if value == u64::MAX { RLIM_INFINITY } else { value };
        setrlimit(resource, value, value).map_err(sys(format!("limiting {what}")))?;
    }
    Ok(())
}

/// PID 1 of the command's PID namespace: with a plan, the namespace's `pid_max` bounds how
/// many processes and threads the command may have at once (Linux 6.14 and later; older
/// kernels refuse the write and only the per-process limits hold).
fn init(plan: Option<&Plan>) -> Result<i32, SetupError> {
    mounts::mount_proc()?;
    if let Some(plan) = plan {
        let pid_max = plan.limits.processes.max(crate::policy::MIN_PROCESSES) + 1;
        let _ = std::fs::write("/proc/sys/kernel/pid_max", pid_max.to_string());
    }
    let mut stdout = std::io::stdout();
    writeln!(stdout, "ready").and_then(|()| stdout.flush()).map_err(io("reporting ready"))?;
    let stdin = std::io::stdin();
    let mut outer_gone = false;
    loop {
        reap_orphans();
        if outer_gone {
            if mounts::only_init_left() {
                return Ok(0);
            }
            std::thread::sleep(Duration::from_millis(100));
        } else {
            // Wakes up when outer closes its end (it exited), or every 100 ms to reap.
            use std::os::fd::AsFd as _;
            let mut fds = [nix::poll::PollFd::new(stdin.as_fd(), nix::poll::PollFlags::POLLIN)];
            match nix::poll::poll(&mut fds, 100_u16) {
                Ok(0) | Err(Errno::EINTR) => {}
                Ok(_) => outer_gone = true,
                Err(errno) => return Err(sys("waiting for the sandbox's parent")(errno)),
            }
        }
    }
}

/// Collects every exited child (orphans of the command are reparented to init).
fn reap_orphans() {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
}

/// What this kernel offers, found by trying: the namespace pipeline is run for real on a
/// command that does nothing, and this process then restricts itself with Landlock and reads
/// back the ABI the kernel enforced.
fn probe() -> i32 {
    let plan = Plan {
        layers: Layers { landlock: false, namespaces: true },
        network: false,
        read: Vec::new(),
        write: Vec::new(),
        hide: Vec::new(),
        cover: Vec::new(),
        limits: crate::Limits::default(),
        protect: Vec::new(),
    };
    let userns = match Command::new(SELF_EXE)
        .args(["sandbox-exec", "--stage", "outer", "--plan", &plan.to_json(), "--"])
        .args([SELF_EXE, "sandbox-exec", "--stage", "noop"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
    {
        Ok(output) if output.status.success() => Availability::available(
            "user, mount, PID and network namespaces can be created".to_owned(),
        ),
        Ok(output) => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let reason = stderr.trim().trim_start_matches("dsh sandbox: ");
            let reason = reason.trim_end_matches("; the command did not run");
            Availability::unavailable(reason.to_owned())
        }
        Err(error) => Availability::unavailable(format!("cannot run the probe: {error}")),
    };
    let landlock = landlock::probe();
    let support = Support { landlock, userns };
    let mut stdout = std::io::stdout();
    let json = serde_json::to_string(&support).unwrap_or_default();
    match writeln!(stdout, "{json}") {
        Ok(()) => 0,
        Err(_) => SETUP_FAILED,
    }
}
