//! CLI commands as clients of the daemon, through the typed client of `dsh-daemon`: `prompt`,
//! `inject`, `cancel`, `fork`, `rewind`, `checkpoints`, `sessions`, `usage`, `saw`, `audit`, `compact`, `status`,
//! `shutdown`, and the `stdio` bridge. Output is the same as the text views print; `--json`
//! prints the API's result.
#![allow(clippy::print_stdout, clippy::print_stderr)] // CLI commands print

use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use dsh_daemon::client::{SpawnOptions, connect_or_start, connect_running, event_of};
use dsh_daemon::{Client, Unsolicited};
use dsh_protocol::method::{self, Method};
use dsh_protocol::{
    ApprovalChoice, ApprovalRespondParams, NoParams, SessionAuditResult, SessionCreateParams,
    SessionEventsParams, SessionForkParams, SessionInjectParams, SessionListParams, SessionParams,
    SessionPromptParams, SessionRequestParams, SessionSubscribeParams, SessionSummary, UsageEntry,
    WhenBusy,
};
use dsh_session::{EventData, StopReason};
use serde_json::json;
use tokio::sync::mpsc;

use crate::printer::print_turn;
use crate::settings::Settings;

mod connect;
mod rewind;
mod turn;
mod web;

pub use connect::*;
use connect::{join, refusal};
pub use rewind::*;
pub use turn::*;
pub use web::*;

/// What arrives on a connection besides answers.
type Inbox = mpsc::UnboundedReceiver<Unsolicited>;

fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

fn session(session_id: &str) -> SessionParams {
    SessionParams { session_id: session_id.to_owned() }
}

/// One call, its result printed: the API's JSON with `--json`, else `text` of it.
async fn call_and_print<M: Method>(
    settings: &Settings,
    params: M::Params,
    text: impl FnOnce(&M::Result) -> String,
) -> anyhow::Result<ExitCode> {
    let (client, _) = connect(settings).await?;
    let result = client.call::<M>(params).await?;
    if settings.json {
        print_json(&result)?;
    } else {
        print!("{}", text(&result));
    }
    Ok(ExitCode::SUCCESS)
}

/// `dsh inject SESSION TEXT`.
pub async fn inject(
    settings: &Settings,
    session_id: &str,
    text: String,
) -> anyhow::Result<ExitCode> {
    let params = SessionInjectParams { session_id: session_id.to_owned(), text };
    call_and_print::<method::SessionInject>(settings, params, |result| {
        format!("steering message logged at seq {}; it joins the next request\n", result.seq)
    })
    .await
}

/// `dsh cancel SESSION`.
pub async fn cancel(settings: &Settings, session_id: &str) -> anyhow::Result<ExitCode> {
    call_and_print::<method::SessionCancel>(settings, session(session_id), |result| {
        if result.cancelled {
            format!("cancelled the running turn of {session_id}\n")
        } else {
            format!("no turn is running in {session_id}\n")
        }
    })
    .await
}

/// `dsh fork SESSION [--at SEQ | --step N]`.
pub async fn fork(
    settings: &Settings,
    session_id: &str,
    at_seq: Option<u64>,
    at_step: Option<u64>,
) -> anyhow::Result<ExitCode> {
    // `--provider` / `--model` move the fork to another profile or model, `--base-url` (the
    // flag, not `DEEPSEEK_BASE_URL` from the environment) to another URL.
    let url_flag = settings
        .base_url
        .as_ref()
        .is_some_and(|url| matches!(url.source, dsh_config::Source::Flag(_)));
    let config = (settings.provider.is_some() || settings.model.is_some() || url_flag).then(|| {
        let mut config = settings.session_config();
        if !url_flag {
            config.base_url = None;
        }
        config
    });
    let params = SessionForkParams { session_id: session_id.to_owned(), at_seq, at_step, config };
    call_and_print::<method::SessionFork>(settings, params, |result| {
        format!("forked {session_id} into {}\n", result.session_id)
    })
    .await
}

