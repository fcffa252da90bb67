//! An incremental Server-Sent Events decoder.
//!
//! Bytes go in as they arrive from the network, in chunks of any size; complete events come
//! out. It follows the WHATWG event-stream parsing rules that matter for LLM APIs: lines end in
//! `\n`, `\r\n` or a lone `\r` (even when the `\r` and `\n` arrive in different chunks); a line
//! starting with `:` is a comment; `data:` lines accumulate (joined by `\n`) until a blank line
//! dispatches them; one space after the colon is dropped; other fields (`event`, `id`, `retry`)
//! are ignored, since DeepSeek sends none. Multi-byte UTF-8 characters may be split across
//! chunks: a line is only decoded once it is complete, and no line terminator byte can occur
//! inside a UTF-8 sequence.
//!
//! It knows nothing about JSON or `[DONE]`; that is [`crate::chunk`]'s job.

use crate::ProviderError;

/// One decoded SSE item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SseEvent {
    /// The data of one dispatched event (its `data:` lines joined by `\n`).
    Data(String),
    /// A comment line, without its leading `:` (e.g. `" keep-alive"`). Reported so that callers
    /// can see it arrive, and deliberately ignore it for progress timers.
    Comment(String),
}

/// The longest line or event the decoder buffers before declaring the stream malformed.
const MAX_BUFFER: usize = 16 * 1024 * 1024;

/// Incremental SSE decoder; feed it bytes with [`SseDecoder::feed`].
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// Bytes of the current, not yet terminated line.
    line: Vec<u8>,
    /// The `data:` lines of the event being built, joined by `\n`.
    data: String,
    /// Whether the event being built has seen at least one `data` field.
    has_data: bool,
    /// The previous chunk ended in `\r`: a `\n` opening the next chunk belongs to it.
    after_cr: bool,
    /// Still at the very start of the stream (a UTF-8 byte order mark is skipped there).
    at_start: bool,
}

impl SseDecoder {
    /// A decoder at the start of a stream.
    pub fn new() -> Self {
        SseDecoder { at_start: true, ..SseDecoder::default() }
    }

    /// Consumes the next bytes of the stream and returns the events they complete, in order.
    ///
    /// Errors on a line that is not UTF-8 or that exceeds the buffer limit; the decoder should
    /// not be used after an error.
    pub fn feed(&mut self, mut bytes: &[u8]) -> Result<Vec<SseEvent>, ProviderError> {
        let mut events = Vec::new();
        if self.after_cr && !bytes.is_empty() {
            self.after_cr = false;
            if bytes[0] == b'\n' {
                bytes = &bytes[1..];
            }
        }
        while let Some(end) = bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.line.extend_from_slice(&bytes[..end]);
            self.end_line(&mut events)?;
            if bytes[end] == b'\r' {
                match bytes.get(end + 1) {
                    Some(b'\n') => bytes = &bytes[end + 2..],
                    Some(_) => bytes = &bytes[end + 1..],
                    None => {
                        self.after_cr = true;
                        bytes = &[];
                    }
                }
            } else {
                bytes = &bytes[end + 1..];
            }
        }
        self.line.extend_from_slice(bytes);
        if self.line.len() > MAX_BUFFER {
            return Err(ProviderError::Decode(format!("an SSE line exceeds {MAX_BUFFER} bytes")));
        }
        Ok(events)
    }

    /// Whether bytes of an unfinished line or event are buffered (at end of stream, they are
    /// discarded, as the SSE rules say).
    pub fn has_partial(&self) -> bool {
        !self.line.is_empty() || self.has_data
    }

    fn end_line(&mut self, events: &mut Vec<SseEvent>) -> Result<(), ProviderError> {
        let raw = std::mem::take(&mut self.line);
        let mut line = raw.as_slice();
        if self.at_start {
            self.at_start = false;
            line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        }
        let line = std::str::from_utf8(line)
            .map_err(|_| ProviderError::Decode("an SSE line is not valid UTF-8".to_owned()))?;
        if line.is_empty() {
            if self.has_data {
                self.has_data = false;
                events.push(SseEvent::Data(std::mem::take(&mut self.data)));
            }
            return Ok(());
        }
        if let Some(comment) = line.strip_prefix(':') {
            events.push(SseEvent::Comment(comment.to_owned()));
            return Ok(());
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        if field == "data" {
            if self.has_data {
                self.data.push('\n');
            }
            self.has_data = true;
            self.data.push_str(value);
            if self.data.len() > MAX_BUFFER {
                return Err(ProviderError::Decode(format!(
                    "an SSE event exceeds {MAX_BUFFER} bytes"
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
