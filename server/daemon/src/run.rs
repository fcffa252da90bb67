//! Running turns in this process (`dsh demo`): opening or creating a session, building its loop
//! instance, streaming the turn to the terminal.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use dsh_agent::approval::Approver;
use dsh_agent::tools::{ToolConfig, Toolbox, Workspace};
use dsh_agent::{Agent, AgentConfig, SessionHandle, TurnOutcome, spawn_owner};
use dsh_provider::DeepSeek;
use dsh_session::{EventData, usage_rows};
use dsh_store::{LiveLog, SyncPolicy};
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

/// Runs one turn in this process while printing it.
pub async fn run_turn_printing(
    session: &OpenSession,
    mut agent: Agent,
    prompt: String,
) -> anyhow::Result<(Agent, TurnOutcome)> {
    let handle = session.handle.clone();
    let next_seq = handle.query(|s| s.next_seq()).await?;
    let (stored, mut live) = handle.subscribe(next_seq).await?;
    let (events, received) = tokio::sync::mpsc::channel(4096);
    let forward = tokio::spawn(async move {
        for event in stored {
            if events.send(event).await.is_err() {
                return;
            }
        }
        while let Ok(event) = live.recv().await {
            if events.send(event).await.is_err() {
                return;
            }
        }
    });
    let turn_handle = handle.clone();
    let task = tokio::spawn(async move {
        let cancel = CancellationToken::new();
        let outcome = agent.run_turn(&turn_handle, &prompt, &cancel).await;
        (agent, outcome)
    });
    let usage = |step: u64| {
        let handle = handle.clone();
        async move {
            handle
                .query(move |s| usage_rows(s.events()).into_iter().find(|row| row.step == step))
                .await
                .ok()
                .flatten()
        }
    };
    print_turn(received, usage).await;
    forward.abort();
    let (agent, outcome) = task.await.context("the turn task panicked")?;
    Ok((agent, outcome?))
}
