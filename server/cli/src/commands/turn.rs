//! `dsh prompt`: a turn run and printed as it streams — its events from the subscription, the
//! approvals it asks for answered on the terminal, Ctrl-C cancelling it — as text, or with
//! `--json` as JSON lines (`lines.rs`, docs/scripting.md); and the command's exit statuses.

use super::*;

use dsh_daemon::client::ClientError;
use dsh_protocol::script::{ErrorLine, PromptLine, TurnEndLine};
use dsh_protocol::{Cost, SessionEvent, TurnLimits};

use crate::lines::{print_lines, write_line};

/// The exit statuses of `dsh prompt`, part of the scripting contract (docs/scripting.md; `dsh
/// prompt --help` lists them). 2 is clap's, for a command line it refuses.
pub mod exit {
    /// The model finished the turn.
    pub const COMPLETED: u8 = 0;
    /// The turn failed, or the prompt could not run (refused, the daemon went away).
    pub const FAILED: u8 = 1;
    /// A budget of the turn (`--max-steps`, `--max-tokens`, `--max-cost`, `--timeout`) or the
    /// session's own step cap was reached.
    pub const LIMIT: u8 = 3;
    /// The turn's answer does not match the schema asked for (`--output-schema`), even after
    /// the one correction.
    pub const OUTPUT_INVALID: u8 = 4;
    /// The turn was cancelled (Ctrl-C, `dsh cancel`, the daemon stopping), as a shell reports
    /// an interrupted command.
    pub const CANCELLED: u8 = 130;
}

/// The API's event a connection's unsolicited message carries, if it is a `session/event`.
fn unsolicited_session_event(message: &Unsolicited) -> Option<SessionEvent> {
    let Unsolicited::Notification(notification) = message else { return None };
    let (_, delivered) = event_of(notification)?;
    Some(delivered)
}

/// Options of `dsh prompt`.
pub struct PromptOptions {
    /// The workspace of a new session.
    pub workspace: std::path::PathBuf,
    /// Continue this session.
    pub session: Option<String>,
    /// Approve every tool call.
    pub yes: bool,
    /// The turn's budgets.
    pub limits: Option<TurnLimits>,
    /// The JSON Schema the turn's answer must match (checked already).
    pub output_schema: Option<serde_json::Value>,
    /// Images given with the prompt (`--image`).
    pub attachments: Vec<dsh_protocol::Attachment>,
    /// The prompt.
    pub text: String,
}

/// One turn to run: what to say, how to answer approvals, its budgets, and how to print it.
pub struct TurnRequest {
    /// The prompt.
    pub text: String,
    /// Approve every tool call.
    pub yes: bool,
    /// The turn's budgets (`session/prompt`'s `limits`).
    pub limits: Option<TurnLimits>,
    /// The JSON Schema the turn's answer must match (`session/prompt`'s `outputSchema`).
    pub output_schema: Option<serde_json::Value>,
    /// JSON lines on stdout instead of text.
    pub json: bool,
    /// Images given with the prompt (`session/prompt`'s `attachments`).
    pub attachments: Vec<dsh_protocol::Attachment>,
}

/// `dsh prompt`: runs one turn through the daemon and streams it. With `--json`, whatever
/// keeps the turn from running is an `error` line too (and said on stderr).
pub async fn prompt(settings: &Settings, options: PromptOptions) -> anyhow::Result<ExitCode> {
    match prompt_in_session(settings, options).await {
        Err(error) if settings.json => {
            eprintln!("dsh: {error:#}");
            let code = error.downcast_ref::<ClientError>().and_then(ClientError::code);
            let line = ErrorLine {
                message: format!("{error:#}"),
                session_id: None,
                code: code.map(i64::from),
            };
            write_line(&PromptLine::Error(line));
            Ok(ExitCode::from(exit::FAILED))
        }
        outcome => outcome,
    }
}

