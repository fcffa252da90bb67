//! The language server: documents, hovers, code lenses, commands, turn progress.
//!
//! Tasks: tower-lsp-server's service answers the editor (a request may wait on the daemon; the
//! service runs requests concurrently). One router task reads the daemon connection's
//! notifications (the events of the sessions whose turns are followed) in order and turns them
//! into `$/progress` and `window/showMessage` (and a write or edit in them into a new ask of
//! the open documents' attribution). One watcher task polls the daemon every [`POLL`]: it
//! follows turns of this workspace that other clients started, re-asks the attribution of
//! shown documents that need it, and refreshes the code lenses shown from an attribution that
//! is no longer current. The state is one `std::sync::Mutex`, never
//! held across an await.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use dsh_daemon::client::event_of;
use dsh_daemon::{Client, ClientError, Unsolicited};
use dsh_protocol::method;
use dsh_protocol::{
    ApprovalChoice, ApprovalRequest, ApprovalRespondParams, EventData, NoParams, ProvenanceRange,
    SessionCreateParams, SessionEvent, SessionEventsParams, SessionForkParams, SessionInjectParams,
    SessionListParams, SessionParams, SessionPromptParams, SessionRequestParams,
    SessionSubscribeParams, WhenBusy, WorkspaceProvenanceParams,
};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tower_lsp_server::jsonrpc::{Error as RpcError, ErrorCode, Result as RpcResult};
use tower_lsp_server::ls_types::notification::Progress;
use tower_lsp_server::ls_types::request::WorkDoneProgressCreate;
use tower_lsp_server::ls_types::*;
use tower_lsp_server::{LanguageServer, LspService, Server};

use crate::text;

/// How often the watcher polls the daemon.
const POLL: Duration = Duration::from_millis(500);
/// Every how many polls the attribution of every shown document is asked again.
const RECHECK_EVERY: u64 = 20;
/// Documents larger than this are not attributed: the request carries the text JSON-escaped,
/// and the daemon takes lines of at most 4 MiB (one escaped control character is 6 bytes).
const MAX_DOCUMENT_BYTES: usize = 512 * 1024;
/// The longest wait for the daemon's attribution of a document.
const ASK_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest wait for the editor to take a progress report or a message from the router:
/// an editor that stops reading loses reports, and the daemon's events never pile up behind it.
const DELIVERY: Duration = Duration::from_secs(1);

/// Runs `send` for at most [`DELIVERY`].
async fn deliver(send: impl std::future::Future<Output = ()>) {
    if tokio::time::timeout(DELIVERY, send).await.is_err() {
        tracing::debug!("the editor is not reading: a report was dropped");
    }
}

/// The commands `workspace/executeCommand` knows.
pub const COMMANDS: &[&str] = &["dsh.prompt", "dsh.steer", "dsh.cancel", "dsh.fork", "dsh.saw"];

/// Serves LSP on `input`/`output` for the daemon behind `dsh` until the editor exits (or
/// closes `input`). `inbox` is what the daemon connection delivers besides answers.
pub async fn serve(
    dsh: Arc<Client>,
    inbox: mpsc::UnboundedReceiver<Unsolicited>,
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
            inner: Mutex::default(),
            follows: tokio::sync::Mutex::default(),
        });
        tokio::spawn(Arc::clone(&state).route(inbox));
        Backend(state)
    });
    Server::new(input, output, socket).serve(service).await;
    Ok(())
}

struct Backend(Arc<State>);

