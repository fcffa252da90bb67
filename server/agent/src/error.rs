//! The agent crate's error type.

use dsh_store::StoreError;

/// What can stop the loop itself (as opposed to a turn that ends with an error reason, which is
/// a normal, logged outcome).
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The session log could not be written or read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The session's owner task is gone (the daemon is shutting down).
    #[error("the session is closed")]
    SessionClosed,
    /// The request rebuilt from the log differs from the live one: a bug, never a warning.
    #[error("reconstruction invariant violated at step {step}: {difference}")]
    Invariant {
        /// The step.
        step: u64,
        /// The first differing field.
        difference: String,
    },
    /// A `UserPromptSubmit` hook refused the prompt (exit 2, or it failed): nothing
    /// model-visible was logged, the hook's run was.
    #[error("the prompt was refused: {reason}")]
    PromptRefused {
        /// The hook's name.
        hook: String,
        /// Why, in words (the hook's standard error, or its failure).
        reason: String,
    },
    /// A task of the loop's own failed (a panic): a bug.
    #[error("internal error: {0}")]
    Internal(String),
}