/// `dsh sessions [--workspace DIR]`.
pub async fn sessions(settings: &Settings, workspace: &Path) -> anyhow::Result<ExitCode> {
    let (client, _) = connect(settings).await?;
    let workspace =
        workspace.canonicalize().with_context(|| format!("workspace {}", workspace.display()))?;
    let params = SessionListParams { workspace: Some(workspace.display().to_string()) };
    let result = client.call::<method::SessionList>(params).await?;
    let broken = result.sessions.iter().filter(|summary| summary.error.is_some()).count();
    if settings.json {
        print_json(&result)?;
        return Ok(if broken == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE });
    }
    if result.sessions.is_empty() {
        println!("no sessions in this workspace");
    }
    for summary in nested(&result.sessions) {
        let (summary, depth) = summary;
        let indent = "  ".repeat(depth);
        if let Some(error) = &summary.error {
            println!("{indent}{}  ! unreadable: {error}", summary.session_id);
            continue;
        }
        let fork = summary
            .forked_from
            .as_ref()
            .map(|f| format!(" (fork of {} at seq {})", f.session_id, f.seq))
            .unwrap_or_default();
        let running = if summary.running { " [running]" } else { "" };
        let cost = summary
            .cost
            .as_ref()
            .map_or_else(|| "-".to_owned(), |cost| crate::text::money(cost.amount, &cost.currency));
        let provider = match (&summary.profile, &summary.model) {
            (Some(profile), Some(model)) => format!("{profile}/{model}"),
            (None, Some(model)) => model.clone(),
            _ => "-".to_owned(),
        };
        let fork = if summary.parent.is_some() { "" } else { fork.as_str() };
        let child = summary
            .parent
            .as_ref()
            .map(|parent| {
                format!(" (sub-agent of {}, call {})", parent.session_id, parent.tool_call_id)
            })
            .unwrap_or_default();
        println!(
            "{indent}{}  {:>3} turns {:>4} steps {cost:>11}  {provider}  {}{fork}{child}{running}",
            summary.session_id,
            summary.turns,
            summary.steps,
            summary.title.as_deref().unwrap_or("(no prompt yet)")
        );
    }
    if broken > 0 {
        eprintln!(
            "dsh: {broken} session log(s) of this workspace cannot be read (marked `!` above)"
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// The sessions in listing order, each sub-agent's session right under its parent (indented
/// one level per depth); a child whose parent is not listed stays where it is.
fn nested(sessions: &[SessionSummary]) -> Vec<(&SessionSummary, usize)> {
    let listed = |id: &str| sessions.iter().any(|summary| summary.session_id == id);
    fn parent_id(summary: &SessionSummary) -> Option<&str> {
        summary.parent.as_ref().map(|parent| parent.session_id.as_str())
    }
    let parent_of = |summary: &SessionSummary| parent_id(summary).filter(|id| listed(id)).is_some();
    let child_of = |child: &SessionSummary, parent: &str| parent_id(child) == Some(parent);
    let mut out = Vec::with_capacity(sessions.len());
    let mut stack: Vec<(&SessionSummary, usize)> = sessions
        .iter()
        .rev()
        .filter(|summary| !parent_of(summary))
        .map(|summary| (summary, 0))
        .collect();
    while let Some((summary, depth)) = stack.pop() {
        out.push((summary, depth));
        // Bounded by the listing: a session is never its own ancestor (ids are unique and a
        // child is created after its parent), and `out` is checked all the same.
        let children = sessions.iter().rev().filter(|child| {
            child_of(child, &summary.session_id)
                && !out.iter().any(|(seen, _)| seen.session_id == child.session_id)
        });
        stack.extend(children.map(|child| (child, depth + 1)));
    }
    // Whatever no root reached (parents naming each other, in broken logs) is listed all the
    // same: a listing drops no session.
    for summary in sessions {
        if !out.iter().any(|(seen, _)| seen.session_id == summary.session_id) {
            out.push((summary, 0));
        }
    }
    out
}

/// `dsh usage SESSION`.
pub async fn usage(settings: &Settings, session_id: &str) -> anyhow::Result<ExitCode> {
    call_and_print::<method::SessionUsage>(settings, session(session_id), |result| {
        crate::text::usage_table(result)
    })
    .await
}

/// `dsh saw SESSION --step N [--wire | --diff]`.
pub async fn saw(
    settings: &Settings,
    session_id: &str,
    step: u64,
    wire: bool,
    diff: bool,
) -> anyhow::Result<ExitCode> {
    if diff && step < 2 {
        anyhow::bail!("step 1 has no previous step to diff against");
    }
    let (client, _) = connect(settings).await?;
    let params = SessionRequestParams { session_id: session_id.to_owned(), step, diff: Some(diff) };
    let result = client.call::<method::SessionRequest>(params).await?;
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
        print!("{}", dsh_daemon::views::request_text(&result, false));
    }
    Ok(ExitCode::SUCCESS)
}

/// `dsh audit SESSION`, through the daemon — the running one, or else a private one in this
/// process (an audit only reads: it is no reason to start a daemon in the background).
pub async fn audit(settings: &Settings, session_id: &str) -> anyhow::Result<SessionAuditResult> {
    if let Some(stream) = connect_running(settings.home.root()).await {
        let (reader, writer) = stream.into_split();
        let (client, _) = Client::new(reader, writer);
        client.initialize("dsh-cli").await.context("greeting the daemon")?;
        return Ok(client.call::<method::SessionAudit>(session(session_id)).await?);
    }
    let private = PrivateDaemon::start(settings.daemon_config());
    let result = private.client.call::<method::SessionAudit>(session(session_id)).await;
    private.stop().await?;
    Ok(result?)
}

/// A daemon inside this process, spoken to through the typed client over an in-memory pipe
/// (the library's in-process runner: the same code `dsh serve` runs).
pub struct PrivateDaemon {
    /// The connection.
    pub client: Arc<Client>,
    /// What arrives besides answers.
    pub inbox: Inbox,
    runner: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl PrivateDaemon {
    /// Starts one.
    pub fn start(config: dsh_daemon::DaemonConfig) -> PrivateDaemon {
        // One pipe each way, so that dropping the client's writer is an end of input for the
        // daemon (the two halves of one duplex stream only close together).
        let (requests_in, requests_out) = tokio::io::duplex(1 << 20);
        let (answers_in, answers_out) = tokio::io::duplex(1 << 20);
        let stop = tokio_util::sync::CancellationToken::new();
        let runner =
            tokio::spawn(dsh_daemon::serve::serve_on(config, requests_out, answers_in, stop));
        let (client, inbox) = Client::new(answers_out, requests_in);
        PrivateDaemon { client: Arc::new(client), inbox, runner }
    }

    /// Stops it: turns are cancelled and logged, logs flushed.
    pub async fn stop(self) -> anyhow::Result<()> {
        let PrivateDaemon { client, inbox, runner } = self;
        // Closing the connection ends the runner.
        drop(client);
        drop(inbox);
        runner.await.context("the in-process daemon panicked")?
    }
}

/// `dsh status`: the running daemon's status; starts nothing. Exits 1 when none runs (with
/// `--json`: `{"running": false, "home": …}`).
pub async fn status(settings: &Settings) -> anyhow::Result<ExitCode> {
    let home = settings.home.root();
    let Some(stream) = connect_running(home).await else {
        if settings.json {
            print_json(&json!({"running": false, "home": home.display().to_string()}))?;
        } else {
            println!("no dsh daemon is running for {}", home.display());
        }
        return Ok(ExitCode::FAILURE);
    };
    let (reader, writer) = stream.into_split();
    let (client, _) = Client::new(reader, writer);
    let result = client.call::<method::DaemonStatus>(NoParams {}).await?;
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
        let sandbox = &result.sandbox;
        let network = if sandbox.network { "network on" } else { "network off" };
        let in_force = if sandbox.in_force.is_empty() {
            "nothing".to_owned()
        } else {
            sandbox.in_force.join(", ")
        };
        println!("  sandbox {} · {network} · in force: {in_force}", sandbox.policy);
        if !sandbox.limits.is_empty() {
            println!("  limits per command: {}", sandbox.limits);
        }
        for warning in result.warnings.iter().chain(&sandbox.warnings) {
            println!("  warning: {warning}");
        }
        for session in &result.sessions {
            let state = match (&session.failed, session.running) {
                (Some(reason), _) => format!("failed: {reason}"),
                (None, true) => "running".to_owned(),
                (None, false) => "idle".to_owned(),
            };
            println!("  {} {state}", session.session_id);
        }
        for server in &result.mcp_servers {
            // A server's words (its errors, stderr) are defused before they reach the terminal.
            let error = server
                .last_error
                .as_deref()
                .map(|e| format!(" · {}", crate::printer::clean(e)))
                .unwrap_or_default();
            let owner =
                server.session.as_deref().map(|id| format!(" (session {id})")).unwrap_or_default();
            println!(
                "  mcp {}{owner} {} · {} tools{error}",
                server.name,
                server.state,
                server.tools.len()
            );
        }
        for store in &result.checkpoints {
            let dropped = if store.dropped.is_empty() {
                String::new()
            } else {
                format!(" · {} checkpoint(s) dropped over the budget", store.dropped.len())
            };
            println!(
                "  checkpoints {} · {} of {}{dropped}",
                store.workspace,
                crate::doctor::bytes(store.bytes),
                crate::doctor::bytes(store.budget)
            );
            if let Some(recovered) = &store.recovered {
                println!("    {recovered}");
            }
            if let Some(watch) = &store.watch {
                println!("    every checkpoint walks the whole tree: {watch}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `dsh mcp`: the workspace's MCP servers, their state, tools and last error.
pub async fn mcp(settings: &Settings, workspace: &Path, start: bool) -> anyhow::Result<ExitCode> {
    let (client, _) = connect(settings).await?;
    let workspace =
        workspace.canonicalize().with_context(|| format!("workspace {}", workspace.display()))?;
    let params =
        dsh_protocol::McpListParams { workspace: Some(workspace.display().to_string()), start };
    let result = client.call::<method::McpList>(params).await?;
    if settings.json {
        print_json(&result)?;
        return Ok(ExitCode::SUCCESS);
    }
    if result.servers.is_empty() {
        println!(
            "no MCP servers are configured for this workspace ([mcp.servers.NAME] in your configuration file)"
        );
        return Ok(ExitCode::SUCCESS);
    }
    for server in &result.servers {
        // A session's own server (from its editor) says whose it is.
        let owner =
            server.session.as_deref().map(|id| format!(", session {id}")).unwrap_or_default();
        println!(
            "{} ({}{owner}) {} · {} tools · started {} times",
            server.name,
            server.transport,
            server.state,
            server.tools.len(),
            server.starts
        );
        // What a server says (errors, stderr, descriptions, names it offered) is defused
        // before it reaches the terminal.
        use crate::printer::clean;
        if let Some(error) = &server.last_error {
            println!("  last error: {}", clean(error));
        }
        for tool in &server.tools {
            let line = tool.description.lines().next().unwrap_or_default();
            println!("  {}  {}", clean(&tool.name), clean(line));
        }
        for refused in &server.refused {
            println!("  refused: {}", clean(refused));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `dsh shutdown`: stops the daemon if one runs (never starts one).
pub async fn shutdown(settings: &Settings) -> anyhow::Result<ExitCode> {
    let Some(stream) = connect_running(settings.home.root()).await else {
        println!("no dsh daemon is running for {}", settings.home.root().display());
        return Ok(ExitCode::SUCCESS);
    };
    let (reader, writer) = stream.into_split();
    let (client, _) = Client::new(reader, writer);
    let status = client.call::<method::DaemonStatus>(NoParams {}).await?;
    client.call::<method::DaemonShutdown>(NoParams {}).await?;
    drop(client);
    // Wait for it to be gone (turns cancelled and logged, logs flushed), so the next command
    // starts a fresh daemon instead of meeting one that is stopping.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while dsh_sandbox::process_alive(status.pid) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    if dsh_sandbox::process_alive(status.pid) {
        println!("the dsh daemon (pid {}) is still stopping", status.pid);
    } else {
        println!("the dsh daemon (pid {}) stopped", status.pid);
    }
    Ok(ExitCode::SUCCESS)
}

/// `dsh stdio`: bridges stdin/stdout to the daemon's socket, line for line.
pub async fn stdio_bridge(settings: &Settings) -> anyhow::Result<ExitCode> {
    if let Some(url) = &settings.base_url {
        // The bridge copies bytes: it cannot give the client's sessions a base URL.
        eprintln!(
            "dsh stdio: the base URL of {} is not used: through a shared daemon a client passes \
             it with each session (`config.baseUrl` of session/create); `--in-process` makes it \
             the private daemon's default",
            url.source
        );
    }
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

/// `dsh acp`: the ACP front on stdin/stdout, a client of the user's daemon (started on demand).
/// Closing stdin ends the front; the daemon and its turns go on.
pub async fn acp(settings: &Settings) -> anyhow::Result<ExitCode> {
    let (client, inbox) = join(settings).await?;
    // The editor shows what `initialize` answers, rarely our stderr: a daemon that cannot
    // honour the flags is said there.
    let options = dsh_acp::FrontOptions {
        session: settings.session_config(),
        refusal: refusal(&client, settings).await?,
    };
    dsh_acp::serve(client, inbox, options, tokio::io::stdin(), tokio::io::stdout()).await?;
    Ok(ExitCode::SUCCESS)
}

/// `dsh lsp`: the LSP front on stdin/stdout, a client of the user's daemon (started on demand).
/// Closing stdin (or the editor's `exit`) ends the front; the daemon and its turns go on.
pub async fn lsp(settings: &Settings) -> anyhow::Result<ExitCode> {
    let (client, inbox) = connect(settings).await?;
    let session = settings.session_config();
    dsh_lsp::serve(client, inbox, session, tokio::io::stdin(), tokio::io::stdout()).await?;
    Ok(ExitCode::SUCCESS)
}

/// `dsh compact SESSION`.
pub async fn compact(settings: &Settings, session_id: &str) -> anyhow::Result<ExitCode> {
    call_and_print::<method::SessionCompact>(settings, session(session_id), |result| {
        format!("{}\n", result.message)
    })
    .await
}