struct State {
    lsp: tower_lsp_server::Client,
    dsh: Arc<Client>,
    /// The daemon's state directory ("what the model saw" files go under it).
    home: PathBuf,
    inner: Mutex<Inner>,
    /// Serializes starting to follow a session (a subscription each).
    follows: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct Inner {
    /// Workspace folders (canonical).
    folders: Vec<PathBuf>,
    docs: HashMap<String, Doc>,
    /// Sessions whose turn is followed.
    followed: HashMap<String, Followed>,
    /// The workspace of each session asked about.
    workspaces: HashMap<String, Option<PathBuf>>,
    /// Unreadable-log messages already shown.
    reported: HashSet<String>,
    capabilities: Capabilities,
    progress_tokens: u64,
}

/// A followed turn: its progress token (`None`: the editor takes no progress), the
/// subscription delivering its events (`None` until `session/subscribe` answers), and how many
/// polls in a row found the session idle.
#[derive(Clone, Default)]
struct Followed {
    token: Option<ProgressToken>,
    subscription: Option<Value>,
    idle_polls: u32,
}

#[derive(Clone, Copy, Default)]
struct Capabilities {
    show_document: bool,
    work_done_progress: bool,
    code_lens_refresh: bool,
    /// Whether hovers may carry `command:` links: VS Code (and its builds) follow them; LSP has
    /// no capability for it, so the client's name says.
    command_links: bool,
}

struct Doc {
    /// The file, and the workspace it belongs to (`None`: outside every workspace, binary or
    /// huge: never attributed).
    target: Option<(PathBuf, PathBuf)>,
    text: String,
    /// The attribution last asked for (`None`: never asked since the text changed).
    ranges: Option<Arc<Vec<ProvenanceRange>>>,
    /// Whether the editor asked for its hovers or lenses: the watcher keeps those fresh.
    shown: bool,
    /// The attribution the editor's code lenses show: when it differs from the current one
    /// (the text or a log changed), the watcher asks the editor to refresh them.
    lensed: Option<Arc<Vec<ProvenanceRange>>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn error(message: impl Into<String>) -> RpcError {
    RpcError { code: ErrorCode::InternalError, message: message.into().into(), data: None }
}

fn invalid(message: impl Into<String>) -> RpcError {
    RpcError { code: ErrorCode::InvalidParams, message: message.into().into(), data: None }
}

fn daemon_error(failure: ClientError) -> RpcError {
    error(format!("dsh: {failure}"))
}

impl LanguageServer for Backend {
    async fn initialize(&self, params: InitializeParams) -> RpcResult<InitializeResult> {
        let mut folders: Vec<PathBuf> = params
            .workspace_folders
            .unwrap_or_default()
            .iter()
            .filter_map(|folder| folder.uri.to_file_path().map(|p| p.into_owned()))
            .collect();
        #[allow(deprecated)]
        if folders.is_empty()
            && let Some(root) = params.root_uri.as_ref().and_then(|uri| uri.to_file_path())
        {
            folders.push(root.into_owned());
        }
        let folders = folders.into_iter().map(|f| f.canonicalize().unwrap_or(f)).collect();
        let capabilities = &params.capabilities;
        let window = capabilities.window.as_ref();
        let workspace = capabilities.workspace.as_ref();
        let mut inner = lock(&self.0.inner);
        inner.folders = folders;
        inner.capabilities = Capabilities {
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
        };
        Ok(InitializeResult {
            server_info: Some(ServerInfo {
                name: "dsh".to_owned(),
                version: Some(env!("CARGO_PKG_VERSION").to_owned()),
            }),
            capabilities: ServerCapabilities {
                text_document_sync: Some(TextDocumentSyncCapability::Kind(
                    TextDocumentSyncKind::FULL,
                )),
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
            },
            ..InitializeResult::default()
        })
    }

    async fn initialized(&self, _: InitializedParams) {
        tokio::spawn(Arc::clone(&self.0).watch());
    }

    async fn shutdown(&self) -> RpcResult<()> {
        Ok(())
    }

    async fn did_change_workspace_folders(&self, params: DidChangeWorkspaceFoldersParams) {
        let paths = |folders: Vec<WorkspaceFolder>| -> Vec<PathBuf> {
            folders
                .iter()
                .filter_map(|folder| folder.uri.to_file_path().map(|p| p.into_owned()))
                .map(|path| path.canonicalize().unwrap_or(path))
                .collect()
        };
        let (added, removed) = (paths(params.event.added), paths(params.event.removed));
        let mut inner = lock(&self.0.inner);
        inner.folders.retain(|folder| !removed.contains(folder));
        inner.folders.extend(added);
        // Documents may belong to another workspace now (or to none).
        let docs: Vec<(String, String)> =
            inner.docs.iter().map(|(uri, doc)| (uri.clone(), doc.text.clone())).collect();
        for (uri, text) in docs {
            let target = uri.parse::<Uri>().ok().and_then(|parsed| inner.target_of(&parsed, &text));
            if let Some(doc) = inner.docs.get_mut(&uri) {
                doc.target = target;
                doc.ranges = None;
            }
        }
    }

    async fn did_open(&self, params: DidOpenTextDocumentParams) {
        let document = params.text_document;
        let mut inner = lock(&self.0.inner);
        let target = inner.target_of(&document.uri, &document.text);
        let doc = Doc { target, text: document.text, ranges: None, shown: false, lensed: None };
        inner.docs.insert(document.uri.as_str().to_owned(), doc);
    }

