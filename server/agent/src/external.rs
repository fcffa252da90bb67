//! Tools from outside the built-in toolbox — the daemon's MCP servers — as the loop sees them:
//! a list asked for at every step (its schemas join the header, so a change is a logged header
//! change) and a call that always answers.
//!
//! The loop owns the order: built-in tools first, in their fixed order, then every external tool
//! sorted by name, so the order in which servers start never reorders the header. A name that
//! collides with a built-in tool is left out here, with a warning; collisions between servers are
//! the provider's to refuse (the daemon's MCP manager does, naming both).

use tokio_util::sync::CancellationToken;

use crate::approval::{BoxFuture, Policy};
use crate::tools::ToolOutput;

/// Where [`ExternalTools::tools`] says what it waits for: one `mcp/wait` payload per wait.
pub type Waits = tokio::sync::mpsc::UnboundedSender<dsh_session::McpWait>;

/// One external tool, as the model sees it and as the approval policy treats it.
#[derive(Clone, Debug, PartialEq)]
pub struct ExternalTool {
    /// Its schema, with its request name (`SERVER__TOOL`).
    pub schema: dsh_session::ToolSchema,
    /// The server it comes from, for approval summaries.
    pub server: String,
    /// The policy of its server (an `[approvals]` entry naming the tool beats it).
    pub policy: Policy,
}

/// Where external tools come from.
pub trait ExternalTools: Send + Sync {
    /// The tools now. Waits (bounded) for servers that are still starting or fetching a tool
    /// list they said changed, so a slow start does not make the list flap; before it waits, it
    /// sends what it waits for on `waits` (the loop logs it as `mcp/wait`).
    fn tools(&self, waits: Waits) -> BoxFuture<'_, Vec<ExternalTool>>;

    /// Runs one call with the arguments exactly as the model wrote them. Never fails: a timeout,
    /// a server that died or refused the call is an error output. `cancel` withdraws the call
    /// (the server is told).
    fn call(
        &self,
        name: &str,
        arguments: &str,
        cancel: &CancellationToken,
    ) -> BoxFuture<'static, ToolOutput>;
}
