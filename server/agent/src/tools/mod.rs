//! Built-in tools the model calls: reading, listing, searching and editing files in the
//! workspace, running shell commands there, keeping a plan (`update_plan`), and fetching a web
//! page (`web_fetch`, see `web.rs`).
//!
//! The loop sees one type, [`Toolbox`]: the tool schemas for the request header, the access
//! class of each tool for the approval policy, a one-line description of a call for approval
//! prompts, and [`Toolbox::call`], which runs a call from the argument string exactly as the
//! model produced it. A call never fails as a Rust error: every failure becomes a
//! [`ToolOutput`] with `is_error` set and a message the model can act on.
//!
//! Schemas are part of the byte-stable request header, so they are constants: sorted by name,
//! no clock, no host-specific text, and no configuration values in them.
//!
//! Every path argument goes through [`Workspace`] confinement (see `workspace.rs`); commands run
//! through the session's [`CommandSandbox`] (`dsh-sandbox`), which confines them and gives them
//! a built environment, never the daemon's. This module does not apply the approval policy —
//! the loop does, from [`Toolbox::access`] and the sandbox's state.

pub(crate) mod command;
mod files;
pub(crate) mod plan;
mod schema;
mod search;
pub mod skill;
pub mod web;
mod workspace;

#[cfg(test)]
mod tests;

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use dsh_sandbox::CommandSandbox;
use dsh_session::ImageFormat;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

pub use web::WebSettings;
pub use workspace::Workspace;

/// What a tool may do, which decides the approval policy (auto, ask or deny) the loop applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// Reads the workspace only.
    Read,
    /// Writes files in the workspace.
    Write,
    /// Runs an arbitrary shell command.
    Command,
    /// Changes only the session's plan (`update_plan`): no file, no command, so it runs without
    /// asking unless a per-tool policy names it.
    Plan,
    /// Fetches a URL (`web_fetch`): reaches the network, changes no file.
    Web,
}

/// The result of one tool call, as the model will see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolOutput {
    /// The text returned to the model.
    pub content: String,
    /// Whether the call failed (bad arguments, refused path, non-zero exit, timeout, ...).
    pub is_error: bool,
    /// The file the call read or wrote, as it stands after the call (`read_file`, `write_file`,
    /// `edit_file` when they succeed).
    pub seen: Option<Seen>,
    /// The image `read_file` found (the file's magic bytes say it is one): the loop attaches
    /// it to the result for a model that reads images; `content` describes it in one line.
    pub image: Option<FileImage>,
}

/// An image file as `read_file` found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileImage {
    /// Its path relative to the workspace root.
    pub path: String,
    /// Its format, by its magic bytes.
    pub format: ImageFormat,
    /// Its size in bytes.
    pub size: u64,
    /// Its width and height in pixels, when its header says.
    pub pixels: Option<(u32, u32)>,
    /// Its bytes; `None` when it is over [`dsh_session::MAX_IMAGE_BYTES`] (never kept whole).
    pub bytes: Option<Arc<[u8]>>,
}

impl FileImage {
    /// One line naming it: path, media type, size, pixel size when known.
    pub fn describe(&self) -> String {
        let mut line = format!("{}: {}, {} bytes", self.path, self.format.media_type(), self.size);
        if let Some((width, height)) = self.pixels {
            let _ = write!(line, ", {width}x{height} pixels");
        }
        line
    }
}

/// A file as a call read or wrote it: what the agent knows of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// Its path relative to the workspace root.
    pub path: String,
    /// SHA-256 (hex) of its whole content.
    pub sha256: String,
    /// Its text, when it is UTF-8 and at most [`SEEN_TEXT_CAP_BYTES`]: what a later change is
    /// diffed against.
    pub text: Option<String>,
}

/// The largest file whose text is kept for a later diff.
pub const SEEN_TEXT_CAP_BYTES: usize = 256 * 1024;

impl ToolOutput {
    /// A successful output.
    pub fn success(content: String) -> ToolOutput {
        ToolOutput { content, is_error: false, seen: None, image: None }
    }

    /// A failed output.
    pub fn error(content: String) -> ToolOutput {
        ToolOutput { content, is_error: true, seen: None, image: None }
    }

    fn from_result(result: Result<String, String>) -> ToolOutput {
        match result {
            Ok(content) => ToolOutput::success(content),
            Err(content) => ToolOutput::error(content),
        }
    }

    fn from_file_result(result: Result<(String, Seen), String>) -> ToolOutput {
        match result {
            Ok((content, seen)) => {
                ToolOutput { content, is_error: false, seen: Some(seen), image: None }
            }
            Err(content) => ToolOutput::error(content),
        }
    }
}

/// Limits of the built-in tools.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolConfig {
    /// How long `run_command` runs when the call sets no `timeout_secs`.
    pub command_timeout: Duration,
    /// The most output bytes `run_command`, `glob`, `grep` and `list_dir` return.
    pub output_cap_bytes: usize,
    /// The most lines one `read_file` call returns.
    pub read_cap_lines: usize,
}