    async fn did_change(&self, params: DidChangeTextDocumentParams) {
        // Full sync: the last change is the whole text.
        let Some(change) = params.content_changes.into_iter().next_back() else { return };
        let uri = params.text_document.uri;
        let mut inner = lock(&self.0.inner);
        let target = inner.target_of(&uri, &change.text);
        if let Some(doc) = inner.docs.get_mut(uri.as_str()) {
            doc.target = target;
            doc.text = change.text;
            // Asked again at the next hover or lens; the watcher refreshes shown lenses.
            doc.ranges = None;
        }
    }

    async fn did_close(&self, params: DidCloseTextDocumentParams) {
        lock(&self.0.inner).docs.remove(params.text_document.uri.as_str());
    }

    async fn hover(&self, params: HoverParams) -> RpcResult<Option<Hover>> {
        let position = params.text_document_position_params;
        let Some(ranges) = self.0.ranges(&position.text_document.uri).await else {
            return Ok(None);
        };
        let line = u64::from(position.position.line);
        let Some(range) = ranges.iter().find(|r| r.start_line <= line && line < r.end_line) else {
            return Ok(None);
        };
        Ok(Some(Hover {
            contents: HoverContents::Markup(MarkupContent {
                kind: MarkupKind::Markdown,
                value: text::hover(range, lock(&self.0.inner).capabilities.command_links),
            }),
            range: Some(Range {
                start: Position { line: range.start_line as u32, character: 0 },
                end: Position { line: range.end_line as u32, character: 0 },
            }),
        }))
    }

    async fn code_lens(&self, params: CodeLensParams) -> RpcResult<Option<Vec<CodeLens>>> {
        let uri = &params.text_document.uri;
        let Some(ranges) = self.0.ranges(uri).await else {
            return Ok(None);
        };
        if let Some(doc) = lock(&self.0.inner).docs.get_mut(uri.as_str()) {
            doc.lensed = Some(Arc::clone(&ranges));
        }
        let lenses = ranges
            .iter()
            .map(|range| {
                let line = range.start_line as u32;
                CodeLens {
                    range: Range {
                        start: Position { line, character: 0 },
                        end: Position { line, character: 0 },
                    },
                    command: Some(Command {
                        title: text::lens(range),
                        command: "dsh.saw".to_owned(),
                        arguments: Some(vec![
                            json!({"sessionId": range.session_id, "step": range.step}),
                        ]),
                    }),
                    data: None,
                }
            })
            .collect();
        Ok(Some(lenses))
    }

    async fn execute_command(&self, params: ExecuteCommandParams) -> RpcResult<Option<LSPAny>> {
        let argument = params.arguments.into_iter().next().unwrap_or(Value::Null);
        let outcome = match params.command.as_str() {
            "dsh.prompt" => self.0.prompt(parse(argument)?).await,
            "dsh.steer" => self.0.steer(parse(argument)?).await,
            "dsh.cancel" => self.0.cancel(parse(argument)?).await,
            "dsh.fork" => self.0.fork(parse(argument)?).await,
            "dsh.saw" => self.0.saw(parse(argument)?).await,
            other => {
                return Err(invalid(format!(
                    "unknown command `{other}`; dsh knows {}",
                    COMMANDS.join(", ")
                )));
            }
        };
        match outcome {
            Ok(value) => Ok(Some(value)),
            Err(failure) => {
                self.0.lsp.show_message(MessageType::ERROR, &failure.message).await;
                Err(failure)
            }
        }
    }
}

/// A command's argument: an object, or (for the text commands) a bare string.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Args {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    workspace: Option<String>,
    #[serde(default)]
    new: bool,
    #[serde(default)]
    step: Option<u64>,
}

fn parse(argument: Value) -> RpcResult<Args> {
    match argument {
        Value::Null => Ok(Args::default()),
        Value::String(text) => Ok(Args { text: Some(text), ..Args::default() }),
        value => serde_json::from_value(value).map_err(|e| invalid(format!("bad arguments: {e}"))),
    }
}

impl Inner {
    /// The file and workspace of a document, when it is to be attributed.
    fn target_of(&self, uri: &Uri, text: &str) -> Option<(PathBuf, PathBuf)> {
        if text.len() > MAX_DOCUMENT_BYTES || text.contains('\0') {
            return None;
        }
        let path = uri.to_file_path()?.into_owned();
        let path = path.canonicalize().unwrap_or(path);
        let workspace = self
            .folders
            .iter()
            .filter(|folder| path.starts_with(folder))
            .max_by_key(|folder| folder.as_os_str().len())?;
        Some((path, workspace.clone()))
    }

