//! Running hooks (docs/hooks.md): programs the user's configuration names, run at points of a
//! turn with one JSON object on standard input. This module is the runner — the loop decides
//! when and what an outcome means (`agent/hooks.rs`); the daemon says which hooks there are
//! ([`HookSource`], asked at every point, so an edit of the configuration applies at once).
//!
//! A run: the program itself (no shell), in the workspace, with the daemon's environment minus
//! every variable that may hold a provider key, in a process group of its own; standard output
//! and error captured apart, each within [`HOOK_OUTPUT_CAP`] (the first and last halves kept, the
//! cut said), lossy UTF-8 (said). At its timeout, on cancellation, or when its future is
//! dropped, the whole group is killed; after the program exits, what it left running in its
//! group is killed too. Hooks are the user's own programs: they run outside the command
//! sandbox, as the user's shell would run them.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsh_session::{HookEvent, HookOutcome, HookRun};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_util::sync::CancellationToken;

use crate::tools::command::{Capture, GroupGuard, describe_status};

/// How much of each of a hook's streams is kept (the middle of a longer one is cut, said).
pub const HOOK_OUTPUT_CAP: usize = 16 * 1024;

/// How long output is still read after the program exits (or its group is killed).
const DRAIN_GRACE: Duration = Duration::from_millis(300);

/// One hook, as the loop runs it.
#[derive(Clone, Debug)]
pub struct HookSpec {
    /// Its name (unique in the configuration).
    pub name: String,
    /// Where it is defined (`FILE:LINE`).
    pub source: String,
    /// When it runs.
    pub event: HookEvent,
    /// The tools it runs for (the whole name must match); `None`: every tool.
    pub matcher: Option<regex::Regex>,
    /// The program, absolute.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// How long a run may take.
    pub timeout: Duration,
}

impl HookSpec {
    /// Whether it runs for a call of `tool`.
    pub fn matches(&self, tool: &str) -> bool {
        self.matcher.as_ref().is_none_or(|matcher| matcher.is_match(tool))
    }
}

/// The hooks of a session now.
#[derive(Clone, Debug, Default)]
pub struct HookSet {
    /// Every enabled hook, in the configuration's order.
    pub hooks: Vec<HookSpec>,
    /// Variables removed from a hook's environment: every one that may hold a provider key.
    pub env_remove: Vec<String>,
}

/// Where the loop learns the hooks of its session.
pub trait HookSource: Send + Sync {
    /// The hooks as the configuration says now.
    fn hooks(&self) -> Arc<HookSet>;
}

/// What one run produced: its logged event and its standard output and error (lossy, within
/// the cap, a cut said in the text).
#[derive(Clone, Debug)]
pub struct HookReport {
    /// The `hook/run` event.
    pub run: HookRun,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// How a run ended, before the event's meaning of an exit code is applied.
enum Ending {
    Exited(std::process::ExitStatus),
    WaitFailed(std::io::Error),
    TimedOut,
    Cancelled,
}

/// Runs `hook` with `input` on its standard input, in `workspace`. Never fails: a program that
/// cannot start is a failed run saying why. `call` names the tool call it runs for.
pub async fn run_hook(
    hook: &HookSpec,
    set: &HookSet,
    input: &serde_json::Value,
    workspace: &Path,
    call: Option<(&str, &str)>,
    cancel: &CancellationToken,
) -> HookReport {
    let started = Instant::now();
    let mut report = HookReport {
        run: HookRun {
            hook: hook.name.clone(),
            source: hook.source.clone(),
            event: hook.event,
            call_id: call.map(|(id, _)| id.to_owned()),
            tool: call.map(|(_, tool)| tool.to_owned()),
            outcome: HookOutcome::Failed,
            exit_code: None,
            error: None,
            duration_ms: 0,
            stderr: String::new(),
            stdout_bytes: 0,
            stdout_truncated: false,
            stderr_truncated: false,
            invalid_utf8: false,
        },
        stdout: String::new(),
        stderr: String::new(),
    };
    match run(hook, set, input, workspace, cancel).await {
        Err(error) => report.run.error = Some(error),
        Ok((ending, stdout, stderr, leftovers)) => {
            report.run.stdout_bytes = stdout.total() as u64;
            report.run.stdout_truncated = stdout.truncated();
            report.run.stderr_truncated = stderr.truncated();
            report.run.invalid_utf8 = !stdout.is_utf8() || !stderr.is_utf8();
            report.stdout = stdout.render();
            report.stderr = stderr.render();
            report.run.stderr.clone_from(&report.stderr);
            match ending {
                Ending::Exited(status) => {
                    report.run.exit_code = status.code();
                    match status.code() {
                        Some(0) => report.run.outcome = HookOutcome::Ok,
                        Some(2) if can_block(hook.event) => {
                            report.run.outcome = HookOutcome::Blocked;
                        }
                        Some(2) => {
                            report.run.error = Some(format!(
                                "exit code 2, which a {} hook cannot use to block",
                                hook.event.name()
                            ));
                        }
                        _ => report.run.error = Some(describe_status(status)),
                    }
                }
                Ending::WaitFailed(error) => {
                    report.run.error = Some(format!("could not get its exit status: {error}"));
                }
                Ending::TimedOut => {
                    report.run.error = Some(format!(
                        "timed out after {} s; it and every process of its group were killed",
                        hook.timeout.as_secs()
                    ));
                }
                Ending::Cancelled => {
                    report.run.error = Some(
                        "the turn was cancelled; it and every process of its group were killed"
                            .to_owned(),
                    );
                }
            }
            if leftovers && report.run.outcome != HookOutcome::Failed {
                tracing::debug!(hook = %hook.name, "processes a hook left running were killed");
            }
        }
    }
    report.run.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    report
}

/// Whether exit 2 means "block" for hooks of `event` (for `PostToolUse`: "tell the model").
fn can_block(event: HookEvent) -> bool {
    matches!(
        event,
        HookEvent::PreToolUse
            | HookEvent::PostToolUse
            | HookEvent::UserPromptSubmit
            | HookEvent::Stop
    )
}

/// Whether `program` can be started, in words if not (the configuration checked it when it was
/// loaded; it may have gone since).
fn check_program(program: &Path) -> Result<(), String> {
    if !program.is_absolute() {
        // Never resolved against the daemon's working directory.
        return Err(format!("cannot start `{}`: not an absolute path", program.display()));
    }
    match std::fs::metadata(program) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            Err(format!("cannot start `{}`: it does not exist", program.display()))
        }
        Err(error) => Err(format!("cannot start `{}`: {error}", program.display())),
        Ok(metadata) if !metadata.is_file() => {
            Err(format!("cannot start `{}`: it is not a regular file", program.display()))
        }
        Ok(metadata) if metadata.permissions().mode() & 0o111 == 0 => {
            Err(format!("cannot start `{}`: it is not executable", program.display()))
        }
        Ok(_) => Ok(()),
    }
}

