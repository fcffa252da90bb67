//! The language server's surface and its shared state: what `initialize` offers, and each LSP
//! request or notification handed to the module that holds its idea — documents and their
//! attribution (`provenance.rs`), commands (`commands.rs`), followed turns (`follow.rs`), what
//! the daemon says unasked (`listen.rs`).
//!
//! Tasks: tower-lsp-server's service answers the editor (a request may wait on the daemon; the
//! service runs requests concurrently); one task listens to the daemon connection
//! (`listen.rs`); one keeps the shown documents' attribution current (`provenance.rs`). None
//! of them asks the daemon anything while nothing happens. The state is one `std::sync::Mutex`,
//! never held across an await.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use dsh_daemon::{Client, ClientError, Unsolicited};
use dsh_protocol::method;
use dsh_protocol::{NoParams, SessionConfig};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{Notify, mpsc};
use tower_lsp_server::jsonrpc::{Error as RpcError, ErrorCode, Result as RpcResult};
use tower_lsp_server::ls_types::*;
use tower_lsp_server::{LanguageServer, LspService, Server};

use crate::commands::COMMANDS;
use crate::follow::Followed;
use crate::provenance::{self, Doc};

/// Serves LSP on `input`/`output` for the daemon behind `dsh` until the editor exits (or
/// closes `input`). `inbox` is what the daemon connection delivers besides answers; `session`
/// pins the sessions `dsh.prompt` creates (`--provider`, `--model`, `--base-url`).
pub async fn serve(
    dsh: Arc<Client>,
    inbox: mpsc::UnboundedReceiver<Unsolicited>,
    session: SessionConfig,
    input: impl AsyncRead + Unpin,
    output: impl AsyncWrite,
) -> anyhow::Result<()> {
    let status = dsh.call::<method::DaemonStatus>(NoParams {}).await?;
    let home = PathBuf::from(status.home);
    let (service, socket) = LspService::new(move |lsp| {
        let state = Arc::new(State {
            lsp,
            dsh,
            home,
            session,
            inner: Mutex::default(),
            follows: tokio::sync::Mutex::default(),
            stale: Notify::new(),
        });
        tokio::spawn(Arc::clone(&state).route(inbox));
        tokio::spawn(Arc::clone(&state).keep_current());
        Backend(state)
    });
    Server::new(input, output, socket).serve(service).await;
    Ok(())
}

struct Backend(Arc<State>);

/// What every part of the front shares.
pub(crate) struct State {
    pub(crate) lsp: tower_lsp_server::Client,
    pub(crate) dsh: Arc<Client>,
    /// The daemon's state directory ("what the model saw" files go under it).
    pub(crate) home: PathBuf,
    /// The profile, model and base URL of the sessions `dsh.prompt` creates (absent: the
    /// workspace's configured ones).
    pub(crate) session: SessionConfig,
    pub(crate) inner: Mutex<Inner>,
    /// Serializes starting to follow a session (a subscription each).
    pub(crate) follows: tokio::sync::Mutex<()>,
    /// Wakes the task that asks the shown documents' attribution again (`provenance.rs`).
    pub(crate) stale: Notify,
}

#[derive(Default)]
pub(crate) struct Inner {
    /// Workspace folders (canonical).
    pub(crate) folders: Vec<PathBuf>,
    pub(crate) docs: HashMap<String, Doc>,
    /// Sessions whose turn is followed.
    pub(crate) followed: HashMap<String, Followed>,
    /// Unreadable-log messages already shown.
    pub(crate) reported: HashSet<String>,
    pub(crate) capabilities: Capabilities,
    pub(crate) progress_tokens: u64,
    /// Bumped whenever every attribution is forgotten (a log or the folders changed): an
    /// answer asked for before is not kept, though its document's text is the same.
    pub(crate) generation: u64,
}

#[derive(Clone, Copy, Default)]
pub(crate) struct Capabilities {
    pub(crate) show_document: bool,
    pub(crate) work_done_progress: bool,
    pub(crate) code_lens_refresh: bool,
    /// Whether hovers may carry `command:` links: VS Code (and its builds) follow them; LSP has
    /// no capability for it, so the client's name says.
    pub(crate) command_links: bool,
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) fn error(message: impl Into<String>) -> RpcError {
    RpcError { code: ErrorCode::InternalError, message: message.into().into(), data: None }
}

pub(crate) fn invalid(message: impl Into<String>) -> RpcError {
    RpcError { code: ErrorCode::InvalidParams, message: message.into().into(), data: None }
}

pub(crate) fn daemon_error(failure: ClientError) -> RpcError {
    error(format!("dsh: {failure}"))
}

/// The canonical paths of workspace folders (as given when they cannot be resolved).
fn folder_paths(folders: &[WorkspaceFolder]) -> Vec<PathBuf> {
    folders
        .iter()
        .filter_map(|folder| folder.uri.to_file_path().map(|path| path.into_owned()))
        .map(|path| path.canonicalize().unwrap_or(path))
        .collect()
}

