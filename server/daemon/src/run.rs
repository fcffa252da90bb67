//! Running turns in this process: opening or creating a session, building its loop instance,
//! streaming the turn to the terminal, asking approvals on the terminal.
#![allow(clippy::print_stderr)] // approvals are asked on the terminal

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use dsh_agent::approval::{ApprovalPolicy, Approver, BoxFuture};
use dsh_agent::tools::{ToolConfig, Toolbox, Workspace};
use dsh_agent::{Agent, AgentConfig, SessionHandle, TurnOutcome, spawn_owner};
use dsh_provider::DeepSeek;
use dsh_session::{ApprovalRequest, ApprovalVerdict, EventData};
use dsh_store::{LiveLog, SyncPolicy};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::printer::print_turn;

/// A session opened for a run in this process.
pub struct OpenSession {
    /// Its owner task.
    pub handle: SessionHandle,
    /// Its workspace root (canonical).
    pub workspace: PathBuf,
}

/// Starts the owner of `log` and finds the session's workspace in its `session/meta`.
pub fn open(log: LiveLog) -> anyhow::Result<OpenSession> {
    let workspace = match log.session().events().first().map(|e| &e.data) {
        Some(EventData::SessionMeta(meta)) => PathBuf::from(&meta.workspace),
        _ => anyhow::bail!("{} does not start with session/meta", log.path().display()),
    };
    Ok(OpenSession { handle: spawn_owner(log), workspace })
}

/// Creates a session in `workspace_dir` under `home`.
pub fn create(home: &dsh_store::DshHome, workspace_dir: &Path) -> anyhow::Result<OpenSession> {
    let workspace = home
        .workspace(workspace_dir)
        .with_context(|| format!("opening workspace {}", workspace_dir.display()))?;
    open(workspace.create_new_session(SyncPolicy::Boundaries)?)
}

/// Builds a loop instance for a session.
pub fn agent(
    provider: Arc<DeepSeek>,
    session: &OpenSession,
    config: AgentConfig,
    approver: Arc<dyn Approver>,
) -> anyhow::Result<Agent> {
    let workspace = Workspace::new(&session.workspace)
        .with_context(|| format!("opening workspace {}", session.workspace.display()))?;
    let toolbox = Arc::new(Toolbox::new(workspace, ToolConfig::default()));
    Ok(Agent::new(provider, toolbox, approver, config, &session.workspace))
}

/// Runs one turn while printing it; Ctrl-C cancels the turn (logged), a second one exits.
pub async fn run_turn_printing(
    session: &OpenSession,
    mut agent: Agent,
    prompt: String,
) -> anyhow::Result<(Agent, TurnOutcome)> {
    let handle = session.handle.clone();
    let (next_seq, turn) = handle.query(|s| (s.next_seq(), s.last_turn() + 1)).await?;
    let (stored, live) = handle.subscribe(next_seq).await?;
    let cancel = CancellationToken::new();
    let turn_cancel = cancel.clone();
    let turn_handle = handle.clone();
    let task = tokio::spawn(async move {
        let outcome = agent.run_turn(&turn_handle, &prompt, &turn_cancel).await;
        (agent, outcome)
    });
    let watcher = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("\ncancelling the turn (Ctrl-C again to quit)…");
            cancel.cancel();
            if tokio::signal::ctrl_c().await.is_ok() {
                std::process::exit(130);
            }
        }
    });
    // The turn number is only known once the turn starts; a crash recovery may close an older
    // turn first, so wait for the turn this prompt opens.
    print_turn(&handle, turn, stored, live).await;
    let (agent, outcome) = task.await.context("the turn task panicked")?;
    watcher.abort();
    Ok((agent, outcome?))
}

/// Approves on the terminal: `y` allow, `a` allow always, anything else deny.
pub struct TerminalApprover {
    lock: Mutex<()>,
}

impl TerminalApprover {
    /// An approver reading stdin; with no terminal on stdin every request is denied.
    pub fn new() -> Self {
        TerminalApprover { lock: Mutex::new(()) }
    }
}

impl Approver for TerminalApprover {
    fn decide<'a>(
        &'a self,
        request: &'a ApprovalRequest,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, ApprovalVerdict> {
        Box::pin(async move {
            let _guard = self.lock.lock().await;
            if !std::io::stdin().is_terminal() {
                eprintln!("denied (no terminal to ask on; pass --yes to approve tool calls)");
                return ApprovalVerdict::Deny;
            }
            eprint!("allow {}? [y]es / [a]lways / [N]o: ", request.summary);
            let read = tokio::task::spawn_blocking(|| {
                let mut line = String::new();
                std::io::stdin().read_line(&mut line).map(|_| line)
            });
            // Cancel-safety: abandoning the blocking read leaves a thread waiting on stdin, which
            // is harmless; `cancelled()` is cancel-safe.
            tokio::select! {
                line = read => match line.ok().and_then(Result::ok).as_deref().map(str::trim) {
                    Some("y" | "Y" | "yes") => ApprovalVerdict::Allow,
                    Some("a" | "A" | "always") => ApprovalVerdict::AllowAlways,
                    _ => ApprovalVerdict::Deny,
                },
                () = cancel.cancelled() => ApprovalVerdict::Deny,
            }
        })
    }
}

/// The approval policy and approver for `--yes` or not.
pub fn approvals(yes: bool) -> (ApprovalPolicy, Arc<dyn Approver>) {
    if yes {
        (ApprovalPolicy::allow_all(), Arc::new(dsh_agent::approval::DenyAll))
    } else {
        (ApprovalPolicy::default(), Arc::new(TerminalApprover::new()))
    }
}
