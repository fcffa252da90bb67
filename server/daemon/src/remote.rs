//! CLI commands as clients of the daemon: `prompt`, `inject`, `cancel`, `fork`, `sessions`,
//! `usage`, `saw`, `compact`, `status`, `shutdown`, and the `stdio` bridge. Output is the same as
//! the views print; `--json` prints the API's result.
#![allow(clippy::print_stdout, clippy::print_stderr)] // CLI commands print

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use dsh_protocol::{
    ApprovalChoice, ApprovalRespondParams, ClientInfo, InitializeParams, PROTOCOL_VERSION,
    SessionCancelResult, SessionCreateParams, SessionEvent, SessionEventsParams,
    SessionEventsResult, SessionForkParams, SessionIdResult, SessionInjectParams,
    SessionInjectResult, SessionListParams, SessionListResult, SessionParams, SessionPromptParams,
    SessionPromptResult, SessionRequestParams, SessionRequestResult, SessionSubscribeParams,
    SessionUsageResult, WhenBusy, method,
};
use dsh_session::{Event, EventData, StopReason, UsageRow, decode_event};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::client::{Client, Notification, SpawnOptions, connect_or_start};
use crate::printer::print_turn;
use crate::settings::Settings;

/// Connects to (or starts) the daemon and says hello.
pub async fn connect(
    settings: &Settings,
) -> anyhow::Result<(Arc<Client>, mpsc::Receiver<Notification>)> {
    let stream = connect_or_start(settings.home.root(), &spawn_options(settings)).await?;
    let (client, notifications) = Client::new(stream);
    let _: Value = client
        .call(
            method::INITIALIZE,
            InitializeParams {
                client_info: ClientInfo {
                    name: "dsh-cli".to_owned(),
                    version: Some(env!("CARGO_PKG_VERSION").to_owned()),
                },
                protocol_version: PROTOCOL_VERSION,
            },
        )
        .await
        .context("greeting the daemon")?;
    if settings.base_url_explicit {
        // A running daemon keeps the provider it was started with: never let a command meant
        // for one provider (the offline mock, say) silently go to another.
        let status: dsh_protocol::DaemonStatusResult =
            client.call(method::DAEMON_STATUS, json!({})).await?;
        if status.base_url.trim_end_matches('/') != settings.base_url.trim_end_matches('/') {
            anyhow::bail!(
                "the dsh daemon for {} uses the provider at {}, not {}: run `dsh shutdown` first to start one with the new base URL",
                settings.home.root().display(),
                status.base_url,
                settings.base_url
            );
        }
    }
    Ok((Arc::new(client), notifications))
}

/// What a client passes to a daemon it starts.
pub fn spawn_options(settings: &Settings) -> SpawnOptions {
    let mut global_args = vec!["--base-url".to_owned(), settings.base_url.clone()];
    if settings.model_explicit {
        global_args.extend(["--model".to_owned(), settings.model.clone()]);
    }
    SpawnOptions { global_args }
}

/// A `session/event` result as a log event.
pub fn to_event(value: &Value) -> Option<(String, Event)> {
    let event: SessionEvent = serde_json::from_value(value.clone()).ok()?;
    let line =
        json!({"seq": event.seq, "time": event.time, "type": event.kind, "data": event.data})
            .to_string();
    let decoded = decode_event(&line, 0).ok()?;
    Some((event.session_id, decoded))
}

/// Options of `dsh prompt`.
pub struct PromptOptions {
    /// The workspace of a new session.
    pub workspace: std::path::PathBuf,
    /// Continue this session.
    pub session: Option<String>,
    /// Approve every tool call.
    pub yes: bool,
    /// Steps per turn (new sessions).
    pub max_steps: Option<u32>,
    /// The prompt.
    pub text: String,
}