    fn workspace(&self, args: &Args) -> RpcResult<PathBuf> {
        match (&args.workspace, self.folders.first()) {
            (Some(workspace), _) => Ok(PathBuf::from(workspace)),
            (None, Some(folder)) => Ok(folder.clone()),
            (None, None) => {
                Err(invalid("no workspace folder is open: open one, or pass `workspace`"))
            }
        }
    }
}

impl State {
    /// The attribution of an open document, asked of the daemon when the text changed since.
    async fn ranges(&self, uri: &Uri) -> Option<Arc<Vec<ProvenanceRange>>> {
        let (target, text) = {
            let mut inner = lock(&self.inner);
            let doc = inner.docs.get_mut(uri.as_str())?;
            doc.shown = true;
            if let Some(ranges) = &doc.ranges {
                return Some(Arc::clone(ranges));
            }
            (doc.target.clone()?, doc.text.clone())
        };
        let ranges = Arc::new(self.ask(&target, &text).await?);
        let mut inner = lock(&self.inner);
        let doc = inner.docs.get_mut(uri.as_str())?;
        // Keep it only if the text did not change meanwhile.
        if doc.text == text {
            doc.ranges = Some(Arc::clone(&ranges));
        }
        Some(ranges)
    }

    /// Asks the daemon for a file's attribution; `None` when it cannot answer (said once).
    async fn ask(
        &self,
        (path, workspace): &(PathBuf, PathBuf),
        text: &str,
    ) -> Option<Vec<ProvenanceRange>> {
        let params = WorkspaceProvenanceParams {
            workspace: workspace.display().to_string(),
            path: path.display().to_string(),
            text: Some(text.to_owned()),
        };
        let call = self.dsh.call::<method::WorkspaceProvenance>(params);
        let Ok(answer) = tokio::time::timeout(ASK_TIMEOUT, call).await else {
            tracing::warn!("provenance of {}: no answer in {ASK_TIMEOUT:?}", path.display());
            return None;
        };
        let result = match answer {
            Ok(result) => result,
            Err(failure) => {
                tracing::warn!("provenance of {}: {failure}", path.display());
                self.report(format!("dsh: cannot attribute {}: {failure}", path.display())).await;
                return None;
            }
        };
        for log_error in &result.errors {
            self.report(format!("dsh: a session log cannot be read: {log_error}")).await;
        }
        Some(result.ranges)
    }

    /// Shows a warning once per distinct message.
    async fn report(&self, message: String) {
        if lock(&self.inner).reported.insert(message.clone()) {
            self.lsp.show_message(MessageType::WARNING, message).await;
        }
    }

    /// The session a command is about: the one named, else the workspace's running one, else
    /// its latest (`None`: the workspace has none).
    async fn session_of(&self, args: &Args, workspace: &Path) -> RpcResult<Option<String>> {
        if let Some(id) = &args.session_id {
            return Ok(Some(id.clone()));
        }
        let params = SessionListParams { workspace: Some(workspace.display().to_string()) };
        let listing = self.dsh.call::<method::SessionList>(params).await.map_err(daemon_error)?;
        let usable = listing.sessions.iter().filter(|s| s.error.is_none());
        let running = usable.clone().find(|s| s.running);
        let latest = usable.max_by_key(|s| (s.updated_ms, s.session_id.clone()));
        Ok(running.or(latest).map(|s| s.session_id.clone()))
    }

