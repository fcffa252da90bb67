//! The API's types of MCP tool servers: a workspace's servers and their tools, and the servers
//! a session brings (what an ACP editor passes).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use ts_rs::TS;

api_type! {
    /// `mcp/list` params.
    pub struct McpListParams {
        /// The workspace whose configured servers to list as well (those not started show as
        /// `notStarted`); absent: only the servers running or started.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub workspace: Option<String>,
        /// Start the workspace's servers now and wait (bounded by their startup timeouts) to
        /// list their tools. They stop again unless a loaded session of the workspace uses them.
        #[serde(default)]
        pub start: bool,
    }
}

api_type! {
    /// `mcp/list` result.
    pub struct McpListResult {
        /// The servers, by workspace and name.
        pub servers: Vec<McpServerStatus>,
    }
}

api_type! {
    /// One MCP server of one workspace.
    pub struct McpServerStatus {
        /// The workspace it serves.
        pub workspace: String,
        /// The session whose own server it is (`session/mcpServers`); absent for a server
        /// configured for the workspace, shared by its sessions.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub session: Option<String>,
        /// Its name (its tools are `NAME__TOOL` in requests).
        pub name: String,
        /// `stdio` or `http`.
        pub transport: String,
        /// `notStarted`, `starting`, `running`, `failed` (a restart follows, with backoff),
        /// `stopped`, or `disabled` (`enabled = false`).
        pub state: String,
        /// Its tools as the model sees them (names and descriptions), sorted.
        pub tools: Vec<McpToolStatus>,
        /// Tools it listed that are not offered to the model, each with why.
        #[serde(default)]
        pub refused: Vec<String>,
        /// The last thing that went wrong with it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub last_error: Option<String>,
        /// How many times it was started.
        pub starts: u32,
    }
}

api_type! {
    /// `session/mcpServers` params: the session's own MCP servers, replacing the ones it had.
    pub struct SessionMcpServersParams {
        /// The session (loaded if it is not).
        pub session_id: String,
        /// Its servers; empty: none of its own.
        pub servers: Vec<McpServerSpec>,
    }
}

/// One MCP server a session brings: `command` (stdio: `args`, `env`, `cwd`) or `url` (streamable
/// HTTP: `headers`), not both. `env` values and `headers` are secrets: never logged, listed or
/// shown in an error (this type's `Debug` hides them).
#[derive(Clone, PartialEq, Serialize, Deserialize, JsonSchema, TS)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct McpServerSpec {
    /// Its name: 1 to 32 letters, digits or `-` (its tools are `NAME__TOOL` in requests).
    pub name: String,
    /// A stdio server: the program.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub command: Option<String>,
    /// A stdio server's arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[ts(as = "Option<Vec<String>>", optional)]
    pub args: Vec<String>,
    /// A stdio server's environment besides `PATH`, `HOME` and `LANG` (nothing else of the
    /// daemon's is inherited).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    #[ts(as = "Option<std::collections::BTreeMap<String, String>>", optional)]
    pub env: std::collections::BTreeMap<String, String>,
    /// A stdio server's working directory, absolute (default: the user's home).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub cwd: Option<String>,
    /// A streamable-HTTP server: its URL (`http` or `https`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[ts(optional)]
    pub url: Option<String>,
    /// An HTTP server's extra request headers.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    #[ts(as = "Option<std::collections::BTreeMap<String, String>>", optional)]
    pub headers: std::collections::BTreeMap<String, String>,
}

impl std::fmt::Debug for McpServerSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |map: &std::collections::BTreeMap<String, String>| {
            map.keys().map(|key| format!("{key}=…")).collect::<Vec<_>>()
        };
        f.debug_struct("McpServerSpec")
            .field("name", &self.name)
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &hidden(&self.env))
            .field("cwd", &self.cwd)
            .field("url", &self.url)
            .field("headers", &hidden(&self.headers))
            .finish()
    }
}

api_type! {
    /// `session/mcpServers` result.
    pub struct SessionMcpServersResult {
        /// The session's own servers now, by name (started in the background: a step waits
        /// for them).
        pub servers: Vec<McpServerStatus>,
    }
}

api_type! {
    /// One tool of an MCP server.
    pub struct McpToolStatus {
        /// Its name in requests (`SERVER__TOOL`).
        pub name: String,
        /// Its description, as the server gave it.
        pub description: String,
    }
}
