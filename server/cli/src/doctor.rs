//! `dsh doctor`: checks this installation without starting a daemon — the state directory,
//! the API key's source, what the kernel offers the command sandbox and what would confine
//! commands with these settings (a confined command is actually run), and the running daemon.
//!
//! Each check is `ok`, `warn` or `fail`; the command exits 1 when one fails. A sandbox weaker
//! than its policy is a warning: dsh still works, every command asks for approval.
#![allow(clippy::print_stdout)] // a CLI command prints its report

use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use dsh_daemon::Client;
use dsh_daemon::client::connect_running;
use dsh_daemon::startup::API_KEY_ENV;
use dsh_protocol::NoParams;
use dsh_protocol::method;
use dsh_sandbox::Sandbox;
use serde::Serialize;

use crate::settings::{SANDBOX_HELPER, Settings};

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Level {
    Ok,
    Warn,
    Fail,
}

/// One line of the report.
#[derive(Debug, Serialize)]
struct Check {
    name: String,
    level: Level,
    detail: String,
}

fn check(name: &str, level: Level, detail: impl Into<String>) -> Check {
    Check { name: name.to_owned(), level, detail: detail.into() }
}

/// Runs every check and prints the report.
pub async fn doctor(settings: &Settings) -> anyhow::Result<ExitCode> {
    let mut checks = vec![state_directory(settings), configuration(settings), api_key(settings)];
    let config = settings.daemon_config();
    let hidden = config.hidden_paths();
    let sandbox_config = settings.sandbox.clone();
    let sandbox = tokio::task::spawn_blocking(move || {
        Arc::new(Sandbox::new(sandbox_config, Some(PathBuf::from(SANDBOX_HELPER)), hidden))
    })
    .await?;
    checks.extend(sandbox_checks(&sandbox));
    checks.push(confined_command(&sandbox).await);
    checks.extend(daemon(settings).await);

    if settings.json {
        println!("{}", serde_json::to_string_pretty(&checks)?);
    } else {
        for check in &checks {
            let level = match check.level {
                Level::Ok => "ok  ",
                Level::Warn => "warn",
                Level::Fail => "FAIL",
            };
            println!("{level}  {}: {}", check.name, check.detail);
        }
    }
    let failed = checks.iter().any(|check| check.level == Level::Fail);
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

fn state_directory(settings: &Settings) -> Check {
    let home = settings.home.root();
    let name = "state directory";
    match std::fs::metadata(home) {
        Err(_) => check(name, Level::Ok, format!("{} (created on first use)", home.display())),
        Ok(metadata) => {
            let mode = metadata.permissions().mode() & 0o777;
            if mode & 0o022 != 0 {
                check(
                    name,
                    Level::Fail,
                    format!(
                        "{} is writable by other users (mode {mode:o}): chmod go-w {}",
                        home.display(),
                        home.display()
                    ),
                )
            } else {
                check(name, Level::Ok, format!("{} (mode {mode:o})", home.display()))
            }
        }
    }
}

/// The configuration as it resolves for the current directory (`dsh config` shows it whole).
fn configuration(settings: &Settings) -> Check {
    let name = "configuration";
    let workspace = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    match crate::config_command::resolve(settings, &workspace) {
        Ok(config) => {
            let profiles = config.profiles.keys().cloned().collect::<Vec<_>>().join(", ");
            let default = match config.pick(None, None) {
                Ok((profile, model)) => format!("{}/{model}", profile.name),
                Err(error) => error.to_string(),
            };
            check(name, Level::Ok, format!("profiles {profiles}; new sessions use {default}"))
        }
        Err(error) => check(name, Level::Fail, error.to_string()),
    }
}

fn api_key(settings: &Settings) -> Check {
    let name = "API key";
    if std::env::var_os(API_KEY_ENV).is_some_and(|key| !key.is_empty()) {
        return check(
            name,
            Level::Ok,
            format!(
                "from {API_KEY_ENV} (a daemon this starts gets it over a pipe, not its environment)"
            ),
        );
    }
    let file = settings.home.legacy_key_file();
    match std::fs::metadata(&file) {
        Ok(metadata) if metadata.permissions().mode() & 0o077 == 0 => {
            check(name, Level::Ok, format!("from {} (mode 0600)", file.display()))
        }
        Ok(metadata) => check(
            name,
            Level::Fail,
            format!(
                "{} has mode {:o}: chmod 600 {}",
                file.display(),
                metadata.permissions().mode() & 0o777,
                file.display()
            ),
        ),
        Err(_) => check(
            name,
            Level::Warn,
            format!("none: set {API_KEY_ENV} or write the key to {} (mode 0600)", file.display()),
        ),
    }
}

fn sandbox_checks(sandbox: &Sandbox) -> Vec<Check> {
    let status = sandbox.status();
    let mut checks = Vec::new();
    for feature in &status.features {
        let level = if feature.used || status.policy == "full" { Level::Ok } else { Level::Warn };
        let state = match (feature.available, feature.used) {
            (_, true) => "in use",
            (true, false) => "available, not used",
            (false, false) => "unavailable",
        };
        checks.push(check(
            &format!("sandbox: {}", feature.name),
            level,
            format!("{state}: {}", feature.detail),
        ));
    }
    let network = if status.network { "network on" } else { "network off" };
    let in_force =
        if status.in_force.is_empty() { "nothing".to_owned() } else { status.in_force.join(", ") };
    let level = if status.warnings.is_empty() { Level::Ok } else { Level::Warn };
    let mut detail = format!("policy {} · {network} · in force: {in_force}", status.policy);
    if !status.limits.is_empty() {
        detail.push_str(&format!("\n      limits per command: {}", status.limits));
    }
    for warning in &status.warnings {
        detail.push_str("\n      ");
        detail.push_str(warning);
    }
    checks.push(check("sandbox", level, detail));
    checks
}

/// Runs `sh -c true` as a session's command would run, in a scratch workspace.
async fn confined_command(sandbox: &Arc<Sandbox>) -> Check {
    let name = "confined command";
    let workspace = match tempfile::tempdir().and_then(|dir| Ok((dir.path().canonicalize()?, dir)))
    {
        Ok(workspace) => workspace,
        Err(error) => return check(name, Level::Fail, format!("no scratch workspace: {error}")),
    };
    let session = match sandbox.session(&workspace.0) {
        Ok(session) => session,
        Err(error) => return check(name, Level::Fail, format!("no temporary directory: {error}")),
    };
    if !session.confines() {
        return check(name, Level::Warn, "commands run unconfined: nothing to try");
    }
    let mut command =
        tokio::process::Command::from(session.shell("echo confined > proof && cat proof", false));
    let started = Instant::now();
    match command.output().await {
        Ok(output) if output.status.success() && output.stdout.starts_with(b"confined") => check(
            name,
            Level::Ok,
            format!("`sh -c` ran confined in {} ms", started.elapsed().as_millis()),
        ),
        Ok(output) => check(
            name,
            Level::Fail,
            format!(
                "a confined command failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ),
        ),
        Err(error) => check(name, Level::Fail, format!("cannot start the sandbox helper: {error}")),
    }
}

/// The running daemon, and the workspace checkpoint stores it has opened.
async fn daemon(settings: &Settings) -> Vec<Check> {
    let name = "daemon";
    let Some(stream) = connect_running(settings.home.root()).await else {
        return vec![check(name, Level::Ok, "not running (a command starts one when needed)")];
    };
    let (reader, writer) = stream.into_split();
    let (client, _) = Client::new(reader, writer);
    match client.call::<method::DaemonStatus>(NoParams {}).await {
        Ok(status) => {
            let sandbox = &status.sandbox;
            let level = if sandbox.warnings.is_empty() { Level::Ok } else { Level::Warn };
            let mut detail = format!(
                "pid {} · sandbox {} · in force: {}",
                status.pid,
                sandbox.policy,
                if sandbox.in_force.is_empty() {
                    "nothing".to_owned()
                } else {
                    sandbox.in_force.join(", ")
                }
            );
            for warning in &sandbox.warnings {
                detail.push_str("\n      ");
                detail.push_str(warning);
            }
            let mut checks = vec![check(name, level, detail)];
            checks.extend(status.checkpoints.iter().map(checkpoint_store));
            checks
        }
        Err(error) => {
            vec![check(name, Level::Fail, format!("it does not answer daemon/status: {error}"))]
        }
    }
}

/// A workspace's checkpoint store: its size against its budget, what collection dropped to
/// keep within it, what crash recovery did.
fn checkpoint_store(store: &dsh_protocol::CheckpointStoreStatus) -> Check {
    let mut detail =
        format!("{} · {} of {} budget", store.workspace, bytes(store.bytes), bytes(store.budget));
    let mut level = Level::Ok;
    if !store.dropped.is_empty() {
        level = Level::Warn;
        detail.push_str(&format!(
            "\n      {} checkpoint(s) dropped, oldest first, to keep within the budget \
             (a rewind to them is refused; raise [checkpoints] budget to keep more)",
            store.dropped.len()
        ));
    }
    if let Some(recovered) = &store.recovered {
        level = Level::Warn;
        detail.push_str("\n      ");
        detail.push_str(recovered);
    }
    if let Some(watch) = &store.watch {
        level = Level::Warn;
        detail.push_str("\n      every checkpoint walks the whole tree: ");
        detail.push_str(watch);
    }
    check("checkpoints", level, detail)
}

/// A byte count for people.
pub(crate) fn bytes(count: u64) -> String {
    match count {
        0..1024 => format!("{count} B"),
        1024..1_048_576 => format!("{:.1} KiB", count as f64 / 1024.0),
        1_048_576..1_073_741_824 => format!("{:.1} MiB", count as f64 / 1_048_576.0),
        _ => format!("{:.1} GiB", count as f64 / 1_073_741_824.0),
    }
}
