//! The API's types of the daemon itself: the handshake, its status (sessions loaded, sandbox,
//! profiles and models), its notices and shutdown.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use ts_rs::TS;

use crate::*;

api_type! {
    /// Who is calling.
    pub struct ClientInfo {
        /// Client name, e.g. `dsh-vscode`.
        pub name: String,
        /// Client version.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub version: Option<String>,
    }
}

api_type! {
    /// `initialize` params.
    pub struct InitializeParams {
        /// The client.
        pub client_info: ClientInfo,
        /// Must be [`PROTOCOL_VERSION`].
        pub protocol_version: u32,
    }
}

api_type! {
    /// Who answers.
    pub struct ServerInfo {
        /// `dsh`.
        pub name: String,
        /// The daemon's version.
        pub version: String,
    }
}

api_type! {
    /// What the daemon supports.
    pub struct Capabilities {
        /// Every method it serves.
        pub methods: Vec<String>,
        /// Every log event kind it may push in `session/event`.
        pub event_kinds: Vec<String>,
    }
}

api_type! {
    /// `initialize` result.
    pub struct InitializeResult {
        /// The daemon.
        pub server_info: ServerInfo,
        /// The protocol version spoken.
        pub protocol_version: u32,
        /// Supported methods and events.
        pub capabilities: Capabilities,
    }
}

api_type! {
    /// A session held in the daemon's memory.
    pub struct LoadedSession {
        /// The id.
        pub session_id: String,
        /// Whether a turn is running.
        pub running: bool,
        /// Set when the session's task failed; it accepts no more turns.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub failed: Option<String>,
    }
}

api_type! {
    /// One kernel feature the command sandbox is built from.
    pub struct SandboxFeature {
        /// `landlock` or `userns`.
        pub name: String,
        /// The kernel offers it.
        pub available: bool,
        /// The sandbox uses it (available, and not turned off by the configuration).
        pub used: bool,
        /// The configuration turned it off (`--sandbox-without`).
        pub turned_off: bool,
        /// What it offers (`Landlock ABI 7`), or why it is missing.
        pub detail: String,
    }
}

api_type! {
    /// What confines the commands the model runs.
    pub struct SandboxStatus {
        /// The policy: `workspace-write`, `read-only` or `full` (no confinement).
        pub policy: String,
        /// Whether commands may use the network.
        pub network: bool,
        /// Each kernel feature: offered, used, turned off.
        pub features: Vec<SandboxFeature>,
        /// The layers applied to every command, in words.
        pub in_force: Vec<String>,
        /// Every command asks for approval, because the sandbox is weaker than its policy.
        pub approval_required: bool,
        /// What is missing and what that means, for people (empty when all is in force).
        pub warnings: Vec<String>,
        /// What one command may use (processes, memory, file size, CPU time), in words; empty
        /// when commands are not confined.
        #[serde(default)]
        pub limits: String,
    }
}

api_type! {
    /// `daemon/status` result.
    pub struct DaemonStatusResult {
        /// The daemon's version.
        pub version: String,
        /// Its process id.
        pub pid: u32,
        /// Protocol version.
        pub protocol_version: u32,
        /// Its state directory.
        pub home: String,
        /// Where new sessions on the default profile send their requests: the daemon's
        /// `--base-url` (each such session pinned to it), else the default profile's.
        pub base_url: String,
        /// The provider profiles of the daemon's configuration (built in, the user's file and
        /// the daemon's flags; a workspace's file may add models or change defaults for its
        /// sessions). A base URL edited in the configuration shows here: it is not part of
        /// any log.
        #[serde(default)]
        pub profiles: Vec<ProfileStatus>,
        /// The configuration files in use.
        #[serde(default)]
        pub config_files: Vec<String>,
        /// Configuration files that cannot be used now, with where and why: their last good
        /// version stays in use.
        #[serde(default)]
        pub config_errors: Vec<String>,
        /// Sessions loaded in memory.
        pub sessions: Vec<LoadedSession>,
        /// Connected clients.
        pub clients: u64,
        /// Milliseconds since it started.
        pub uptime_ms: u64,
        /// What the user should know about this daemon's setup (a state directory others can
        /// read, descriptors running out, …); empty when all is well.
        #[serde(default)]
        pub warnings: Vec<String>,
        /// The command sandbox.
        pub sandbox: SandboxStatus,
        /// The MCP tool servers running or started for the loaded sessions' workspaces.
        #[serde(default)]
        pub mcp_servers: Vec<McpServerStatus>,
        /// The workspace checkpoint stores this daemon has opened: their size, budget, what
        /// the last collection dropped, what recovery did.
        #[serde(default)]
        pub checkpoints: Vec<CheckpointStoreStatus>,
    }
}