async fn run(
    hook: &HookSpec,
    set: &HookSet,
    input: &serde_json::Value,
    workspace: &Path,
    cancel: &CancellationToken,
) -> Result<(Ending, Capture, Capture, bool), String> {
    check_program(&hook.program)?;
    let mut command = tokio::process::Command::new(&hook.program);
    command
        .args(&hook.args)
        .current_dir(workspace)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    for variable in &set.env_remove {
        command.env_remove(variable);
    }
    let mut child = command
        .spawn()
        .map_err(|error| format!("cannot start `{}`: {error}", hook.program.display()))?;
    let Some(pid) = child.id().and_then(|pid| i32::try_from(pid).ok()) else {
        return Err("the hook exited before it could be tracked".to_owned());
    };
    // From here on, dropping this future kills the group.
    let mut group = GroupGuard { group: Pid::from_raw(pid), armed: true };
    let (Some(mut stdin), Some(mut stdout), Some(mut stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err("the hook's standard streams could not be opened".to_owned());
    };
    // Standard input is written beside the reads: a hook that does not read it (or reads it
    // late) never stalls its own output. A hook that exits without reading is no error.
    let bytes = serde_json::to_vec(input).unwrap_or_default();
    let writer = tokio::spawn(async move {
        let _ = stdin.write_all(&bytes).await;
        let _ = stdin.shutdown().await;
    });
    let mut out = Capture::new(HOOK_OUTPUT_CAP);
    let mut err = Capture::new(HOOK_OUTPUT_CAP);
    let (mut out_buffer, mut err_buffer) = (vec![0_u8; 8192], vec![0_u8; 8192]);
    let (mut out_open, mut err_open) = (true, true);
    let deadline = tokio::time::sleep(hook.timeout);
    tokio::pin!(deadline);
    let ending = loop {
        tokio::select! {
            // Cancel-safe: a read that loses the race has consumed nothing.
            read = stdout.read(&mut out_buffer), if out_open => match read {
                Ok(0) | Err(_) => out_open = false,
                Ok(count) => out.push(&out_buffer[..count]),
            },
            read = stderr.read(&mut err_buffer), if err_open => match read {
                Ok(0) | Err(_) => err_open = false,
                Ok(count) => err.push(&err_buffer[..count]),
            },
            // Cancel-safe: `Child::wait` can be polled again after losing a race.
            status = child.wait() => break match status {
                Ok(status) => Ending::Exited(status),
                Err(error) => Ending::WaitFailed(error),
            },
            // Cancel-safe: the sleep is pinned outside the loop and keeps its deadline.
            () = &mut deadline => break Ending::TimedOut,
            () = cancel.cancelled() => break Ending::Cancelled,
        }
    };
    let leftovers = match ending {
        Ending::Exited(_) | Ending::WaitFailed(_) => {
            drain(&mut stdout, &mut stderr, &mut out, &mut err, out_open, err_open).await;
            group.kill()
        }
        Ending::TimedOut | Ending::Cancelled => {
            group.kill();
            let _ = tokio::time::timeout(DRAIN_GRACE, child.wait()).await;
            drain(&mut stdout, &mut stderr, &mut out, &mut err, out_open, err_open).await;
            false
        }
    };
    group.armed = false;
    writer.abort();
    Ok((ending, out, err, leftovers))
}

/// Reads what is left in both pipes until end-of-file or [`DRAIN_GRACE`] passes.
async fn drain(
    stdout: &mut tokio::process::ChildStdout,
    stderr: &mut tokio::process::ChildStderr,
    out: &mut Capture,
    err: &mut Capture,
    out_open: bool,
    err_open: bool,
) {
    let read_out = async {
        let mut buffer = vec![0_u8; 8192];
        if out_open {
            loop {
                match stdout.read(&mut buffer).await {
                    Ok(0) | Err(_) => break,
                    Ok(count) => out.push(&buffer[..count]),
                }
            }
        }
    };
    let read_err = async {
        let mut buffer = vec![0_u8; 8192];
        if err_open {
            loop {
                match stderr.read(&mut buffer).await {
                    Ok(0) | Err(_) => break,
                    Ok(count) => err.push(&buffer[..count]),
                }
            }
        }
    };
    let reading = async { tokio::join!(read_out, read_err) };
    let _ = tokio::time::timeout(DRAIN_GRACE, reading).await;
}

#[cfg(test)]
mod tests;
