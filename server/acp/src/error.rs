//! Errors on the ACP wire, mapped in this one place: the front's own refusals (invalid params,
//! a session not open here, a turn that failed) as the SDK's error codes with dsh's message, and
//! the daemon's errors as ACP errors — an unknown session is ACP's "resource not found", a bad
//! workspace "invalid params", dsh's other application codes pass through with their `data`
//! (`protocol/README.md`, "Errors": a refused rewind's conflicts, say), and a connection that
//! failed is an internal error.

use agent_client_protocol::ErrorCode;
use dsh_daemon::ClientError;
use dsh_protocol::{SessionConfig, code};
use serde_json::{Value, json};

use crate::front::AcpError;

/// Params that do not fit the method's type.
pub(crate) fn parse<T: serde::de::DeserializeOwned>(params: Value) -> Result<T, AcpError> {
    serde_json::from_value(params)
        .map_err(|error| invalid_params(format!("invalid params: {error}")))
}

/// ACP's "invalid params", saying what is wrong.
pub(crate) fn invalid_params(message: impl Into<String>) -> AcpError {
    AcpError::new(ErrorCode::INVALID_PARAMS, message)
}

/// ACP's "resource not found" for a session this front has not opened.
pub(crate) fn not_open(session_id: &str) -> AcpError {
    not_found(format!(
        "session {session_id} is not open here: call session/load or session/resume first"
    ))
}

/// ACP's "internal error", saying what failed.
pub(crate) fn internal(message: impl Into<String>) -> AcpError {
    AcpError::new(ErrorCode::INTERNAL_ERROR, message)
}

/// A turn that failed, answering its prompt.
pub(crate) fn turn_failed(turn: u64, message: Option<String>) -> AcpError {
    internal(message.unwrap_or_else(|| "the turn failed".to_owned())).data(json!({"turn": turn}))
}

/// The editor stopped reading while a session was replayed to it.
pub(crate) fn stopped_reading() -> AcpError {
    internal("the client stopped reading")
}

/// A daemon error as an ACP error.
pub(crate) fn rpc_error(error: ClientError) -> AcpError {
    match error {
        ClientError::Rpc(object) => match object.code {
            code::SESSION_NOT_FOUND => not_found(object.message),
            code::INVALID_WORKSPACE => invalid_params(object.message),
            code => {
                let error = AcpError::new(code, object.message);
                match object.data {
                    Some(data) => error.data(data),
                    None => error,
                }
            }
        },
        other => internal(other.to_string()),
    }
}

/// `session/create`'s error for the session `dsh acp` was asked to create (`asked`): a profile
/// or model the workspace's configuration does not know names the flag it came from.
pub(crate) fn create_refused(error: ClientError, asked: &SessionConfig) -> AcpError {
    if error.code() != Some(code::CONFIG) {
        return rpc_error(error);
    }
    let flags = [("--provider", &asked.profile), ("--model", &asked.model)]
        .into_iter()
        .filter_map(|(flag, value)| Some(format!("{flag} {}", value.as_ref()?)))
        .collect::<Vec<_>>();
    let error = rpc_error(error);
    if flags.is_empty() {
        return error;
    }
    let message = format!("dsh acp {}: {}", flags.join(" "), error.message);
    AcpError::new(error.code, message)
}

/// ACP's "resource not found": a session.
fn not_found(message: impl Into<String>) -> AcpError {
    AcpError::new(ErrorCode::RESOURCE_NOT_FOUND, message)
}

#[cfg(test)]
mod tests;