/// `dsh prompt`: runs one turn through the daemon and streams it.
pub async fn prompt(settings: &Settings, options: PromptOptions) -> anyhow::Result<ExitCode> {
    let (client, mut notifications) = connect(settings).await?;
    let session_id = match &options.session {
        Some(id) => id.clone(),
        None => {
            let workspace = options
                .workspace
                .canonicalize()
                .with_context(|| format!("workspace {}", options.workspace.display()))?;
            let config = dsh_protocol::SessionConfig {
                model: settings.model_explicit.then(|| settings.model.clone()),
                max_tokens: None,
                thinking: None,
                reasoning_effort: None,
                temperature: None,
                max_steps: options.max_steps,
            };
            let created: SessionIdResult = client
                .call(
                    method::SESSION_CREATE,
                    SessionCreateParams {
                        workspace: workspace.display().to_string(),
                        model: None,
                        config: Some(config),
                    },
                )
                .await?;
            created.session_id
        }
    };
    eprintln!("session {session_id}");
    let page: SessionEventsResult = client
        .call(
            method::SESSION_EVENTS,
            SessionEventsParams { session_id: session_id.clone(), from_seq: 0, limit: 0 },
        )
        .await?;
    let _: Value = client
        .call(
            method::SESSION_SUBSCRIBE,
            SessionSubscribeParams { session_id: session_id.clone(), from_seq: Some(page.length) },
        )
        .await?;

    let (events, received) = mpsc::channel(4096);
    let usage_client = Arc::clone(&client);
    let usage_session = session_id.clone();
    let printer = tokio::spawn(async move {
        let usage = move |step: u64| {
            let client = Arc::clone(&usage_client);
            let session_id = usage_session.clone();
            async move { usage_row(&client, &session_id, step).await }
        };
        print_turn(received, usage).await;
    });
    let prompt_client = Arc::clone(&client);
    let prompt_session = session_id.clone();
    let text = options.text.clone();
    let mut turn = tokio::spawn(async move {
        prompt_client
            .call::<_, SessionPromptResult>(
                method::SESSION_PROMPT,
                SessionPromptParams {
                    session_id: prompt_session,
                    text,
                    when_busy: Some(WhenBusy::Reject),
                },
            )
            .await
    });
    let mut interrupts = 0;
    // One SIGINT stream for the whole turn: a Ctrl-C pressed while another branch runs is kept.
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .context("listening for Ctrl-C")?;
    let outcome = loop {
        // Cancel-safety: `recv` is cancel-safe; polling the JoinHandle by reference is
        // cancel-safe; `recv` on the signal stream is cancel-safe.
        tokio::select! {
            note = notifications.recv() => {
                let Some((_, value)) = note else { continue };
                let Some((_, event)) = to_event(&value) else { continue };
                if let EventData::ApprovalRequest(request) = &event.data {
                    let client = Arc::clone(&client);
                    let session_id = session_id.clone();
                    let request = request.clone();
                    let yes = options.yes;
                    tokio::spawn(async move { answer_approval(&client, &session_id, request, yes).await });
                }
                let _ = events.send(event).await;
            }
            joined = &mut turn => break joined.context("the prompt task failed")?,
            _ = interrupt.recv() => {
                interrupts += 1;
                if interrupts > 1 {
                    return Ok(ExitCode::from(130));
                }
                eprintln!("\ncancelling the turn (Ctrl-C again to quit)…");
                let _: anyhow::Result<SessionCancelResult> = client
                    .call(method::SESSION_CANCEL, SessionParams { session_id: session_id.clone() })
                    .await;
            }
        }
    };
    // The turn's last notifications may arrive after its answer: let the printer see them.
    let drain = async {
        while let Some((_, value)) = notifications.recv().await {
            if let Some((_, event)) = to_event(&value)
                && events.send(event).await.is_err()
            {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), drain).await;
    drop(events);
    let _ = printer.await;
    match outcome {
        Ok(result) => {
            if let Some(error) = &result.error {
                // The transcript went to stdout; the reason the turn failed also goes to stderr,
                // where a script piping stdout still sees it.
                eprintln!("dsh: the turn failed: {error}");
            }
            Ok(match result.stop_reason {
                StopReason::Completed | StopReason::MaxSteps => ExitCode::SUCCESS,
                StopReason::Cancelled => ExitCode::from(130),
                StopReason::Error => ExitCode::FAILURE,
            })
        }
        Err(error) => {
            eprintln!("dsh: {error:#}");
            Ok(ExitCode::FAILURE)
        }
    }
}

async fn usage_row(client: &Client, session_id: &str, step: u64) -> Option<UsageRow> {
    let usage: SessionUsageResult = client
        .call(method::SESSION_USAGE, SessionParams { session_id: session_id.to_owned() })
        .await
        .ok()?;
    usage.rows.into_iter().map(|entry| entry.row).find(|row| row.step == step)
}

async fn answer_approval(
    client: &Client,
    session_id: &str,
    request: dsh_session::ApprovalRequest,
    yes: bool,
) {
    let decision = if yes {
        ApprovalChoice::Allow
    } else if std::io::stdin().is_terminal() {
        let summary = request.summary.clone();
        let answer = tokio::task::spawn_blocking(move || {
            eprint!("allow {summary}? [y]es / [a]lways / [N]o: ");
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).map(|_| line)
        })
        .await;
        match answer.ok().and_then(Result::ok).as_deref().map(str::trim) {
            Some("y" | "Y" | "yes") => ApprovalChoice::Allow,
            Some("a" | "A" | "always") => ApprovalChoice::AllowAlways,
            _ => ApprovalChoice::Deny,
        }
    } else {
        eprintln!(
            "denied {} (no terminal to ask on; pass --yes to approve tool calls)",
            request.summary
        );
        ApprovalChoice::Deny
    };
    let params = ApprovalRespondParams {
        session_id: session_id.to_owned(),
        approval_id: request.approval_id,
        decision,
    };
    if let Err(error) = client.call::<_, Value>(method::APPROVAL_RESPOND, params).await {
        eprintln!("dsh: answering the approval: {error:#}");
    }
}

fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// `dsh inject SESSION TEXT`.
pub async fn inject(
    settings: &Settings,
    session_id: &str,
    text: String,
) -> anyhow::Result<ExitCode> {
    let (client, _) = connect(settings).await?;
    let result: SessionInjectResult = client
        .call(
            method::SESSION_INJECT,
            SessionInjectParams { session_id: session_id.to_owned(), text },
        )
        .await?;
    if settings.json {
        print_json(&result)?;
    } else {
        println!("steering message logged at seq {}; it joins the next request", result.seq);
    }
    Ok(ExitCode::SUCCESS)
}

/// `dsh cancel SESSION`.
pub async fn cancel(settings: &Settings, session_id: &str) -> anyhow::Result<ExitCode> {
    let (client, _) = connect(settings).await?;
    let result: SessionCancelResult = client
        .call(method::SESSION_CANCEL, SessionParams { session_id: session_id.to_owned() })
        .await?;
    if settings.json {
        print_json(&result)?;
    } else if result.cancelled {
        println!("cancelled the running turn of {session_id}");
    } else {
        println!("no turn is running in {session_id}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `dsh fork SESSION [--at SEQ]`.
pub async fn fork(
    settings: &Settings,
    session_id: &str,
    at: Option<u64>,
) -> anyhow::Result<ExitCode> {
    let (client, _) = connect(settings).await?;
    let result: SessionIdResult = client
        .call(
            method::SESSION_FORK,
            SessionForkParams { session_id: session_id.to_owned(), at_seq: at, config: None },
        )
        .await?;
    if settings.json {
        print_json(&result)?;
    } else {
        println!("forked {session_id} into {}", result.session_id);
    }
    Ok(ExitCode::SUCCESS)
}

/// `dsh sessions [--workspace DIR]`.
pub async fn sessions(settings: &Settings, workspace: &Path) -> anyhow::Result<ExitCode> {
    let (client, _) = connect(settings).await?;
    let workspace =
        workspace.canonicalize().with_context(|| format!("workspace {}", workspace.display()))?;
    let result: SessionListResult = client
        .call(
            method::SESSION_LIST,
            SessionListParams { workspace: Some(workspace.display().to_string()) },
        )
        .await?;
    if settings.json {
        print_json(&result)?;
        return Ok(ExitCode::SUCCESS);
    }
    if result.sessions.is_empty() {
        println!("no sessions in this workspace");
    }
    for summary in &result.sessions {
        let fork = summary
            .forked_from
            .as_ref()
            .map(|f| format!(" (fork of {} at seq {})", f.session_id, f.seq))
            .unwrap_or_default();
        let running = if summary.running { " [running]" } else { "" };
        println!(
            "{}  {:>3} turns {:>4} steps  {}{fork}{running}",
            summary.session_id,
            summary.turns,
            summary.steps,
            summary.title.as_deref().unwrap_or("(no prompt yet)")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `dsh usage SESSION`.
pub async fn usage(settings: &Settings, session_id: &str) -> anyhow::Result<ExitCode> {
    let (client, _) = connect(settings).await?;
    let result: SessionUsageResult = client
        .call(method::SESSION_USAGE, SessionParams { session_id: session_id.to_owned() })
        .await?;
    if settings.json {
        print_json(&result)?;
    } else {
        let rows: Vec<UsageRow> = result.rows.into_iter().map(|entry| entry.row).collect();
        print!("{}", crate::views::usage_table(&rows));
    }
    Ok(ExitCode::SUCCESS)
}

/// `dsh saw SESSION --step N [--wire | --diff]`.
pub async fn saw(
    settings: &Settings,
    session_id: &str,
    step: u64,
    wire: bool,
    diff: bool,
) -> anyhow::Result<ExitCode> {
    let (client, _) = connect(settings).await?;
    if diff && step < 2 {
        anyhow::bail!("step 1 has no previous step to diff against");
    }
    let result: SessionRequestResult = client
        .call(
            method::SESSION_REQUEST,
            SessionRequestParams { session_id: session_id.to_owned(), step, diff: Some(diff) },
        )
        .await?;
    if wire {
        use std::io::Write;
        std::io::stdout()
            .write_all(result.wire.body.as_bytes())
            .context("writing the wire body")?;
    } else if settings.json {
        print_json(&result)?;
    } else if diff {
        print!("{}", result.diff.unwrap_or_default());
    } else {
        print!("{}", crate::views::saw_result_text(&result));
    }
    Ok(ExitCode::SUCCESS)
}

/// `dsh status`.
pub async fn status(settings: &Settings) -> anyhow::Result<ExitCode> {
    let (client, _) = connect(settings).await?;
    let result: dsh_protocol::DaemonStatusResult =
        client.call(method::DAEMON_STATUS, json!({})).await?;
    if settings.json {
        print_json(&result)?;
    } else {
        println!(
            "dsh daemon {} · pid {} · home {} · {} clients · up {}s",
            result.version,
            result.pid,
            result.home,
            result.clients,
            result.uptime_ms / 1000
        );
        for session in &result.sessions {
            let state = match (&session.failed, session.running) {
                (Some(reason), _) => format!("failed: {reason}"),
                (None, true) => "running".to_owned(),
                (None, false) => "idle".to_owned(),
            };
            println!("  {} {state}", session.session_id);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `dsh shutdown`: stops the daemon if one runs (never starts one).
pub async fn shutdown(settings: &Settings) -> anyhow::Result<ExitCode> {
    let socket = settings.home.root().join(crate::daemon::serve::SOCKET_FILE);
    let Ok(stream) = tokio::net::UnixStream::connect(&socket).await else {
        println!("no dsh daemon is running for {}", settings.home.root().display());
        return Ok(ExitCode::SUCCESS);
    };
    let (client, _) = Client::new(stream);
    let status: dsh_protocol::DaemonStatusResult =
        client.call(method::DAEMON_STATUS, json!({})).await?;
    let _: Value = client.call(method::DAEMON_SHUTDOWN, json!({})).await?;
    drop(client);
    // Wait for it to be gone (turns cancelled and logged, logs flushed), so the next command
    // starts a fresh daemon instead of meeting one that is stopping.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while alive(status.pid) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    if alive(status.pid) {
        println!("the dsh daemon (pid {}) is still stopping", status.pid);
    } else {
        println!("the dsh daemon (pid {}) stopped", status.pid);
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether process `pid` still runs (a zombie — exited, not yet reaped by its parent — does not).
fn alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    // The state is the first field after the parenthesized command name.
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, Some('Z' | 'X') | None)
}

/// `dsh stdio`: bridges stdin/stdout to the daemon's socket, line for line.
pub async fn stdio_bridge(settings: &Settings) -> anyhow::Result<ExitCode> {
    let stream = connect_or_start(settings.home.root(), &spawn_options(settings)).await?;
    let (mut from_daemon, mut to_daemon) = stream.into_split();
    let upstream = tokio::spawn(async move {
        let mut stdin = tokio::io::stdin();
        let _ = tokio::io::copy(&mut stdin, &mut to_daemon).await;
        // Half-close: the daemon answers what it has read, then closes its side.
        use tokio::io::AsyncWriteExt;
        let _ = to_daemon.shutdown().await;
    });
    // The bridge ends when the daemon closes the connection (after stdin's end, or when the
    // daemon stops).
    let mut stdout = tokio::io::stdout();
    let copied = tokio::io::copy(&mut from_daemon, &mut stdout).await;
    upstream.abort();
    copied.context("copying the daemon's answers to stdout")?;
    Ok(ExitCode::SUCCESS)
}

/// `dsh compact SESSION`.
pub async fn compact(settings: &Settings, session_id: &str) -> anyhow::Result<ExitCode> {
    let (client, _) = connect(settings).await?;
    let result: dsh_protocol::SessionCompactResult = client
        .call(method::SESSION_COMPACT, SessionParams { session_id: session_id.to_owned() })
        .await?;
    if settings.json {
        print_json(&result)?;
    } else {
        println!("{}", result.message);
    }
    Ok(ExitCode::SUCCESS)
}