impl Capabilities {
    fn of(params: &InitializeParams) -> Capabilities {
        let window = params.capabilities.window.as_ref();
        let workspace = params.capabilities.workspace.as_ref();
        Capabilities {
            show_document: window.and_then(|w| w.show_document.as_ref()).is_some_and(|s| s.support),
            work_done_progress: window.and_then(|w| w.work_done_progress).unwrap_or(false),
            command_links: params.client_info.as_ref().is_some_and(|info| {
                ["Visual Studio Code", "VSCodium", "code-server"]
                    .iter()
                    .any(|name| info.name.contains(name))
            }),
            code_lens_refresh: workspace
                .and_then(|w| w.code_lens.as_ref())
                .and_then(|c| c.refresh_support)
                .unwrap_or(false),
        }
    }
}

/// What the server offers: whole-document sync, hovers, code lenses, workspace folders and the
/// commands.
fn server_capabilities() -> ServerCapabilities {
    ServerCapabilities {
        text_document_sync: Some(TextDocumentSyncCapability::Kind(TextDocumentSyncKind::FULL)),
        hover_provider: Some(HoverProviderCapability::Simple(true)),
        code_lens_provider: Some(CodeLensOptions { resolve_provider: Some(false) }),
        workspace: Some(WorkspaceServerCapabilities {
            workspace_folders: Some(WorkspaceFoldersServerCapabilities {
                supported: Some(true),
                change_notifications: Some(OneOf::Left(true)),
            }),
            file_operations: None,
        }),
        execute_command_provider: Some(ExecuteCommandOptions {
            commands: COMMANDS.iter().map(|c| (*c).to_owned()).collect(),
            work_done_progress_options: WorkDoneProgressOptions::default(),
        }),
        ..ServerCapabilities::default()
    }
}

impl LanguageServer for Backend {
    async fn initialize(&self, params: InitializeParams) -> RpcResult<InitializeResult> {
        let mut folders = folder_paths(params.workspace_folders.as_deref().unwrap_or_default());
        #[allow(deprecated)]
        if folders.is_empty()
            && let Some(root) = params.root_uri.as_ref().and_then(|uri| uri.to_file_path())
        {
            let root = root.into_owned();
            folders.push(root.canonicalize().unwrap_or(root));
        }
        let mut inner = lock(&self.0.inner);
        inner.folders = folders;
        inner.capabilities = Capabilities::of(&params);
        Ok(InitializeResult {
            server_info: Some(ServerInfo {
                name: "dsh".to_owned(),
                version: Some(env!("CARGO_PKG_VERSION").to_owned()),
            }),
            capabilities: server_capabilities(),
            ..InitializeResult::default()
        })
    }

    async fn initialized(&self, _: InitializedParams) {
        tokio::spawn(Arc::clone(&self.0).listen());
    }

    async fn shutdown(&self) -> RpcResult<()> {
        Ok(())
    }

    async fn did_change_workspace_folders(&self, params: DidChangeWorkspaceFoldersParams) {
        let added = folder_paths(&params.event.added);
        let removed = folder_paths(&params.event.removed);
        self.0.change_folders(added.clone(), &removed);
        // Turns already running in a folder just added are followed too.
        if !added.is_empty() {
            tokio::spawn(Arc::clone(&self.0).follow_running_in(added));
        }
    }

    async fn did_open(&self, params: DidOpenTextDocumentParams) {
        let document = params.text_document;
        self.0.open(document.uri, document.text);
    }

    async fn did_change(&self, params: DidChangeTextDocumentParams) {
        // Full sync: the last change is the whole text.
        let Some(change) = params.content_changes.into_iter().next_back() else { return };
        self.0.change(&params.text_document.uri, change.text);
    }

    async fn did_close(&self, params: DidCloseTextDocumentParams) {
        lock(&self.0.inner).docs.remove(params.text_document.uri.as_str());
    }

    async fn hover(&self, params: HoverParams) -> RpcResult<Option<Hover>> {
        let position = params.text_document_position_params;
        let Some(ranges) = self.0.ranges(&position.text_document.uri).await else {
            return Ok(None);
        };
        let links = lock(&self.0.inner).capabilities.command_links;
        Ok(provenance::hover(&ranges, position.position.line, links))
    }

    async fn code_lens(&self, params: CodeLensParams) -> RpcResult<Option<Vec<CodeLens>>> {
        let uri = &params.text_document.uri;
        let Some(ranges) = self.0.ranges(uri).await else {
            return Ok(None);
        };
        if let Some(doc) = lock(&self.0.inner).docs.get_mut(uri.as_str()) {
            doc.lensed = Some(Arc::clone(&ranges));
        }
        Ok(Some(provenance::lenses(&ranges)))
    }

    async fn execute_command(&self, params: ExecuteCommandParams) -> RpcResult<Option<LSPAny>> {
        let argument = params.arguments.into_iter().next().unwrap_or_default();
        self.0.execute(&params.command, argument).await.map(Some)
    }
}