    /// `dsh.prompt {text, sessionId?, workspace?, new?}`: runs a turn (queued behind a running
    /// one) and answers at once with `{sessionId}`; the turn reports through `$/progress` and
    /// ends with a message.
    async fn prompt(self: &Arc<Self>, args: Args) -> RpcResult<Value> {
        let text = args.text.clone().ok_or_else(|| invalid("dsh.prompt needs `text`"))?;
        let workspace = lock(&self.inner).workspace(&args)?;
        let existing = if args.new { None } else { self.session_of(&args, &workspace).await? };
        let session_id = match existing {
            Some(id) => id,
            None => {
                let params = SessionCreateParams {
                    workspace: workspace.display().to_string(),
                    model: None,
                    config: None,
                    mcp_servers: None,
                };
                self.dsh
                    .call::<method::SessionCreate>(params)
                    .await
                    .map_err(daemon_error)?
                    .session_id
            }
        };
        self.follow(&session_id).await;
        let state = Arc::clone(self);
        let id = session_id.clone();
        tokio::spawn(async move {
            let params = SessionPromptParams {
                session_id: id.clone(),
                text,
                when_busy: Some(WhenBusy::Queue),
            };
            if let Err(failure) = state.dsh.call::<method::SessionPrompt>(params).await {
                state.lsp.show_message(MessageType::ERROR, format!("dsh: {failure}")).await;
                state.unfollow(&id).await;
            }
        });
        Ok(json!({"sessionId": session_id}))
    }

    /// `dsh.steer {text, sessionId?}`: a message that joins the session's next request.
    async fn steer(&self, args: Args) -> RpcResult<Value> {
        let text = args.text.clone().ok_or_else(|| invalid("dsh.steer needs `text`"))?;
        let workspace = lock(&self.inner).workspace(&args)?;
        let session_id = self
            .session_of(&args, &workspace)
            .await?
            .ok_or_else(|| invalid("no session to steer in this workspace"))?;
        let params = SessionInjectParams { session_id: session_id.clone(), text };
        let result = self.dsh.call::<method::SessionInject>(params).await.map_err(daemon_error)?;
        Ok(json!({"sessionId": session_id, "seq": result.seq}))
    }

    /// `dsh.cancel {sessionId?}`.
    async fn cancel(&self, args: Args) -> RpcResult<Value> {
        let workspace = lock(&self.inner).workspace(&args)?;
        let session_id = self
            .session_of(&args, &workspace)
            .await?
            .ok_or_else(|| invalid("no session to cancel in this workspace"))?;
        let params = SessionParams { session_id: session_id.clone() };
        let result = self.dsh.call::<method::SessionCancel>(params).await.map_err(daemon_error)?;
        Ok(json!({"sessionId": session_id, "cancelled": result.cancelled}))
    }

    /// `dsh.fork {sessionId, step?}`: a new session with the log before step `step` (the
    /// whole log without one).
    async fn fork(&self, args: Args) -> RpcResult<Value> {
        let session_id =
            args.session_id.clone().ok_or_else(|| invalid("dsh.fork needs `sessionId`"))?;
        let params =
            SessionForkParams { session_id, at_seq: None, at_step: args.step, config: None };
        let fork = self.dsh.call::<method::SessionFork>(params).await.map_err(daemon_error)?;
        self.lsp
            .show_message(MessageType::INFO, format!("dsh: forked into {}", fork.session_id))
            .await;
        Ok(json!({"sessionId": fork.session_id}))
    }

    /// `dsh.saw {sessionId, step}`: what the model saw at that step, written read-only under
    /// the daemon's state directory and shown with `window/showDocument`.
    async fn saw(&self, args: Args) -> RpcResult<Value> {
        let session_id =
            args.session_id.clone().ok_or_else(|| invalid("dsh.saw needs `sessionId`"))?;
        let step = args.step.ok_or_else(|| invalid("dsh.saw needs `step`"))?;
        let params = SessionRequestParams { session_id: session_id.clone(), step, diff: None };
        let request =
            self.dsh.call::<method::SessionRequest>(params).await.map_err(daemon_error)?;
        let content = dsh_daemon::views::request_text(&request, false);
        let path = write_read_only(&self.home, &session_id, step, &content)
            .map_err(|e| error(format!("dsh: writing what the model saw: {e}")))?;
        let uri = Uri::from_file_path(&path)
            .ok_or_else(|| error(format!("dsh: no URI for {}", path.display())))?;
        if lock(&self.inner).capabilities.show_document {
            let shown = self
                .lsp
                .show_document(ShowDocumentParams {
                    uri: uri.clone(),
                    external: None,
                    take_focus: Some(true),
                    selection: None,
                })
                .await;
            if let Err(failure) = shown {
                tracing::warn!("window/showDocument: {failure}");
            }
        }
        Ok(json!({"uri": uri.as_str(), "path": path.display().to_string()}))
    }

