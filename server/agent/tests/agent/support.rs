//! Shared fixtures: a mock provider, a temporary home and workspace, a session with its loop.

use std::path::PathBuf;
use std::sync::Arc;

use dsh_agent::approval::{ApprovalPolicy, DenyAll};
use dsh_agent::tools::{ToolConfig, Toolbox, Workspace};
use dsh_agent::{Agent, AgentConfig, SessionHandle, spawn_owner};
use dsh_mock::{MockConfig, MockServer};
use dsh_provider::{ApiKey, DeepSeek, DeepSeekConfig};
use dsh_store::{DshHome, SyncPolicy};

/// A running mock, a temporary home and workspace, and a live session in it.
pub struct Fixture {
    pub mock: MockServer,
    pub home: DshHome,
    pub workspace: PathBuf,
    pub session: SessionHandle,
    pub provider: Arc<DeepSeek>,
    _temp: tempfile::TempDir,
}

impl Fixture {
    /// A fixture with the mock configured by `config`.
    pub async fn with_mock(config: MockConfig) -> Fixture {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let temp = tempfile::tempdir().unwrap();
        let home = DshHome::new(temp.path().join("home"));
        let workspace = temp.path().join("workspace");
        std::fs::create_dir_all(&workspace).unwrap();
        let workspace = workspace.canonicalize().unwrap();
        let mock = MockServer::start(config).await.unwrap();
        let provider = Arc::new(
            DeepSeek::new(DeepSeekConfig::new(mock.base_url(), ApiKey::new("sk-test").unwrap()))
                .unwrap(),
        );
        let log =
            home.workspace(&workspace).unwrap().create_new_session(SyncPolicy::Never).unwrap();
        let session = spawn_owner(log);
        Fixture { mock, home, workspace, session, provider, _temp: temp }
    }

    /// Another new session in the fixture's workspace (its requests render as the first
    /// session's do: the workspace's path is part of the system prompt).
    pub fn another_session(&self) -> SessionHandle {
        let workspace = self.home.workspace(&self.workspace).unwrap();
        spawn_owner(workspace.create_new_session(SyncPolicy::Never).unwrap())
    }

    /// A fixture with the default mock.
    pub async fn new() -> Fixture {
        Fixture::with_mock(MockConfig::default()).await
    }

    /// A loop instance over the fixture's session, tools allowed, invariants on.
    pub fn agent(&self) -> Agent {
        self.agent_with(|_| {})
    }

    /// [`Fixture::agent`] with its configuration changed by `edit` first.
    pub fn agent_with(&self, edit: impl FnOnce(&mut AgentConfig)) -> Agent {
        let mut config = AgentConfig::new("deepseek-v4-flash");
        config.approvals = ApprovalPolicy::allow_all();
        config.check_invariants = true;
        config.date_context = false;
        edit(&mut config);
        let toolbox =
            Arc::new(Toolbox::new(Workspace::new(&self.workspace).unwrap(), ToolConfig::default()));
        Agent::new(
            Arc::new((*self.provider).clone()),
            toolbox,
            Arc::new(DenyAll),
            config,
            &self.workspace,
        )
    }

    /// Queues mock replies (as `POST /_fake/script`).
    pub async fn script(&self, scripts: serde_json::Value) {
        self.mock.script(scripts).unwrap();
    }

    /// Queues a mock fault (as `POST /_fake/fault`).
    pub async fn fault(&self, fault: serde_json::Value) {
        self.mock.fault(fault).unwrap();
    }
}
