//! The commands of `workspace/executeCommand`: `dsh.prompt`, `dsh.steer`, `dsh.cancel`,
//! `dsh.fork`, `dsh.saw` and `dsh.rewind` (`rewind.rs`), each one or a few calls of the
//! daemon's API. Their argument is one
//! JSON object (the text commands also take a bare string); without `sessionId` a command is
//! about the workspace's running session, else its most recently updated one. A command that
//! fails says so with `window/showMessage` as well as in its answer.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_protocol::method;
use dsh_protocol::{
    SessionCreateParams, SessionForkParams, SessionInjectParams, SessionListParams, SessionParams,
    SessionPromptParams, SessionRequestParams, WhenBusy,
};
use serde::Deserialize;
use serde_json::{Value, json};
use tower_lsp_server::jsonrpc::Result as RpcResult;
use tower_lsp_server::ls_types::{MessageType, ShowDocumentParams, Uri};

use crate::rewind::Rewind;
use crate::saw;
use crate::server::{Inner, State, daemon_error, error, invalid, lock};

/// The commands `workspace/executeCommand` knows.
pub const COMMANDS: &[&str] =
    &["dsh.prompt", "dsh.steer", "dsh.cancel", "dsh.fork", "dsh.saw", "dsh.rewind"];

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
    /// `dsh.rewind`: the files to this checkpoint (a seq of `session/checkpoints`).
    #[serde(default)]
    checkpoint: Option<u64>,
    #[serde(default)]
    files: Option<bool>,
    #[serde(default)]
    conversation: Option<bool>,
    #[serde(default)]
    force: bool,
    #[serde(default)]
    dry_run: bool,
    /// `dsh.rewind`: ask before rewinding (default true).
    #[serde(default)]
    confirm: Option<bool>,
}

fn parse(argument: Value) -> RpcResult<Args> {
    match argument {
        Value::Null => Ok(Args::default()),
        Value::String(text) => Ok(Args { text: Some(text), ..Args::default() }),
        value => serde_json::from_value(value).map_err(|e| invalid(format!("bad arguments: {e}"))),
    }
}

impl Inner {
    /// The workspace a command is about: the one named, else the first folder.
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
    /// Runs `command` with its first argument. An unknown command or unreadable arguments are
    /// only the answer's error; a command that fails is also a message.
    pub(crate) async fn execute(
        self: &Arc<Self>,
        command: &str,
        argument: Value,
    ) -> RpcResult<Value> {
        let outcome = match command {
            "dsh.prompt" => self.prompt(parse(argument)?).await,
            "dsh.steer" => self.steer(parse(argument)?).await,
            "dsh.cancel" => self.cancel(parse(argument)?).await,
            "dsh.fork" => self.fork(parse(argument)?).await,
            "dsh.saw" => self.saw(parse(argument)?).await,
            "dsh.rewind" => self.rewind_command(parse(argument)?).await,
            other => {
                return Err(invalid(format!(
                    "unknown command `{other}`; dsh knows {}",
                    COMMANDS.join(", ")
                )));
            }
        };
        if let Err(failure) = &outcome {
            self.lsp.show_message(MessageType::ERROR, &failure.message).await;
        }
        outcome
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

    /// The session a command is about, which must exist (`what`: the command's verb).
    async fn existing_session(&self, args: &Args, what: &str) -> RpcResult<String> {
        let workspace = lock(&self.inner).workspace(args)?;
        self.session_of(args, &workspace)
            .await?
            .ok_or_else(|| invalid(format!("no session to {what} in this workspace")))
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
                    config: Some(self.session.clone()),
                    mcp_servers: None,
                    images: None,
                };
                self.dsh
                    .call::<method::SessionCreate>(params)
                    .await
                    .map_err(daemon_error)?
                    .session_id
            }
        };
        // Followed from before the prompt: its turn, whatever its workspace, is seen whole.
        self.follow(&session_id, None).await;
        let state = Arc::clone(self);
        let id = session_id.clone();
        tokio::spawn(async move {
            let params = SessionPromptParams {
                session_id: id.clone(),
                text,
                when_busy: Some(WhenBusy::Queue),
                limits: None,
                output_schema: None,
                attachments: Vec::new(),
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
        let session_id = self.existing_session(&args, "steer").await?;
        let params = SessionInjectParams { session_id: session_id.clone(), text };
        let result = self.dsh.call::<method::SessionInject>(params).await.map_err(daemon_error)?;
        Ok(json!({"sessionId": session_id, "seq": result.seq}))
    }

    /// `dsh.cancel {sessionId?}`.
    async fn cancel(&self, args: Args) -> RpcResult<Value> {
        let session_id = self.existing_session(&args, "cancel").await?;
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
        let path = saw::write_read_only(&self.home, &session_id, step, &content)
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

    /// `dsh.rewind {sessionId?, step | checkpoint, files?, conversation?, force?, dryRun?,
    /// confirm?}` (`rewind.rs`).
    async fn rewind_command(self: &Arc<Self>, args: Args) -> RpcResult<Value> {
        let session_id = self.existing_session(&args, "rewind").await?;
        let asked = Rewind {
            step: args.step,
            checkpoint: args.checkpoint,
            files: args.files,
            conversation: args.conversation,
            force: args.force,
            dry_run: args.dry_run,
            confirm: args.confirm.unwrap_or(true),
        };
        self.rewind(session_id, asked).await
    }
}
