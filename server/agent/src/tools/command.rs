//! `run_command`: a shell command in the workspace root, in its own process group.
//!
//! The command runs as `sh -c <command>` — through the session's sandbox (`dsh sandbox-exec`,
//! see `dsh-sandbox`) unless the user approved this call unconfined — with the environment the
//! sandbox builds (never the daemon's: the provider's key is in no command's reach), stdin from
//! `/dev/null` and stdout and stderr on one pipe, so the model sees them interleaved as a
//! terminal would show them (the daemon's own stdout is never inherited). When a confined
//! command fails and its output shows the sandbox refused something, the result says what
//! ("write outside the workspace denied: /etc/hosts"), so the model can ask for an unconfined
//! run. The shell leads a new process group, and the group is the unit
//! we kill: on timeout, on cancellation, when the call's future is dropped, and after the shell
//! exits (background processes it left behind would otherwise hold the pipe open and outlive
//! the call). A process that leaves the group on purpose (`setsid`) escapes this; that is out
//! of scope.
//!
//! Output is kept within `output_cap_bytes` while it streams: the first half and the last half
//! are kept, and the number of bytes cut between them is reported.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt as _;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use dsh_sandbox::CommandSandbox;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::Deserialize;
use tokio::io::AsyncReadExt as _;
use tokio::net::unix::pipe;
use tokio_util::sync::CancellationToken;

use super::schema::MAX_TIMEOUT_SECS;
use super::{Tool, ToolConfig, ToolOutput, parse};

/// How long output is still collected after the shell exits (or after the group is killed)
/// before the pipe is abandoned.
const DRAIN_GRACE: Duration = Duration::from_millis(300);

/// Arguments of `run_command`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunCommandArgs {
    command: String,
    #[serde(default)]
    timeout_secs: Option<u64>,
}

/// How the command's run ended.
enum Ending {
    Exited(ExitStatus),
    WaitFailed(std::io::Error),
    TimedOut(Duration),
    Cancelled,
}

/// Runs `run_command` with its raw argument string.
pub(super) async fn run(
    sandbox: &CommandSandbox,
    config: &ToolConfig,
    arguments: &str,
    cancel: &CancellationToken,
    unconfined: bool,
) -> ToolOutput {
    match run_checked(sandbox, config, arguments, cancel, unconfined).await {
        Ok(output) => output,
        Err(message) => ToolOutput::error(message),
    }
}

async fn run_checked(
    sandbox: &CommandSandbox,
    config: &ToolConfig,
    arguments: &str,
    cancel: &CancellationToken,
    unconfined: bool,
) -> Result<ToolOutput, String> {
    let args: RunCommandArgs = parse(Tool::RunCommand, arguments)?;
    if args.command.trim().is_empty() {
        return Err("command is empty".to_owned());
    }
    let timeout = match args.timeout_secs {
        None => config.command_timeout,
        Some(seconds) if (1..=MAX_TIMEOUT_SECS).contains(&seconds) => Duration::from_secs(seconds),
        Some(seconds) => {
            return Err(format!(
                "timeout_secs {seconds} is out of range; use 1 to {MAX_TIMEOUT_SECS} seconds"
            ));
        }
    };

    let start_error = |error: std::io::Error| format!("cannot start the command: {error}");
    let (reader, writer) = std::io::pipe().map_err(start_error)?;
    let stderr_writer = writer.try_clone().map_err(start_error)?;
    // The sandbox sets the program (the launcher, or `sh` itself), the working directory and
    // the environment; the streams and the process group are this module's.
    let mut command = tokio::process::Command::from(sandbox.shell(&args.command, unconfined));
    command
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::from(stderr_writer))
        .process_group(0)
        .kill_on_drop(true);
    let spawned = command.spawn();
    // The command holds our copies of the pipe's write end; they must be closed, or the pipe
    // never reports end-of-file.
    drop(command);
    let mut child = spawned.map_err(start_error)?;
    let Some(pid) = child.id().and_then(|pid| i32::try_from(pid).ok()) else {
        return Err("cannot start the command: the shell exited before it could be tracked".into());
    };
    // From here on, dropping this future (the loop gave up on the call) kills the group.
    let mut group = GroupGuard { group: Pid::from_raw(pid), armed: true };
    let mut pipe = pipe::Receiver::from_owned_fd(OwnedFd::from(reader)).map_err(start_error)?;
    let mut capture = Capture::new(config.output_cap_bytes);
    let mut buffer = vec![0_u8; 8192];
    let mut pipe_open = true;

    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let ending = loop {
        tokio::select! {
            // Cancel-safe: a read that loses the race has consumed nothing.
            read = pipe.read(&mut buffer), if pipe_open => match read {
                Ok(0) | Err(_) => pipe_open = false,
                Ok(count) => capture.push(&buffer[..count]),
            },
            // Cancel-safe: `Child::wait` can be polled again after losing a race.
            status = child.wait() => break match status {
                Ok(status) => Ending::Exited(status),
                Err(error) => Ending::WaitFailed(error),
            },
            // Cancel-safe: the sleep is pinned outside the loop and keeps its deadline.
            () = &mut deadline => break Ending::TimedOut(timeout),
            // Cancel-safe: `cancelled` has no side effect.
            () = cancel.cancelled() => break Ending::Cancelled,
        }
    };

    let mut leftovers_killed = false;
    match ending {
        Ending::Exited(_) | Ending::WaitFailed(_) => {
            // The shell is gone; give processes it left behind a moment to finish writing, then
            // kill whatever remains of the group.
            drain(&mut pipe, &mut buffer, &mut capture, pipe_open).await;
            leftovers_killed = group.kill();
        }
        Ending::TimedOut(_) | Ending::Cancelled => {
            group.kill();
            // Reap the shell (it is dead or dying) so it does not linger as a zombie.
            let _ = tokio::time::timeout(DRAIN_GRACE, child.wait()).await;
            drain(&mut pipe, &mut buffer, &mut capture, pipe_open).await;
        }
    }
    group.armed = false;

    let mut content = capture.render();
    if content.is_empty() {
        content.push_str("(no output)");
    }
    if !content.ends_with('\n') {
        content.push('\n');
    }
    let is_error = match &ending {
        Ending::Exited(status) => {
            let _ = write!(content, "[{}]", describe_status(*status));
            !status.success()
        }
        Ending::WaitFailed(error) => {
            let _ = write!(content, "[could not get the exit status: {error}]");
            true
        }
        Ending::TimedOut(timeout) => {
            let _ = write!(
                content,
                "[timed out after {}; the command and all its processes were killed]",
                seconds(*timeout)
            );
            true
        }
        Ending::Cancelled => {
            content.push_str("[cancelled; the command and all its processes were killed]");
            true
        }
    };
    if leftovers_killed {
        content.push_str("\n[background processes the command left running were killed]");
    }
    if is_error && !unconfined && matches!(ending, Ending::Exited(_)) {
        let denials = sandbox.denials(&content);
        for denial in &denials {
            let _ = write!(content, "\n[sandbox ({}): {denial}]", sandbox.policy_name());
        }
        if !denials.is_empty() {
            content.push_str(
                "\n[if the command must do this, ask the user to approve running it unconfined]",
            );
        }
    }
    Ok(ToolOutput { content, is_error, seen: None, image: None })
}

