//! Injected faults (docs/mock.md, "Faults").
//!
//! Faults queue up through `POST /_fake/fault`. Each chat request that passes validation takes the
//! oldest fault; a fault is used once unless it is `sticky`, in which case it stays at the front
//! of the queue. One fault object may combine several fields (e.g. `crlf` and `split_utf8`);
//! unknown fields are rejected so that a typo does not silently queue an empty fault.

use serde::{Deserialize, Serialize};

/// An HTTP status answered before any streaming starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpFault {
    /// The status code, e.g. 429 or 503.
    pub status: u16,
    /// The error message; a DeepSeek-like default per status otherwise.
    pub message: Option<String>,
    /// The error type; a DeepSeek-like default per status otherwise.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// A `Retry-After` header, in seconds.
    pub retry_after: Option<u64>,
}

/// One queued fault.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Fault {
    /// Answer with this HTTP error instead of a completion.
    pub http: Option<HttpFault>,
    /// Abort the connection after this many data frames, with no `[DONE]`.
    pub drop_after_frames: Option<u64>,
    /// Cut the JSON of data frame N (counting from 1) short.
    pub malformed_frame_at: Option<u64>,
    /// After this many data frames send only keep-alive comments, then abort.
    pub stall_after_frames: Option<u64>,
    /// Interval of the keep-alive comments of a stall or queue fault.
    pub keepalive_every_ms: Option<u64>,
    /// How long a stall lasts before the connection is aborted.
    pub for_ms: Option<u64>,
    /// Keep-alive comments (blank lines when not streaming) for this long before the first frame.
    pub queue_keepalive_ms: Option<u64>,
    /// Replace the finish reason, e.g. `insufficient_system_resource`.
    pub finish_reason: Option<String>,
    /// Write the response in tiny pieces that split multi-byte characters and lines.
    pub split_utf8: bool,
    /// Use `\r\n` line endings.
    pub crlf: bool,
    /// Delay before this request's cache units become visible.
    pub persist_delay_ms: Option<u64>,
    /// Keep the fault for every later request too.
    pub sticky: bool,
}
