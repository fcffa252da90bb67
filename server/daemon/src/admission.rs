//! The admission step of the line transport, pure: one frame read from a connection (a line, or
//! why no line could be read) becomes a request to run, an error to answer, or nothing.
//!
//! What is refused here, each with a JSON-RPC error and without closing the connection: a line
//! that is not UTF-8 or not JSON (-32700), a line over the size limit (-32600), a batch
//! (-32600), anything but an object (-32600), a notification — a request without an id —
//! (-32600, answered with id null: there is nothing else to answer with), and an object that
//! is not a JSON-RPC 2.0 request (-32600, with its id when it has a readable one). What a
//! connection may have in flight is the answering step's business (`connection.rs`).

use dsh_protocol::jsonrpc::{ErrorObject, INVALID_REQUEST, Id, PARSE_ERROR, Request, Response};
use serde_json::Value;

/// A line the codec could not hand out as text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadLine {
    /// Over the size limit (its bytes are skipped up to the next newline).
    TooLong {
        /// The limit, in bytes.
        limit: usize,
    },
    /// Not UTF-8 (the line is consumed).
    NotUtf8,
}

/// What to do with one frame.
#[derive(Debug)]
pub enum Admission {
    /// A blank line: nothing.
    Skip,
    /// Answer with this error; the connection goes on.
    Reject(Response),
    /// Run this request.
    Call(Call),
}

/// An admitted request.
#[derive(Debug)]
pub struct Call {
    /// Its id.
    pub id: Id,
    /// Its method.
    pub method: String,
    /// The line as received (the method table parses it again, as `jsonrpsee` wants a line).
    pub line: String,
    /// For `session/unsubscribe` and `daemon/unsubscribe`: the subscription it names, as JSON
    /// text.
    pub unsubscribe: Option<String>,
}

/// Admits one frame.
pub fn admit(frame: Result<String, BadLine>) -> Admission {
    let line = match frame {
        Ok(line) => line,
        Err(BadLine::TooLong { limit }) => {
            return reject(
                Id::Null,
                INVALID_REQUEST,
                format!("request line exceeds {limit} bytes"),
            );
        }
        Err(BadLine::NotUtf8) => {
            return reject(Id::Null, PARSE_ERROR, "parse error: the line is not valid UTF-8");
        }
    };
    if line.trim().is_empty() {
        return Admission::Skip;
    }
    let value: Value = match serde_json::from_str(&line) {
        Ok(value) => value,
        Err(error) => return reject(Id::Null, PARSE_ERROR, format!("parse error: {error}")),
    };
    let Some(object) = value.as_object() else {
        let message = if value.is_array() {
            "batch requests are not supported: send one request per line"
        } else {
            "a request must be a JSON object"
        };
        return reject(Id::Null, INVALID_REQUEST, message);
    };
    let Some(id) = object.get("id") else {
        let message = "notifications are not supported: every request needs an id";
        return reject(Id::Null, INVALID_REQUEST, message);
    };
    let Ok(id) = serde_json::from_value::<Id>(id.clone()) else {
        return reject(Id::Null, INVALID_REQUEST, "a request id must be a number or a string");
    };
    let request: Request = match serde_json::from_str(&line) {
        Ok(request) => request,
        Err(error) => return reject(id, INVALID_REQUEST, format!("invalid request: {error}")),
    };
    let unsubscribe = dsh_protocol::method::UNSUBSCRIBE
        .contains(&request.method.as_str())
        .then(|| subscription_param(object.get("params")))
        .flatten();
    Admission::Call(Call { id: request.id, method: request.method, line, unsubscribe })
}

fn reject(id: Id, code: i32, message: impl Into<String>) -> Admission {
    Admission::Reject(Response::error(id, ErrorObject::new(code, message)))
}

/// The subscription id named by `session/unsubscribe` params (`[id]` or `{"subscription": id}`),
/// as its JSON text.
fn subscription_param(params: Option<&Value>) -> Option<String> {
    let id = match params? {
        Value::Array(items) => items.first()?,
        Value::Object(fields) => fields.get("subscription")?,
        _ => return None,
    };
    Some(id.to_string())
}

#[cfg(test)]
mod tests;
