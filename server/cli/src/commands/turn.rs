//! `dsh prompt`: a turn run and printed as it streams — its events from the subscription, the
//! approvals it asks for answered on the terminal, Ctrl-C cancelling it.

use super::*;

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
        limits: None,
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
                StopReason::Limit => ExitCode::from(3),
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