impl Default for ToolConfig {
    fn default() -> ToolConfig {
        ToolConfig {
            command_timeout: Duration::from_secs(120),
            output_cap_bytes: 30_000,
            read_cap_lines: 2_000,
        }
    }
}

/// The built-in tools of one workspace.
#[derive(Clone, Debug)]
pub struct Toolbox {
    workspace: Workspace,
    config: ToolConfig,
    sandbox: Arc<CommandSandbox>,
}

/// How a call runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RunAs {
    /// As the sandbox says (commands confined, when it can).
    #[default]
    Sandboxed,
    /// A command without the sandbox: the user approved this one call as such.
    Unconfined,
}

/// Whether a call of the tool `name` may change files: anything not known to only read or to
/// only keep the plan (the write tools, commands, every MCP tool, an unknown name; `skill` only
/// reads). What a checkpoint is taken before, and what a rewind's target must come before.
pub fn may_change_files(name: &str) -> bool {
    name != skill::SKILL_TOOL
        && !matches!(
            Tool::from_name(name).map(Tool::access),
            Some(Access::Read | Access::Plan | Access::Web)
        )
}

/// The built-in tools, in name order (the order of [`Toolbox::schemas`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tool {
    EditFile,
    Glob,
    Grep,
    ListDir,
    ReadFile,
    RunCommand,
    UpdatePlan,
    WebFetch,
    WriteFile,
}

impl Tool {
    const ALL: [Tool; 9] = [
        Tool::EditFile,
        Tool::Glob,
        Tool::Grep,
        Tool::ListDir,
        Tool::ReadFile,
        Tool::RunCommand,
        Tool::UpdatePlan,
        Tool::WebFetch,
        Tool::WriteFile,
    ];

    fn name(self) -> &'static str {
        match self {
            Tool::EditFile => "edit_file",
            Tool::Glob => "glob",
            Tool::Grep => "grep",
            Tool::ListDir => "list_dir",
            Tool::ReadFile => "read_file",
            Tool::RunCommand => "run_command",
            Tool::UpdatePlan => dsh_session::UPDATE_PLAN_TOOL,
            Tool::WebFetch => "web_fetch",
            Tool::WriteFile => "write_file",
        }
    }

    fn from_name(name: &str) -> Option<Tool> {
        Tool::ALL.into_iter().find(|tool| tool.name() == name)
    }

    fn access(self) -> Access {
        match self {
            Tool::Glob | Tool::Grep | Tool::ListDir | Tool::ReadFile => Access::Read,
            Tool::EditFile | Tool::WriteFile => Access::Write,
            Tool::RunCommand => Access::Command,
            Tool::UpdatePlan => Access::Plan,
            Tool::WebFetch => Access::Web,
        }
    }
}

impl Toolbox {
    /// Creates the toolbox for one workspace, without a command sandbox: commands run
    /// unconfined (with the minimal environment). The daemon always adds one
    /// ([`Toolbox::with_sandbox`]).
    pub fn new(workspace: Workspace, config: ToolConfig) -> Toolbox {
        let sandbox = Arc::new(CommandSandbox::none(workspace.root()));
        Toolbox { workspace, config, sandbox }
    }

    /// The toolbox with `sandbox` confining its commands.
    pub fn with_sandbox(mut self, sandbox: CommandSandbox) -> Toolbox {
        self.sandbox = Arc::new(sandbox);
        self
    }

    /// The command sandbox.
    pub fn sandbox(&self) -> &CommandSandbox {
        &self.sandbox
    }

    /// The workspace the tools are confined to.
    pub fn workspace(&self) -> &Workspace {
        &self.workspace
    }

    /// The tool schemas for the request header: sorted by name, and the same bytes for every
    /// toolbox (no configuration, clock or host text enters them).
    pub fn schemas(&self) -> Vec<dsh_session::ToolSchema> {
        Tool::ALL.into_iter().map(schema::schema).collect()
    }

    /// The access class of a tool, or `None` for an unknown tool.
    pub fn access(&self, name: &str) -> Option<Access> {
        Tool::from_name(name).map(Tool::access)
    }

    /// The workspace path a write call names when it is one the agent may never write without
    /// asking: dsh's workspace configuration (`.dsh/`) and git's repository (`.git/`: hooks,
    /// configuration, `commondir` run or apply at the user's next git command).
    /// Matched on the path as it resolves (a symlink to `.git` is `.git`).
    pub fn protected_path(&self, arguments: &str) -> Option<String> {
        let path = serde_json::from_str::<serde_json::Value>(arguments).ok()?;
        let path = path.get("path")?.as_str()?.to_owned();
        let resolved = self.workspace.resolve(&path).ok()?;
        let shown = self.workspace.display(&resolved.path);
        let protected =
            |prefix: &&str| shown == *prefix || shown.starts_with(&format!("{prefix}/"));
        dsh_sandbox::plan::PROTECTED_IN_WORKSPACE.iter().any(protected).then_some(shown)
    }

    /// One line describing a call for an approval prompt, such as
    /// `write_file src/a.rs (120 bytes)` or `run_command: cargo test`. Works on any input:
    /// unknown tools and malformed arguments are described as such.
    pub fn describe_call(&self, name: &str, arguments: &str) -> String {
        match Tool::from_name(name) {
            Some(tool) => schema::describe(tool, arguments),
            None => format!("unknown tool {}", schema::one_line(name)),
        }
    }

