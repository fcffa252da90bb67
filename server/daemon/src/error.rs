//! The one place internal errors become JSON-RPC errors: a code from `dsh_protocol::code` (or a
//! standard JSON-RPC code) and a message for people. No `Debug` output, no secrets: provider
//! errors are already key-free (the provider crate redacts), and nothing else here sees a key.

use dsh_agent::AgentError;
use dsh_protocol::code;
use dsh_protocol::jsonrpc::{ErrorObject, INVALID_PARAMS};
use dsh_session::ReconstructError;
use dsh_store::StoreError;
use jsonrpsee::types::ErrorObjectOwned;

/// An API error: code, message, and for the few errors a client acts on, data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    /// The code.
    pub code: i32,
    /// For people.
    pub message: String,
    /// What a client needs to act on it (one of the protocol's error data types).
    pub data: Option<serde_json::Value>,
}

/// Results of API operations.
pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    /// An error with any code.
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        ApiError { code, message: message.into(), data: None }
    }

    /// The same error carrying `data` (a protocol error data type).
    pub fn with_data(mut self, data: impl serde::Serialize) -> Self {
        self.data = serde_json::to_value(data).ok();
        self
    }

    /// Bad params.
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(INVALID_PARAMS, message)
    }

    /// A turn is running.
    pub fn busy(session: &str) -> Self {
        Self::new(
            code::SESSION_BUSY,
            format!(
                "session {session} is busy: a turn is running (pass whenBusy: \"queue\" to wait)"
            ),
        )
    }

    /// Too much in flight.
    pub fn overloaded(what: &str) -> Self {
        Self::new(code::OVERLOADED, format!("overloaded, retry later: {what}"))
    }

    /// The workspace is not usable.
    pub fn invalid_workspace(message: impl Into<String>) -> Self {
        Self::new(code::INVALID_WORKSPACE, message)
    }

    /// The workspace needs the user's confirmation first.
    pub fn workspace_not_confirmed(message: impl Into<String>) -> Self {
        Self::new(code::WORKSPACE_NOT_CONFIRMED, message)
    }

    /// The session cannot be used.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(code::SESSION_UNAVAILABLE, message)
    }

    /// The provider is not usable.
    pub fn provider(message: impl Into<String>) -> Self {
        Self::new(code::PROVIDER, message)
    }

    /// The configuration cannot be used (a broken file, an unknown profile or model).
    pub fn config(message: impl Into<String>) -> Self {
        Self::new(code::CONFIG, message)
    }

    /// A step or seq outside the log.
    pub fn out_of_range(message: impl Into<String>) -> Self {
        Self::new(code::OUT_OF_RANGE, message)
    }

    /// No such pending approval.
    pub fn approval_not_found(session: &str, approval: &str) -> Self {
        Self::new(
            code::APPROVAL_NOT_FOUND,
            format!(
                "session {session} has no pending approval `{approval}` (answered, timed out, or never asked)"
            ),
        )
    }

    /// The daemon is stopping.
    pub fn shutting_down() -> Self {
        Self::new(code::SHUTTING_DOWN, "the daemon is shutting down")
    }

    /// A store failure.
    pub fn store(message: impl Into<String>) -> Self {
        Self::new(code::STORE, message)
    }

    /// Maps a store error.
    pub fn from_store(error: StoreError) -> Self {
        let message = error.to_string();
        match error {
            StoreError::SessionNotFound { .. } => Self::new(code::SESSION_NOT_FOUND, message),
            StoreError::InvalidSessionId { .. } => Self::invalid_params(message),
            StoreError::Locked { .. } | StoreError::Poisoned { .. } => Self::unavailable(message),
            StoreError::ForkOutOfRange { .. } => Self::out_of_range(message),
            _ => Self::store(message),
        }
    }

    /// Maps a loop error.
    pub fn from_agent(error: AgentError) -> Self {
        match error {
            AgentError::Store(error) => Self::from_store(error),
            AgentError::SessionClosed => Self::unavailable("the session is closed"),
            error @ AgentError::PromptRefused { .. } => {
                Self::new(code::PROMPT_REFUSED, error.to_string())
            }
            error @ (AgentError::Invariant { .. } | AgentError::Internal(_)) => {
                Self::unavailable(error.to_string())
            }
        }
    }

    /// Maps a reconstruction error.
    pub fn from_reconstruct(error: ReconstructError) -> Self {
        match error {
            error @ ReconstructError::StepOutOfRange { .. } => {
                Self::out_of_range(error.to_string())
            }
            error @ ReconstructError::NoHeader { .. } => Self::store(error.to_string()),
        }
    }
}

impl From<ApiError> for ErrorObject {
    fn from(error: ApiError) -> Self {
        ErrorObject { code: error.code, message: error.message, data: error.data }
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        ApiError::from_store(error)
    }
}

impl From<ApiError> for ErrorObjectOwned {
    fn from(error: ApiError) -> Self {
        ErrorObjectOwned::owned(error.code, error.message, error.data)
    }
}

impl From<AgentError> for ApiError {
    fn from(error: AgentError) -> Self {
        ApiError::from_agent(error)
    }
}
