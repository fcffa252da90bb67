//! DeepSeek-shaped API errors and the crate's own error type.
//!
//! Every error the mock answers has the body `{"error":{"message","type","param":null,"code"}}`
//! with content type `application/json` (docs/mock.md, "Validation").

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error answered to an API client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiError {
    pub status: u16,
    pub message: String,
    pub kind: String,
    pub code: Option<String>,
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: u16, message: impl Into<String>, kind: &str, code: Option<&str>) -> Self {
        ApiError {
            status,
            message: message.into(),
            kind: kind.to_owned(),
            code: code.map(str::to_owned),
            retry_after: None,
        }
    }

    /// 400 `invalid_request_error`.
    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError::new(400, message, "invalid_request_error", Some("invalid_request_error"))
    }

    /// 422 `invalid_request_error` for a field with the wrong JSON type.
    pub fn field_type(message: impl Into<String>) -> Self {
        ApiError::new(422, message, "invalid_request_error", Some("invalid_request_error"))
    }

    /// 401 with the key's last four characters.
    pub fn unauthorized(key: &str) -> Self {
        let chars: Vec<char> = key.chars().collect();
        let last4: String = chars[chars.len().saturating_sub(4)..].iter().collect();
        ApiError::new(
            401,
            format!("Authentication Fails, Your api key: ****{last4} is invalid"),
            "authentication_error",
            Some("invalid_request_error"),
        )
    }

    pub fn not_found(method: &str, path: &str) -> Self {
        ApiError::new(
            404,
            format!("Not Found: {method} {path}"),
            "invalid_request_error",
            Some("not_found"),
        )
    }

    /// The default message and type of an injected status fault.
    pub fn for_status(status: u16) -> Self {
        let (message, kind) = match status {
            400 => ("Invalid Format", "invalid_request_error"),
            401 => ("Authentication Fails", "authentication_error"),
            402 => ("Insufficient Balance", "unknown_error"),
            422 => ("Invalid Parameters", "invalid_request_error"),
            429 => ("Rate Limit Reached", "rate_limit_error"),
            503 => ("Server Overloaded", "server_error"),
            _ => ("Server Error", "server_error"),
        };
        ApiError::new(status, message, kind, Some(kind))
    }

    pub fn body(&self) -> serde_json::Value {
        json!({"error": {
            "message": self.message,
            "type": self.kind,
            "param": null,
            "code": self.code,
        }})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, self.body().to_string()).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(seconds) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// Errors of the mock server's own operations (starting, configuration).
#[derive(Debug, thiserror::Error)]
pub enum MockError {
    /// The configured tokenizer is not available.
    #[error("unsupported tokenizer {0:?}: only \"approx-v1\" is implemented")]
    UnsupportedTokenizer(String),
    /// A configured decimal amount does not parse.
    #[error("invalid decimal amount {0:?} in the mock configuration")]
    InvalidAmount(String),
}

impl From<MockError> for std::io::Error {
    fn from(error: MockError) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, error)
    }
}
