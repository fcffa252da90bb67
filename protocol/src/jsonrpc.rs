//! JSON-RPC 2.0 envelopes, the one place they are spelled: requests, responses (a result or an
//! error), notifications and ids — used by the daemon's transports and by every client (the
//! CLI, the tests, the benchmarks, the coming fronts). Nothing else in the project writes
//! `{"jsonrpc": "2.0", …}` by hand.
//!
//! Parameters and results stay raw JSON ([`RawValue`]) inside an envelope: the method's own types
//! ([`crate::method::Method`]) give them meaning, and forwarding a result never re-serializes it.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

/// The standard "parse error" code: the line is not JSON (or not UTF-8).
pub const PARSE_ERROR: i32 = -32700;
/// The standard "invalid request" code: JSON, but not a request this server takes.
pub const INVALID_REQUEST: i32 = -32600;
/// The standard "method not found" code.
pub const METHOD_NOT_FOUND: i32 = -32601;
/// The standard "invalid params" code.
pub const INVALID_PARAMS: i32 = -32602;

/// The version marker every envelope carries: serializes as `"2.0"` and refuses anything else.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Version;

impl Serialize for Version {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str("2.0")
    }
}

impl<'de> Deserialize<'de> for Version {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        if text == "2.0" {
            Ok(Version)
        } else {
            Err(D::Error::custom(format!("jsonrpc must be \"2.0\", not {text:?}")))
        }
    }
}

/// A request id: a number, a string, or null (only in an error answering a line whose id could
/// not be read).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Id {
    /// A number (what dsh's own clients send).
    Number(u64),
    /// A string.
    String(String),
    /// No id could be attributed.
    Null,
}

impl std::fmt::Display for Id {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Id::Number(number) => write!(f, "{number}"),
            Id::String(text) => write!(f, "{text:?}"),
            Id::Null => f.write_str("null"),
        }
    }
}

/// A request: a method call that expects a [`Response`] with the same id.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Request {
    /// `"2.0"`.
    pub jsonrpc: Version,
    /// Chosen by the client; echoed by the response.
    pub id: Id,
    /// The method name.
    pub method: String,
    /// The params, as sent (absent when the method takes none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Box<RawValue>>,
}

impl Request {
    /// A request with serialized params.
    pub fn new(id: Id, method: &str, params: Box<RawValue>) -> Request {
        Request { jsonrpc: Version, id, method: method.to_owned(), params: Some(params) }
    }

    /// The request as one line of JSON (no newline).
    pub fn to_line(&self) -> String {
        to_line(self)
    }
}

/// A notification: a method call with no id and no answer (the daemon sends `session/event`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Notification {
    /// `"2.0"`.
    pub jsonrpc: Version,
    /// The method name.
    pub method: String,
    /// The params.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Box<RawValue>>,
}

/// The params of a subscription notification: which subscription, and its payload.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SubscriptionParams {
    /// The id `session/subscribe` returned.
    pub subscription: Value,
    /// The payload (for `session/event`, a [`crate::SessionEvent`]).
    pub result: Box<RawValue>,
}

/// An error object, as a response carries it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct ErrorObject {
    /// A standard code (negative) or one of [`crate::code`].
    pub code: i32,
    /// For people.
    pub message: String,
    /// Anything more, as the server chose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    /// An error with a code and a message.
    pub fn new(code: i32, message: impl Into<String>) -> ErrorObject {
        ErrorObject { code, message: message.into(), data: None }
    }
}

/// A response: the result of the request with the same id, or its error.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Response {
    /// `"2.0"`.
    pub jsonrpc: Version,
    /// The request's id ([`Id::Null`] when the request's id could not be read).
    pub id: Id,
    /// The result (exactly one of `result` and `error` is present).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Box<RawValue>>,
    /// The error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorObject>,
}

impl Response {
    /// An error response.
    pub fn error(id: Id, error: ErrorObject) -> Response {
        Response { jsonrpc: Version, id, result: None, error: Some(error) }
    }

    /// A result response.
    pub fn result(id: Id, result: Box<RawValue>) -> Response {
        Response { jsonrpc: Version, id, result: Some(result), error: None }
    }

    /// The response as one line of JSON (no newline).
    pub fn to_line(&self) -> String {
        to_line(self)
    }

    /// The outcome: the raw result, or the error (a response with neither is an error too).
    pub fn into_outcome(self) -> Result<Box<RawValue>, ErrorObject> {
        match (self.result, self.error) {
            (_, Some(error)) => Err(error),
            (Some(result), None) => Ok(result),
            (None, None) => Err(ErrorObject::new(INVALID_REQUEST, "a response with no result")),
        }
    }
}

/// Anything a client reads from the daemon: a response or a notification.
#[derive(Clone, Debug)]
pub enum Incoming {
    /// The answer to a request.
    Response(Response),
    /// A notification.
    Notification(Notification),
}

impl Incoming {
    /// Reads one line. A line with a `method` is a notification; otherwise a response.
    pub fn parse(line: &str) -> Result<Incoming, serde_json::Error> {
        #[derive(Deserialize)]
        struct Probe<'a> {
            #[serde(borrow, default)]
            method: Option<&'a RawValue>,
        }
        let probe: Probe<'_> = serde_json::from_str(line)?;
        if probe.method.is_some() {
            Ok(Incoming::Notification(serde_json::from_str(line)?))
        } else {
            Ok(Incoming::Response(serde_json::from_str(line)?))
        }
    }
}

/// Serializes `value` as raw JSON. Envelopes and API types serialize without failing (no
/// non-string map keys, no failing `Serialize` impls); should one ever fail, it becomes `null`.
pub fn raw<T: Serialize + ?Sized>(value: &T) -> Box<RawValue> {
    serde_json::value::to_raw_value(value).unwrap_or_else(|_| null())
}

/// A raw `null`.
pub fn null() -> Box<RawValue> {
    Box::<RawValue>::default()
}

fn to_line<T: Serialize>(envelope: &T) -> String {
    serde_json::to_string(envelope).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn envelopes_serialize_as_the_spec_spells_them() {
        let request = Request::new(Id::Number(7), "session/list", raw(&serde_json::json!({})));
        assert_eq!(
            request.to_line(),
            r#"{"jsonrpc":"2.0","id":7,"method":"session/list","params":{}}"#
        );
        let error = Response::error(Id::Null, ErrorObject::new(PARSE_ERROR, "parse error: x"));
        assert_eq!(
            error.to_line(),
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: x"}}"#
        );
        let ok = Response::result(Id::String("a".to_owned()), raw(&true));
        assert_eq!(ok.to_line(), r#"{"jsonrpc":"2.0","id":"a","result":true}"#);
    }

    #[test]
    fn incoming_lines_are_told_apart() {
        let line = r#"{"jsonrpc":"2.0","method":"session/event","params":{"subscription":1,"result":{"seq":0}}}"#;
        let Incoming::Notification(note) = Incoming::parse(line).unwrap() else { panic!() };
        let params: SubscriptionParams = serde_json::from_str(note.params.unwrap().get()).unwrap();
        assert_eq!(params.subscription, serde_json::json!(1));
        assert_eq!(params.result.get(), r#"{"seq":0}"#);
        let line = r#"{"jsonrpc":"2.0","id":3,"error":{"code":1001,"message":"no"}}"#;
        let Incoming::Response(response) = Incoming::parse(line).unwrap() else { panic!() };
        assert_eq!(response.id, Id::Number(3));
        assert_eq!(response.into_outcome().unwrap_err().code, 1001);
        assert!(Incoming::parse(r#"{"jsonrpc":"1.0","id":1,"result":1}"#).is_err());
    }
}