    /// Follows a session's turn: `$/progress` while it runs, a message when it ends.
    async fn follow(self: &Arc<Self>, session_id: &str) {
        let _one_at_a_time = self.follows.lock().await;
        if lock(&self.inner).followed.contains_key(session_id) {
            return;
        }
        let token = self.begin_progress(session_id).await;
        let followed = Followed { token, ..Followed::default() };
        lock(&self.inner).followed.insert(session_id.to_owned(), followed);
        let params =
            SessionEventsParams { session_id: session_id.to_owned(), from_seq: 0, limit: 0 };
        let from_seq = match self.dsh.call::<method::SessionEvents>(params).await {
            Ok(page) => page.length,
            Err(failure) => {
                tracing::warn!("following {session_id}: {failure}");
                drop(_one_at_a_time);
                self.unfollow(session_id).await;
                return;
            }
        };
        let params =
            SessionSubscribeParams { session_id: session_id.to_owned(), from_seq: Some(from_seq) };
        match self.dsh.call::<method::SessionSubscribe>(params).await {
            Ok(subscription) => {
                if let Some(followed) = lock(&self.inner).followed.get_mut(session_id) {
                    followed.subscription = Some(subscription);
                }
            }
            Err(failure) => {
                tracing::warn!("subscribing to {session_id}: {failure}");
                drop(_one_at_a_time);
                self.unfollow(session_id).await;
            }
        }
    }

    async fn begin_progress(&self, session_id: &str) -> Option<ProgressToken> {
        let token = {
            let mut inner = lock(&self.inner);
            if !inner.capabilities.work_done_progress {
                return None;
            }
            inner.progress_tokens += 1;
            ProgressToken::String(format!("dsh-turn-{}", inner.progress_tokens))
        };
        let created = self
            .lsp
            .send_request::<WorkDoneProgressCreate>(WorkDoneProgressCreateParams {
                token: token.clone(),
            })
            .await;
        if created.is_err() {
            return None;
        }
        self.progress(
            &token,
            WorkDoneProgress::Begin(WorkDoneProgressBegin {
                title: "dsh".to_owned(),
                cancellable: Some(false),
                message: Some(format!("turn running in {session_id}")),
                percentage: None,
            }),
        )
        .await;
        Some(token)
    }

    async fn progress(&self, token: &ProgressToken, value: WorkDoneProgress) {
        let params =
            ProgressParams { token: token.clone(), value: ProgressParamsValue::WorkDone(value) };
        self.lsp.send_notification::<Progress>(params).await;
    }

    /// Stops following a session: ends its progress and its subscription.
    async fn unfollow(&self, session_id: &str) {
        let Some(followed) = lock(&self.inner).followed.remove(session_id) else { return };
        if let Some(token) = followed.token {
            let end = WorkDoneProgressEnd { message: Some("turn ended".to_owned()) };
            deliver(self.progress(&token, WorkDoneProgress::End(end))).await;
        }
        if let Some(subscription) = followed.subscription
            && let Err(failure) = self.dsh.call::<method::SessionUnsubscribe>([subscription]).await
        {
            tracing::debug!("unsubscribing from {session_id}: {failure}");
        }
    }

    /// The router: each followed session's events, in order.
    async fn route(self: Arc<Self>, mut inbox: mpsc::UnboundedReceiver<Unsolicited>) {
        while let Some(message) = inbox.recv().await {
            let Unsolicited::Notification(notification) = message else { continue };
            let Some((subscription, event)) = event_of(&notification) else { continue };
            // Only the current subscription of a followed session counts (an older one may
            // still deliver a few events before its end).
            let current = lock(&self.inner).followed.get(&event.session_id).is_some_and(|f| {
                f.subscription.as_ref().is_none_or(|current| *current == subscription)
            });
            if current {
                self.on_event(event).await;
            }
        }
        tracing::warn!("the dsh daemon closed the connection");
        self.lsp.show_message(MessageType::ERROR, "dsh: the daemon closed the connection").await;
    }