/// Reads what is left in the pipe until end-of-file or [`DRAIN_GRACE`] passes.
async fn drain(
    pipe: &mut pipe::Receiver,
    buffer: &mut [u8],
    capture: &mut Capture,
    pipe_open: bool,
) {
    if !pipe_open {
        return;
    }
    let reading = async {
        loop {
            match pipe.read(buffer).await {
                Ok(0) | Err(_) => break,
                Ok(count) => capture.push(&buffer[..count]),
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_GRACE, reading).await;
}

/// A timeout for the model: whole seconds as `120 s`, anything else in milliseconds.
fn seconds(duration: Duration) -> String {
    if duration.subsec_nanos() == 0 {
        format!("{} s", duration.as_secs())
    } else {
        format!("{} ms", duration.as_millis())
    }
}

pub(crate) fn describe_status(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => match Signal::try_from(signal) {
            Ok(name) => format!("killed by signal {signal} ({name})"),
            Err(_) => format!("killed by signal {signal}"),
        },
        (None, None) => format!("exit status {status}"),
    }
}

/// Kills a process group with SIGKILL when dropped, unless disarmed.
pub(crate) struct GroupGuard {
    pub(crate) group: Pid,
    pub(crate) armed: bool,
}

impl GroupGuard {
    /// Sends SIGKILL to the whole group; true if any process was still in it.
    pub(crate) fn kill(&self) -> bool {
        killpg(self.group, Signal::SIGKILL).is_ok()
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            self.kill();
        }
    }
}

/// Output kept within a byte cap: the first half and the last half, and a count of the rest.
pub(crate) struct Capture {
    head: Vec<u8>,
    head_cap: usize,
    tail: VecDeque<u8>,
    tail_cap: usize,
    total: usize,
}

impl Capture {
    pub(crate) fn new(cap: usize) -> Capture {
        let head_cap = cap / 2;
        Capture {
            head: Vec::new(),
            head_cap,
            tail: VecDeque::new(),
            tail_cap: cap - head_cap,
            total: 0,
        }
    }

    pub(crate) fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len();
        let head_room = self.head_cap - self.head.len();
        let into_head = head_room.min(bytes.len());
        self.head.extend_from_slice(&bytes[..into_head]);
        bytes = &bytes[into_head..];
        if bytes.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.tail_cap..]);
        } else {
            let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.tail_cap);
            self.tail.drain(..overflow);
            self.tail.extend(bytes);
        }
    }

    /// Bytes pushed in all.
    pub(crate) fn total(&self) -> usize {
        self.total
    }

    /// Whether bytes were cut between the head and the tail.
    pub(crate) fn truncated(&self) -> bool {
        self.total > self.head.len() + self.tail.len()
    }

    /// Whether what is kept is valid UTF-8 (a character cut at the head's or tail's edge by the
    /// cap counts as invalid).
    pub(crate) fn is_utf8(&self) -> bool {
        let (front, back) = self.tail.as_slices();
        std::str::from_utf8(&self.head).is_ok()
            && std::str::from_utf8(&[front, back].concat()).is_ok()
    }

    pub(crate) fn render(&self) -> String {
        let cut = self.total - self.head.len() - self.tail.len();
        let (tail_front, tail_back) = self.tail.as_slices();
        let tail = [tail_front, tail_back].concat();
        if cut == 0 {
            return String::from_utf8_lossy(&[self.head.as_slice(), &tail].concat()).into_owned();
        }
        format!(
            "{}\n[... {cut} bytes of output cut; {} bytes in total ...]\n{}",
            String::from_utf8_lossy(&self.head),
            self.total,
            String::from_utf8_lossy(&tail)
        )
    }
}
