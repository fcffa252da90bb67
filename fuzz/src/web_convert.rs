//! `web_convert`: `web_fetch`'s HTML conversion (`dsh_agent::tools::web::convert`) on arbitrary
//! bytes, decoded as the tool decodes a body (UTF-8 by default, a `<meta charset>` honoured).
//!
//! Checks: converting to Markdown and to text never panics (a deep or malformed tree included:
//! the converter recurses, so depth is what it must refuse); each output is bounded by its
//! input — text at most twice the input plus a constant (character references expand at most
//! that much), Markdown at most [`MARKDOWN_FACTOR`] times (indentation grows with nesting,
//! which is capped at `MAX_DEPTH`) — and a conversion of an input this target is given takes
//! less than [`MAX_SECONDS`] (libFuzzer's own `-timeout` is the hard stop; this names it).

use std::time::{Duration, Instant};

use dsh_agent::tools::web::convert::{MAX_CONVERT_BYTES, decode, html_to_markdown, html_to_text};

/// How many times the input's size the Markdown may be.
pub const MARKDOWN_FACTOR: usize = 256;

/// The longest one conversion of a fuzzing input may take.
pub const MAX_SECONDS: u64 = 10;

/// Converts `data` both ways and checks the bounds.
pub fn check(data: &[u8]) {
    let decoded = decode(data, None, true);
    let html = decoded.text.as_str();
    let input = html.len().min(MAX_CONVERT_BYTES);
    let started = Instant::now();
    let markdown = html_to_markdown(html);
    let text = html_to_text(html);
    let took = started.elapsed();
    assert!(
        text.text.len() <= 2 * input + 64,
        "{} bytes of text from {input} bytes of HTML",
        text.text.len()
    );
    assert!(
        markdown.text.len() <= MARKDOWN_FACTOR * input + 4096,
        "{} bytes of Markdown from {input} bytes of HTML",
        markdown.text.len()
    );
    for note in markdown.notes.iter().chain(&text.notes) {
        assert!(note.len() < 200, "a note of {} bytes", note.len());
    }
    assert!(took < Duration::from_secs(MAX_SECONDS), "{took:?} for {input} bytes");
}