api_type! {
    /// A `daemon/notice`: something the user should know now.
    pub struct DaemonNotice {
        /// `configError`: a configuration file was edited into one that cannot be used (the
        /// last good version stays in use).
        pub kind: String,
        /// For people: the file, the line and what is wrong.
        pub message: String,
    }
}

api_type! {
    /// One provider profile in `daemon/status`.
    pub struct ProfileStatus {
        /// Its name.
        pub name: String,
        /// The endpoint kind.
        pub kind: ProviderKind,
        /// Where its requests go.
        pub base_url: String,
        /// Whether new sessions use it by default.
        pub default: bool,
        /// The models it lists (with prices where configured).
        pub models: Vec<ModelStatus>,
    }
}

api_type! {
    /// One model of a profile in `daemon/status`.
    pub struct ModelStatus {
        /// The model id.
        pub id: String,
        /// Its context window, when configured.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub context_window: Option<u64>,
        /// Its prices, when configured.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub price: Option<Price>,
        /// Whether it reads images (its `images` setting).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        #[ts(as = "Option<bool>", optional)]
        pub images: bool,
    }
}

/// `daemon/keys` params: provider keys from a client's environment, by the variable a profile
/// names (`DEEPSEEK_API_KEY`, …), for a daemon another client started without them. Values are
/// secrets: never logged, listed or shown in an error (this type's `Debug` hides them).
#[derive(Clone, PartialEq, Serialize, Deserialize, JsonSchema, TS)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DaemonKeysParams {
    /// Variable name → key.
    pub keys: std::collections::BTreeMap<String, String>,
}

impl std::fmt::Debug for DaemonKeysParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&String> = self.keys.keys().collect();
        f.debug_struct("DaemonKeysParams").field("keys", &names).finish()
    }
}

api_type! {
    /// `daemon/keys` result.
    pub struct DaemonKeysResult {
        /// The variables whose keys the daemon took (it had none for them).
        pub taken: Vec<String>,
        /// The variables it already had a key for: kept, the one given ignored.
        pub kept: Vec<String>,
    }
}

api_type! {
    /// `daemon/shutdown` result.
    pub struct DaemonShutdownResult {
        /// Always true: the daemon cancels running turns, flushes logs, removes its socket and
        /// exits after answering.
        pub stopping: bool,
    }
}

api_type! {
    /// `daemon/web` params.
    #[derive(Default)]
    pub struct DaemonWebParams {
        /// The workspace the page opens at (an absolute path; else the list of every workspace).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[ts(optional)]
        pub workspace: Option<String>,
    }
}

api_type! {
    /// `daemon/web` result.
    pub struct DaemonWebResult {
        /// The page's origin, `http://127.0.0.1:PORT`.
        pub origin: String,
        /// The login URL: the origin, `/login` and a one-time code that works once, within
        /// [`WEB_CODE_SECONDS`] seconds, and is exchanged for a session cookie.
        pub url: String,
        /// Whether this call started the network front (false: it was already listening).
        pub started: bool,
    }
}

/// How long a `daemon/web` login code works (seconds).
pub const WEB_CODE_SECONDS: u64 = 300;

api_type! {
    /// The params of a method that takes none: `{}` (absent params are accepted too).
    #[derive(Default)]
    pub struct NoParams {}
}
