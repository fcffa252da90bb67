//! Application error codes (JSON-RPC reserves -32768..-32000 for itself; the standard codes
//! -32700 parse error, -32600 invalid request, -32601 method not found and -32602 invalid params
//! are used as the spec defines them).

/// No session with that id in this daemon's home.
pub const SESSION_NOT_FOUND: i32 = 1001;
/// A turn is running and the prompt asked not to queue.
pub const SESSION_BUSY: i32 = 1002;
/// The step (or seq) is outside the log.
pub const OUT_OF_RANGE: i32 = 1003;
/// Too many requests in flight; retry later.
pub const OVERLOADED: i32 = 1004;
/// The workspace does not exist or is not a directory.
pub const INVALID_WORKSPACE: i32 = 1005;
/// The session cannot be used: another process holds its log, or its task failed.
pub const SESSION_UNAVAILABLE: i32 = 1006;
/// The provider is not configured (no API key) or refused the request.
pub const PROVIDER: i32 = 1007;
/// No pending approval with that id.
pub const APPROVAL_NOT_FOUND: i32 = 1008;
/// `initialize` with a protocol version this daemon does not speak.
pub const UNSUPPORTED_PROTOCOL: i32 = 1009;
/// The daemon is shutting down.
pub const SHUTTING_DOWN: i32 = 1010;
/// Reading or writing a log failed.
pub const STORE: i32 = 1011;
/// The configuration cannot be used for this: a file that does not parse, an unknown
/// provider profile or model.
pub const CONFIG: i32 = 1012;
/// The workspace is `/`, the user's home or holds dsh's state or configuration: the
/// user must confirm it once (`dsh allow-workspace DIR`, `allow_workspaces` in the user's
/// configuration file) before sessions run there.
pub const WORKSPACE_NOT_CONFIRMED: i32 = 1013;
/// The checkpoint a rewind needs cannot be restored: there is none (checkpoints were off, or
/// the step ran no file-changing tool and no turn ended after it), or collection removed its
/// objects (the data names them).
pub const CHECKPOINT_UNAVAILABLE: i32 = 1014;
/// A rewind would overwrite files changed since the last checkpoint by someone other than the
/// agent; the data lists them. Pass `force` to overwrite them.
pub const REWIND_CONFLICT: i32 = 1015;
/// A rewind failed part-way; the data says which files are in which state.
pub const REWIND_FAILED: i32 = 1016;
/// `session/object` asked for an object the session's log does not name (only those are
/// served, never any hash in the store), or one that cannot be read.
pub const OBJECT_NOT_FOUND: i32 = 1017;
/// A `UserPromptSubmit` hook of the user's configuration refused the prompt (exit 2, or it
/// failed): the message says which hook and why; no turn started (docs/hooks.md).
pub const PROMPT_REFUSED: i32 = 1020;
/// A move to a model that does not read images (`session/fork` with another profile or model)
/// of a conversation that carries images, or `session/create` for a prompt with images on such
/// a model: the message names the model and how many images, and how to go on.
pub const IMAGES_UNSUPPORTED: i32 = 1021;