    /// Runs a `web_fetch` call under `settings` (the configuration's `[web]`), refused while
    /// the session's network is off unless they allow it.
    pub async fn web_fetch(
        &self,
        settings: &WebSettings,
        arguments: &str,
        cancel: &CancellationToken,
    ) -> ToolOutput {
        web::fetch(settings, self.sandbox.network(), arguments, cancel).await
    }

    /// Runs one tool call. `arguments` is the JSON argument string exactly as the model
    /// produced it. Never panics and never fails: every failure is an error [`ToolOutput`].
    ///
    /// `cancel` stops a running command (its whole process group is killed) or a search;
    /// file reads and writes are short and run to completion once started, so that a cancelled
    /// call never leaves the model believing a write did not happen when it did.
    pub async fn call(
        &self,
        name: &str,
        arguments: &str,
        cancel: &CancellationToken,
    ) -> ToolOutput {
        self.call_as(name, arguments, cancel, RunAs::Sandboxed).await
    }

    /// Like [`Toolbox::call`], choosing how a command runs (`run_as` only matters for
    /// `run_command`).
    pub async fn call_as(
        &self,
        name: &str,
        arguments: &str,
        cancel: &CancellationToken,
        run_as: RunAs,
    ) -> ToolOutput {
        let Some(tool) = Tool::from_name(name) else {
            let names: Vec<&str> = Tool::ALL.iter().map(|tool| tool.name()).collect();
            return ToolOutput::error(format!(
                "unknown tool `{name}`; available tools: {}",
                names.join(", ")
            ));
        };
        if cancel.is_cancelled() {
            return ToolOutput::error(format!("{name} was cancelled before it started"));
        }
        if tool == Tool::UpdatePlan {
            // The loop runs it through `plan::update` to log the plan it sets; here (a call
            // outside a session) the output alone.
            return plan::update("", arguments).0;
        }
        if tool == Tool::WebFetch {
            return self.web_fetch(&WebSettings::default(), arguments, cancel).await;
        }
        if tool == Tool::RunCommand {
            let unconfined = run_as == RunAs::Unconfined;
            return command::run(&self.sandbox, &self.config, arguments, cancel, unconfined).await;
        }
        // The file tools do blocking I/O (and grep/glob may walk a large tree), so they run on
        // the blocking pool; a panic there comes back as a join error instead of unwinding.
        let workspace = self.workspace.clone();
        let config = self.config.clone();
        let arguments = arguments.to_owned();
        let cancel = cancel.clone();
        let task = tokio::task::spawn_blocking(move || {
            run_blocking(tool, &workspace, &config, &arguments, &cancel)
        });
        match task.await {
            Ok(output) => output,
            Err(error) => {
                tracing::error!(tool = name, %error, "tool task failed");
                ToolOutput::error(format!("{name} failed with an internal error"))
            }
        }
    }
}

fn run_blocking(
    tool: Tool,
    workspace: &Workspace,
    config: &ToolConfig,
    arguments: &str,
    cancel: &CancellationToken,
) -> ToolOutput {
    let result = match tool {
        Tool::EditFile => {
            let result = parse(tool, arguments).and_then(|args| files::edit_file(workspace, args));
            return ToolOutput::from_file_result(result);
        }
        Tool::Glob => {
            parse(tool, arguments).and_then(|args| search::glob(workspace, config, args, cancel))
        }
        Tool::Grep => {
            parse(tool, arguments).and_then(|args| search::grep(workspace, config, args, cancel))
        }
        Tool::ListDir => {
            parse(tool, arguments).and_then(|args| files::list_dir(workspace, config, args))
        }
        Tool::ReadFile => {
            return match parse(tool, arguments)
                .and_then(|args| files::read_file(workspace, config, args))
            {
                Ok(files::Read::Text(content, seen)) => {
                    ToolOutput { content, is_error: false, seen: Some(seen), image: None }
                }
                Ok(files::Read::Image(image, seen)) => ToolOutput {
                    content: image.describe(),
                    is_error: false,
                    seen: Some(seen),
                    image: Some(image),
                },
                Err(content) => ToolOutput::error(content),
            };
        }
        Tool::WriteFile => {
            let result = parse(tool, arguments).and_then(|args| files::write_file(workspace, args));
            return ToolOutput::from_file_result(result);
        }
        Tool::RunCommand | Tool::UpdatePlan | Tool::WebFetch => {
            Err(format!("{} does not run on the blocking pool", tool.name()))
        }
    };
    ToolOutput::from_result(result)
}

/// Parses a call's argument string; an empty string counts as `{}` (some models send that for a
/// call without arguments).
fn parse<T: DeserializeOwned>(tool: Tool, arguments: &str) -> Result<T, String> {
    let arguments = if arguments.trim().is_empty() { "{}" } else { arguments };
    serde_json::from_str(arguments).map_err(|error| {
        format!(
            "invalid arguments for {}: {error}; arguments must be a JSON object matching the tool's schema",
            tool.name()
        )
    })
}