    async fn on_event(self: &Arc<Self>, delivered: SessionEvent) {
        let session_id = delivered.session_id;
        let followed = lock(&self.inner).followed.get(&session_id).cloned();
        let Some(Followed { token, .. }) = followed else { return };
        match delivered.event.data {
            EventData::StepStart(start) => {
                if let Some(token) = &token {
                    let report = report(text::step_started(start.step));
                    deliver(self.progress(token, WorkDoneProgress::Report(report))).await;
                }
            }
            EventData::StepEnd(end) => {
                if let Some(token) = &token {
                    let report = report(text::step_ended(end.step, &end.usage));
                    deliver(self.progress(token, WorkDoneProgress::Report(report))).await;
                }
            }
            EventData::ToolResult(result)
                if matches!(result.name.as_str(), "write_file" | "edit_file") =>
            {
                // The log says more about some file now: attribution is asked again (the
                // watcher refreshes the lenses that change).
                for doc in lock(&self.inner).docs.values_mut() {
                    doc.ranges = None;
                }
            }
            EventData::ApprovalRequest(request) => {
                // Asked in a task of its own: the router keeps forwarding while the user
                // decides (and an approval decided elsewhere resolves without this answer).
                let state = Arc::clone(self);
                tokio::spawn(async move { state.ask_approval(session_id, request).await });
            }
            EventData::TurnEnd(end) => {
                let failure = end.error.as_deref();
                let message = text::turn_ended(&session_id, end.turn, end.reason.as_str(), failure);
                self.unfollow(&session_id).await;
                let kind = if failure.is_some() { MessageType::WARNING } else { MessageType::INFO };
                deliver(self.lsp.show_message(kind, message)).await;
                deliver(self.refresh()).await;
            }
            _ => {}
        }
    }

    /// An approval the turn waits for, asked with `window/showMessageRequest`: Allow, Allow
    /// always, Deny (no answer: the daemon's timeout denies it).
    async fn ask_approval(&self, session_id: String, request: ApprovalRequest) {
        let ApprovalRequest { approval_id, tool, summary, .. } = request;
        let choices = [
            ("Allow", ApprovalChoice::Allow),
            ("Allow always", ApprovalChoice::AllowAlways),
            ("Deny", ApprovalChoice::Deny),
        ];
        let actions = choices.iter().map(|(title, _)| MessageActionItem {
            title: (*title).to_owned(),
            properties: HashMap::new(),
        });
        let asked = self
            .lsp
            .show_message_request(
                MessageType::WARNING,
                format!("dsh asks to run {tool}: {summary}"),
                Some(actions.collect()),
            )
            .await;
        let Ok(Some(picked)) = asked else { return };
        let Some((_, decision)) = choices.into_iter().find(|(title, _)| *title == picked.title)
        else {
            return;
        };
        let params =
            ApprovalRespondParams { session_id, approval_id: approval_id.to_owned(), decision };
        if let Err(failure) = self.dsh.call::<method::ApprovalRespond>(params).await {
            tracing::warn!("answering approval {approval_id}: {failure}");
        }
    }

    /// The watcher: turns of this workspace started elsewhere, and attribution that changed.
    async fn watch(self: Arc<Self>) {
        for round in 1u64.. {
            tokio::time::sleep(POLL).await;
            if let Err(failure) = self.poll(round % RECHECK_EVERY == 0).await {
                if matches!(failure, ClientError::Closed) {
                    return;
                }
                tracing::warn!("polling the daemon: {failure}");
            }
        }
    }

