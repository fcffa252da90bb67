//! Crash recovery: what a crash left open at the end of a log — unanswered tool calls, an open
//! step, an open turn — is closed with logged events before the next turn (or, with reason
//! `error`, when a step fails with an `AgentError`), so a recovered log is well-formed and its
//! next request valid.

use dsh_session::{Closing, StopReason, closing_events};

use crate::error::AgentError;
use crate::owner::SessionHandle;

/// What a crash left open at the end of a log is closed with this message.
pub const INTERRUPTED: &str = "interrupted: the process running this turn stopped";

/// Closes what a crash left open at the end of the log: unanswered tool calls get an error
/// result, an open step a `step/error`, an open turn a `turn/end` (`cancelled`, [`INTERRUPTED`])
/// — so the next request is valid and the log well-formed. Does nothing on a log that ends
/// between turns.
pub async fn close_interrupted(session: &SessionHandle) -> Result<(), AgentError> {
    close_open_turn(session, StopReason::Cancelled, INTERRUPTED).await
}

/// Closes an open turn (see [`close_interrupted`]) with `reason` and `message`.
pub async fn close_open_turn(
    session: &SessionHandle,
    reason: StopReason,
    message: &str,
) -> Result<(), AgentError> {
    let message = message.to_owned();
    let closing = session
        .query(move |s| {
            let tool_result = format!("not run: {message}");
            closing_events(
                s.events(),
                Closing { reason, error: &message, tool_result: &tool_result },
            )
        })
        .await?;
    for data in closing {
        session.append(data).await?;
    }
    Ok(())
}
