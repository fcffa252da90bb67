//! CLI commands as clients of the daemon, through the typed client of `dsh-daemon`: `prompt`,
//! `inject`, `cancel`, `fork`, `sessions`, `usage`, `saw`, `audit`, `compact`, `status`,
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
    SessionPromptParams, SessionRequestParams, SessionSubscribeParams, UsageEntry, WhenBusy,
};
use dsh_session::{Event, EventData, StopReason};
use serde_json::json;
use tokio::sync::mpsc;

use crate::printer::print_turn;
use crate::settings::Settings;

/// What arrives on a connection besides answers.
type Inbox = mpsc::UnboundedReceiver<Unsolicited>;

/// Connects to (or starts) the daemon and says hello; refuses a daemon that cannot honour
/// these settings ([`refusal`]).
pub async fn connect(settings: &Settings) -> anyhow::Result<(Arc<Client>, Inbox)> {
    let (client, inbox) = join(settings).await?;
    if let Some(refusal) = refusal(&client, settings).await? {
        anyhow::bail!(refusal);
    }
    Ok((client, inbox))
}

/// Connects to (or starts) the daemon and says hello. A daemon that closes the connection
/// before it answers was dying as we connected (killed, or shutting down with its listener not
/// yet closed): once, after a moment, the next one is found or started.
async fn join(settings: &Settings) -> anyhow::Result<(Arc<Client>, Inbox)> {
    let mut attempt = 0;
    loop {
        let stream = connect_or_start(settings.home.root(), &spawn_options(settings)).await?;
        let (reader, writer) = stream.into_split();
        let (client, inbox) = Client::new(reader, writer);
        match client.initialize("dsh-cli").await {
            Ok(_) => {
                hand_keys(&client, settings).await?;
                return Ok((Arc::new(client), inbox));
            }
            Err(dsh_daemon::client::ClientError::Closed) if attempt == 0 => {
                attempt += 1;
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            Err(error) => return Err(anyhow::Error::new(error).context("greeting the daemon")),
        }
    }
}

/// Hands the provider keys of this command's environment to the daemon, for the variables it
/// has none for: a daemon another command started without a key (the user set it since) serves
/// this one without a restart. A key the daemon has is kept.
async fn hand_keys(client: &Client, settings: &Settings) -> anyhow::Result<()> {
    let variables = dsh_daemon::startup::key_variables(settings.user_config.as_deref());
    let keys = dsh_daemon::startup::keys_in_environment(&variables);
    if keys.is_empty() {
        return Ok(());
    }
    let params = dsh_protocol::DaemonKeysParams { keys: keys.into_iter().collect() };
    match client.call::<method::DaemonKeys>(params).await {
        // A daemon of an older build: it has the keys it was started with.
        Err(dsh_daemon::client::ClientError::Rpc(error))
            if error.code == dsh_protocol::jsonrpc::METHOD_NOT_FOUND =>
        {
            Ok(())
        }
        answer => answer.map(drop).context("handing the provider keys over"),
    }
}

/// Why the running daemon cannot honour these settings, if it cannot. A running daemon keeps
/// the sandbox it was started with: never let commands meant for one sandbox policy run under
/// another. (A base URL is not the daemon's: this client's sessions get it — an ad-hoc profile,
/// `SessionConfig::base_url` — so any daemon honours it.)
async fn refusal(client: &Client, settings: &Settings) -> anyhow::Result<Option<String>> {
    if !settings.sandbox_explicit {
        return Ok(None);
    }
    let status = client.call::<method::DaemonStatus>(NoParams {}).await?;
    let difference = settings
        .sandbox_explicit
        .then(|| sandbox_difference(&settings.sandbox, &status.sandbox))
        .flatten();
    if let Some(difference) = difference {
        return Ok(Some(format!(
            "the dsh daemon for {} (pid {}) runs commands with another sandbox ({difference}): run `dsh shutdown` first to start one with these settings",
            settings.home.root().display(),
            status.pid
        )));
    }
    Ok(None)
}

/// What a client passes to a daemon it starts.
pub fn spawn_options(settings: &Settings) -> SpawnOptions {
    // No provider flag: the profile, model and base URL are this command's choice for its
    // sessions (passed with each `session/create`), not defaults for every client of the daemon.
    let global_args = if settings.sandbox_explicit { settings.sandbox_args() } else { Vec::new() };
    let key_variables = dsh_daemon::startup::key_variables(settings.user_config.as_deref());
    SpawnOptions { global_args, key_variables }
}

/// How a running daemon's sandbox differs from the one these settings ask for, if it does.
fn sandbox_difference(
    wanted: &dsh_daemon::startup::SandboxConfig,
    running: &dsh_protocol::SandboxStatus,
) -> Option<String> {
    if running.policy != wanted.policy.name() {
        return Some(format!("policy {}, not {}", running.policy, wanted.policy));
    }
    if running.network != wanted.network {
        let state = |on: bool| if on { "on" } else { "off" };
        return Some(format!("network {}, not {}", state(running.network), state(wanted.network)));
    }
    for feature in &running.features {
        let off = wanted.without.iter().any(|w| w.name() == feature.name);
        if feature.turned_off != off {
            let state = |off: bool| if off { "off" } else { "on" };
            return Some(format!(
                "{} turned {}, not {}",
                feature.name,
                state(feature.turned_off),
                state(off)
            ));
        }
    }
    None
}

/// The log event a connection's unsolicited message carries, if it is a `session/event`.
pub fn unsolicited_event(message: &Unsolicited) -> Option<Event> {
    let Unsolicited::Notification(notification) = message else { return None };
    let (_, delivered) = event_of(notification)?;
    Some(delivered.event)
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
    let (client, mut inbox) = connect(settings).await?;
    let session_id = match &options.session {
        Some(id) => id.clone(),
        None => {
            let workspace = options
                .workspace
                .canonicalize()
                .with_context(|| format!("workspace {}", options.workspace.display()))?;
            let config = settings.session_config(options.max_steps);
            let params = SessionCreateParams {
                workspace: workspace.display().to_string(),
                model: None,
                config: Some(config),
                mcp_servers: None,
            };
            client.call::<method::SessionCreate>(params).await?.session_id
        }
    };
    eprintln!("session {session_id}");
    // Never silently: a sandbox weaker than its policy is said before anything runs.
    if let Ok(status) = client.call::<method::DaemonStatus>(NoParams {}).await {
        for warning in &status.sandbox.warnings {
            eprintln!("dsh: command sandbox: {warning}");
        }
    }
    stream_turn(&client, &mut inbox, &session_id, options.text, options.yes).await
}

/// Runs one turn of `session_id` for `text` and prints it as it streams: subscribes from the
/// log's end, prompts, answers approvals (all of them with `yes`, else on the terminal),
/// cancels on Ctrl-C, and returns once the turn's last event is printed.
pub async fn stream_turn(
    client: &Arc<Client>,
    inbox: &mut Inbox,
    session_id: &str,
    text: String,
    yes: bool,
) -> anyhow::Result<ExitCode> {
    let session_id = session_id.to_owned();
    let page = client
        .call::<method::SessionEvents>(SessionEventsParams {
            session_id: session_id.clone(),
            from_seq: 0,
            limit: 0,
        })
        .await?;
    let subscription = client
        .call::<method::SessionSubscribe>(SessionSubscribeParams {
            session_id: session_id.clone(),
            from_seq: Some(page.length),
        })
        .await?;

    let (events, received) = mpsc::channel(4096);
    let usage_client = Arc::clone(client);
    let usage_session = session_id.clone();
    let printer = tokio::spawn(async move {
        let usage = move |step: u64| {
            let client = Arc::clone(&usage_client);
            let session_id = usage_session.clone();
            async move { usage_entry(&client, &session_id, step).await }
        };
        print_turn(received, usage).await;
    });
    let prompt_client = Arc::clone(client);
    let params = SessionPromptParams {
        session_id: session_id.clone(),
        text,
        when_busy: Some(WhenBusy::Reject),
    };
    let mut turn =
        tokio::spawn(async move { prompt_client.call::<method::SessionPrompt>(params).await });
    let mut interrupts = 0;
    // One SIGINT stream for the whole turn: a Ctrl-C pressed while another branch runs is kept.
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .context("listening for Ctrl-C")?;
    let outcome = loop {
        // Cancel-safety: `recv` is cancel-safe; polling the JoinHandle by reference is
        // cancel-safe; `recv` on the signal stream is cancel-safe.
        tokio::select! {
            message = inbox.recv() => {
                let Some(message) = message else { continue };
                let Some(event) = unsolicited_event(&message) else { continue };
                if let EventData::ApprovalRequest(request) = &event.data {
                    let client = Arc::clone(client);
                    let session_id = session_id.clone();
                    let request = request.clone();
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
                let params = SessionParams { session_id: session_id.clone() };
                let _ = client.call::<method::SessionCancel>(params).await;
            }
        }
    };
    finish_printing(printer, inbox, events, outcome.is_ok()).await;
    // The next turn on this connection subscribes again: this subscription must not print it
    // twice.
    let _ = client.call::<method::SessionUnsubscribe>([subscription]).await;
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

/// The turn's last events may arrive after its answer: feeds the printer until it has printed
/// the turn's end (it returns there), and not a moment longer. A prompt refused before its turn
/// started (`started` false) logged nothing: there is nothing to wait for.
async fn finish_printing(
    mut printer: tokio::task::JoinHandle<()>,
    inbox: &mut Inbox,
    events: mpsc::Sender<Event>,
    started: bool,
) {
    if started {
        loop {
            // Cancel-safety: polling the JoinHandle by reference is cancel-safe; `recv` is
            // cancel-safe.
            tokio::select! {
                _ = &mut printer => return,
                message = inbox.recv() => match message {
                    Some(message) => {
                        if let Some(event) = unsolicited_event(&message) {
                            let _ = events.send(event).await;
                        }
                    }
                    None => break,
                },
            }
        }
    }
    drop(events);
    let _ = tokio::time::timeout(Duration::from_secs(5), printer).await;
}

async fn usage_entry(client: &Client, session_id: &str, step: u64) -> Option<UsageEntry> {
    let params = SessionParams { session_id: session_id.to_owned() };
    let usage = client.call::<method::SessionUsage>(params).await.ok()?;
    usage.rows.into_iter().find(|entry| entry.row.step == step)
}

async fn answer_approval(
    client: &Client,
    session_id: &str,
    request: dsh_session::ApprovalRequest,
    yes: bool,
) {
    // A confined command can also be allowed once without the sandbox.
    let confined =
        request.sandbox.as_deref().is_some_and(|sandbox| !sandbox.contains("unconfined"));
    let decision = if yes {
        ApprovalChoice::Allow
    } else if std::io::stdin().is_terminal() {
        let summary = match &request.sandbox {
            Some(sandbox) => format!("{} [sandbox: {sandbox}]", request.summary),
            None => request.summary.clone(),
        };
        let answer = tokio::task::spawn_blocking(move || {
            if confined {
                eprint!("allow {summary}? [y]es / [u]nconfined, once / [a]lways / [N]o: ");
            } else {
                eprint!("allow {summary}? [y]es / [a]lways / [N]o: ");
            }
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).map(|_| line)
        })
        .await;
        match answer.ok().and_then(Result::ok).as_deref().map(str::trim) {
            Some("y" | "Y" | "yes") => ApprovalChoice::Allow,
            Some("u" | "U" | "unconfined") if confined => ApprovalChoice::AllowUnconfined,
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
    if let Err(error) = client.call::<method::ApprovalRespond>(params).await {
        eprintln!("dsh: answering the approval: {error:#}");
    }
}

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
    // `--provider` / `--model` move the fork to another profile or model.
    let config =
        (settings.provider.is_some() || settings.model.is_some() || settings.base_url.is_some())
            .then(|| settings.session_config(None));
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
    for summary in &result.sessions {
        if let Some(error) = &summary.error {
            println!("{}  ! unreadable: {error}", summary.session_id);
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
        println!(
            "{}  {:>3} turns {:>4} steps {cost:>11}  {provider}  {}{fork}{running}",
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
            "dsh stdio: the base URL {} ({}) is not used: through a shared daemon a client passes \
             it with each session (`config.baseUrl` of session/create); `--in-process` makes it \
             the private daemon's default",
            url.value, url.source
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
        session: settings.session_config(None),
        refusal: refusal(&client, settings).await?,
    };
    dsh_acp::serve(client, inbox, options, tokio::io::stdin(), tokio::io::stdout()).await?;
    Ok(ExitCode::SUCCESS)
}

/// `dsh lsp`: the LSP front on stdin/stdout, a client of the user's daemon (started on demand).
/// Closing stdin (or the editor's `exit`) ends the front; the daemon and its turns go on.
pub async fn lsp(settings: &Settings) -> anyhow::Result<ExitCode> {
    let (client, inbox) = connect(settings).await?;
    dsh_lsp::serve(client, inbox, tokio::io::stdin(), tokio::io::stdout()).await?;
    Ok(ExitCode::SUCCESS)
}

/// `dsh compact SESSION`.
pub async fn compact(settings: &Settings, session_id: &str) -> anyhow::Result<ExitCode> {
    call_and_print::<method::SessionCompact>(settings, session(session_id), |result| {
        format!("{}\n", result.message)
    })
    .await
}