    /// One round: follow new turns of the workspace; re-ask the attribution of shown documents
    /// whose text changed or whose sessions wrote (`everything`: of every shown document).
    async fn poll(self: &Arc<Self>, everything: bool) -> Result<(), ClientError> {
        let status = self.dsh.call::<method::DaemonStatus>(NoParams {}).await?;
        // A follow whose turn ended before its subscription began never sees `turn/end`: two
        // polls in a row that find the session idle end it.
        let stale: Vec<String> = {
            let mut inner = lock(&self.inner);
            let running: HashSet<&str> = status
                .sessions
                .iter()
                .filter(|s| s.running)
                .map(|s| s.session_id.as_str())
                .collect();
            inner
                .followed
                .iter_mut()
                .filter_map(|(id, followed)| {
                    if running.contains(id.as_str()) {
                        followed.idle_polls = 0;
                        return None;
                    }
                    followed.idle_polls += 1;
                    (followed.idle_polls > 2).then(|| id.clone())
                })
                .collect()
        };
        for session_id in stale {
            self.unfollow(&session_id).await;
        }
        for session in status.sessions.iter().filter(|s| s.running) {
            let known = lock(&self.inner).workspaces.get(&session.session_id).cloned();
            let workspace = match known {
                Some(workspace) => workspace,
                None => {
                    let workspace = self.workspace_of_session(&session.session_id).await;
                    lock(&self.inner)
                        .workspaces
                        .insert(session.session_id.clone(), workspace.clone());
                    workspace
                }
            };
            let ours = workspace.is_some_and(|w| lock(&self.inner).folders.contains(&w));
            if ours {
                self.follow(&session.session_id).await;
            }
        }
        // Re-ask the attribution of documents whose lenses or hovers were shown and that have
        // none since their text changed or a followed turn wrote; now and then of all of them
        // (a safety net: the logs of a workspace change through its turns, which are followed).
        type Shown = (String, (PathBuf, PathBuf), String, Option<Arc<Vec<ProvenanceRange>>>);
        let shown: Vec<Shown> = {
            let inner = lock(&self.inner);
            inner
                .docs
                .iter()
                .filter(|(_, doc)| doc.shown && (everything || doc.ranges.is_none()))
                .filter_map(|(uri, doc)| {
                    Some((uri.clone(), doc.target.clone()?, doc.text.clone(), doc.ranges.clone()))
                })
                .collect()
        };
        for (uri, target, text, before) in shown {
            let Some(now) = self.ask(&target, &text).await else { continue };
            let mut inner = lock(&self.inner);
            let Some(doc) = inner.docs.get_mut(&uri) else { continue };
            if doc.text == text {
                doc.ranges = Some(match before {
                    Some(before) if *before == now => before,
                    _ => Arc::new(now),
                });
            }
        }
        // Lenses shown from an attribution that is not the current one are refreshed; the
        // editor re-asks after the refresh (until then, no second refresh).
        let mut changed = false;
        for doc in lock(&self.inner).docs.values_mut() {
            if let (Some(lensed), Some(ranges)) = (&doc.lensed, &doc.ranges)
                && lensed != ranges
            {
                doc.lensed = Some(Arc::clone(ranges));
                changed = true;
            }
        }
        if changed {
            self.refresh().await;
        }
        Ok(())
    }

    async fn workspace_of_session(&self, session_id: &str) -> Option<PathBuf> {
        let params =
            SessionEventsParams { session_id: session_id.to_owned(), from_seq: 0, limit: 1 };
        let page = self.dsh.call::<method::SessionEvents>(params).await.ok()?;
        let EventData::SessionMeta(meta) = &page.events.first()?.event.data else { return None };
        let workspace = PathBuf::from(&meta.workspace);
        Some(workspace.canonicalize().unwrap_or(workspace))
    }

    /// Asks the editor to re-ask code lenses (when it can be asked).
    async fn refresh(&self) {
        if lock(&self.inner).capabilities.code_lens_refresh
            && let Err(failure) = self.lsp.code_lens_refresh().await
        {
            tracing::debug!("workspace/codeLens/refresh: {failure}");
        }
    }
}

fn report(message: String) -> WorkDoneProgressReport {
    WorkDoneProgressReport { cancellable: None, message: Some(message), percentage: None }
}

/// How long a "what the model saw" file is kept: copies older than this are removed when the
/// next one is written (each is rebuilt from the log on request anyway).
const SAW_KEEP: Duration = Duration::from_secs(24 * 60 * 60);

/// Removes the saw files of `dir` older than [`SAW_KEEP`] (best effort).
fn remove_old_saw_files(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let old = entry
            .metadata()
            .and_then(|metadata| metadata.modified())
            .is_ok_and(|modified| modified.elapsed().is_ok_and(|age| age > SAW_KEEP));
        if old && entry.file_name().to_string_lossy().ends_with(".txt") {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Writes what the model saw to `<home>/saw/<session>-step<N>.txt`, read-only (0400) in a 0700
/// directory; an older copy is replaced, copies older than a day removed.
fn write_read_only(
    home: &Path,
    session_id: &str,
    step: u64,
    content: &str,
) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let dir = dsh_daemon::startup::DshHome::new(home).saw_dir();
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
    // Private whatever the umask, or an older directory's mode, says.
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
    let safe: String = session_id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
        .collect();
    let path = dir.join(format!("{safe}-step{step}.txt"));
    let temp = dir.join(format!(".{safe}-step{step}.txt.{}", std::process::id()));
    let _ = std::fs::remove_file(&temp);
    {
        use std::io::Write;
        let mut file =
            std::fs::OpenOptions::new().write(true).create_new(true).mode(0o400).open(&temp)?;
        file.write_all(content.as_bytes())?;
        file.sync_all()?;
    }
    std::fs::rename(&temp, &path)?;
    remove_old_saw_files(&dir);
    Ok(path)
}