async fn prompt_in_session(
    settings: &Settings,
    options: PromptOptions,
) -> anyhow::Result<ExitCode> {
    let (client, mut inbox) = connect(settings).await?;
    let session_id = match &options.session {
        Some(id) => {
            // A session keeps the profile it is pinned to: say so rather than ignore the flags.
            let given = [("--provider", &settings.provider), ("--model", &settings.model)]
                .into_iter()
                .chain([("--base-url", &settings.base_url)])
                .filter(|(_, value)| {
                    value.as_ref().is_some_and(|v| matches!(v.source, dsh_config::Source::Flag(_)))
                })
                .map(|(flag, _)| flag)
                .collect::<Vec<_>>();
            if !given.is_empty() {
                let verb = if given.len() == 1 { "applies" } else { "apply" };
                eprintln!(
                    "dsh: {} {verb} to new sessions; {id} keeps the profile and model it is \
                     pinned to (`dsh fork {id} --step N` with them moves a copy)",
                    given.join(", ")
                );
            }
            id.clone()
        }
        None => {
            let workspace = options
                .workspace
                .canonicalize()
                .with_context(|| format!("workspace {}", options.workspace.display()))?;
            let params = SessionCreateParams {
                workspace: workspace.display().to_string(),
                model: None,
                config: Some(settings.session_config()),
                mcp_servers: None,
                images: (!options.attachments.is_empty()).then_some(true),
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
    let request = TurnRequest {
        text: options.text,
        yes: options.yes,
        limits: options.limits,
        output_schema: options.output_schema,
        json: settings.json,
        attachments: options.attachments,
    };
    stream_turn(&client, &mut inbox, &session_id, request).await
}

/// Runs one turn of `session_id` and prints it as it streams: subscribes from the log's end,
/// prompts, answers approvals (all of them with `yes`, else on the terminal), cancels on
/// Ctrl-C, and returns once the turn's last event is printed — with `json`, after the last
/// line (`turn/end`, or `error` when the prompt failed).
pub async fn stream_turn(
    client: &Arc<Client>,
    inbox: &mut Inbox,
    session_id: &str,
    request: TurnRequest,
) -> anyhow::Result<ExitCode> {
    let TurnRequest { text, yes, limits, output_schema, json, attachments } = request;
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
    let usage_session_id = session_id.clone();
    let printer = tokio::spawn(async move {
        let usage = move |step: u64| {
            let client = Arc::clone(&usage_client);
            let session_id = usage_session.clone();
            async move { usage_entry(&client, &session_id, step).await }
        };
        if json {
            print_lines(received, usage).await;
        } else {
            print_turn(received, usage_session_id, usage).await;
        }
    });
    let prompt_client = Arc::clone(client);
    let params = SessionPromptParams {
        session_id: session_id.clone(),
        text,
        when_busy: Some(WhenBusy::Reject),
        limits,
        output_schema,
        attachments,
    };
    let mut turn =
        tokio::spawn(async move { prompt_client.call::<method::SessionPrompt>(params).await });
    let mut interrupts = 0;
    // The subscriptions to the turn's children.
    let mut children = Vec::new();
    // One SIGINT stream for the whole turn: a Ctrl-C pressed while another branch runs is kept.
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .context("listening for Ctrl-C")?;
    let outcome = loop {
        // Cancel-safety: `recv` is cancel-safe; polling the JoinHandle by reference is
        // cancel-safe; `recv` on the signal stream is cancel-safe.
        tokio::select! {
            message = inbox.recv() => {
                let Some(message) = message else { continue };
                let Some(delivered) = unsolicited_session_event(&message) else { continue };
                let own = delivered.session_id == session_id;
                // A child a `task` call started: followed for its steps (printed compactly).
                if let EventData::TaskSpawn(spawn) = &delivered.event.data
                    && own
                    && !json
                {
                    let params = SessionSubscribeParams {
                        session_id: spawn.session_id.clone(),
                        from_seq: Some(0),
                    };
                    if let Ok(child) = client.call::<method::SessionSubscribe>(params).await {
                        children.push(child);
                    }
                }
                // A child's approvals are asked in the parent's log as well: answered there.
                if let EventData::ApprovalRequest(request) = &delivered.event.data
                    && own
                {
                    let client = Arc::clone(client);
                    let session_id = session_id.clone();
                    let request = request.clone();
                    tokio::spawn(async move { answer_approval(&client, &session_id, request, yes).await });
                }
                let _ = events.send(delivered).await;
            }
            joined = &mut turn => break joined.context("the prompt task failed")?,
            _ = interrupt.recv() => {
                interrupts += 1;
                if interrupts > 1 {
                    if json {
                        let message = "interrupted: the turn goes on in the daemon".to_owned();
                        let line = ErrorLine { message, session_id: Some(session_id), code: None };
                        write_line(&PromptLine::Error(line));
                    }
                    return Ok(ExitCode::from(exit::CANCELLED));
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
    for child in children {
        let _ = client.call::<method::SessionUnsubscribe>([child]).await;
    }
    match outcome {
        Ok(result) => {
            if result.stop_reason == StopReason::OutputInvalid {
                // One problem a line, on stderr, where a script piping stdout still sees them.
                eprintln!("dsh: the answer does not match the output schema:");
                for problem in &result.output_errors {
                    eprintln!("  {problem}");
                }
            } else if let Some(error) = &result.error {
                // The transcript went to stdout; the reason the turn failed also goes to stderr,
                // where a script piping stdout still sees it.
                eprintln!("dsh: the turn failed: {error}");
            }
            let code = match result.stop_reason {
                StopReason::Completed => exit::COMPLETED,
                StopReason::Cancelled => exit::CANCELLED,
                StopReason::Error => exit::FAILED,
                StopReason::Limit | StopReason::MaxSteps => exit::LIMIT,
                StopReason::OutputInvalid => exit::OUTPUT_INVALID,
            };
            if json {
                let cost = turn_cost(client, &session_id, result.turn).await;
                write_line(&PromptLine::TurnEnd(TurnEndLine { session_id, result, cost }));
            }
            Ok(ExitCode::from(code))
        }
        Err(error) => {
            eprintln!("dsh: {error:#}");
            if json {
                let code = error.code().map(i64::from);
                let message = format!("{error:#}");
                let line = ErrorLine { message, session_id: Some(session_id), code };
                write_line(&PromptLine::Error(line));
            }
            Ok(ExitCode::from(exit::FAILED))
        }
    }
}

/// What turn `turn`'s finished steps cost, summed from `session/usage`: `None` when one has no
/// price (or currencies differ), none finished, or the daemon cannot say.
async fn turn_cost(client: &Client, session_id: &str, turn: u64) -> Option<Cost> {
    let params = SessionParams { session_id: session_id.to_owned() };
    let usage = client.call::<method::SessionUsage>(params).await.ok()?;
    let mut finished = usage.rows.iter().filter(|entry| entry.row.turn == turn);
    let mut total = finished.find(|entry| entry.row.usage.is_some())?.row.cost.clone()?;
    for entry in finished.filter(|entry| entry.row.usage.is_some()) {
        total = total.plus(entry.row.cost.as_ref()?)?;
    }
    Some(total)
}

/// The turn's last events may arrive after its answer: feeds the printer until it has printed
/// the turn's end (it returns there), and not a moment longer. A prompt refused before its turn
/// started (`started` false) logged nothing: there is nothing to wait for.
async fn finish_printing(
    mut printer: tokio::task::JoinHandle<()>,
    inbox: &mut Inbox,
    events: mpsc::Sender<SessionEvent>,
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
                        if let Some(delivered) = unsolicited_session_event(&message) {
                            let _ = events.send(delivered).await;
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
