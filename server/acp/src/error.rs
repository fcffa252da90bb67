//! Errors on the ACP wire: the front's own refusals (invalid params, a session not open here)
//! and the daemon's errors as ACP errors, mapped in this one place.

use dsh_daemon::ClientError;
use serde_json::Value;

use crate::front::AcpError;
pub(crate) fn parse<T: serde::de::DeserializeOwned>(params: Value) -> Result<T, AcpError> {
    serde_json::from_value(params)
        .map_err(|error| invalid_params(format!("invalid params: {error}")))
}

pub(crate) fn invalid_params(message: impl Into<String>) -> AcpError {
    AcpError::new(-32602, message)
}

pub(crate) fn not_open(session_id: &str) -> AcpError {
    AcpError::new(
        -32002,
        format!("session {session_id} is not open here: call session/load or session/resume first"),
    )
}

/// A daemon error as an ACP error: an unknown session is ACP's "resource not found", a bad
/// workspace invalid params; other application codes pass through (`protocol/README.md`).
pub(crate) fn rpc_error(error: ClientError) -> AcpError {
    match error {
        ClientError::Rpc(object) => {
            let code = match object.code {
                dsh_protocol::code::SESSION_NOT_FOUND => -32002,
                dsh_protocol::code::INVALID_WORKSPACE => -32602,
                code => code,
            };
            AcpError::new(code, object.message)
        }
        other => AcpError::new(-32603, other.to_string()),
    }
}
