//! The JSON both wire formats are written with, by hand and byte for byte: strings escaped
//! exactly as `serde_json` escapes them ([`put_str`], the hot loop of a long body), values with
//! object keys sorted at every depth ([`put_canonical`]: tool schemas come out the same whether
//! or not some crate in the build enables `serde_json/preserve_order`), scalars ([`put`]).
//!
//! And the few things the two bodies write alike — the tools' order, the text of an empty tool
//! result, the sampling fields — so that `crate::chat` and `crate::anthropic` both build on this
//! module and never on each other.

use dsh_session::{ImageData, ImageFormat, ImageRef, LlmCallConfig, ToolSchema};
use serde::Serialize;

/// A JSON string of `bytes` in standard base64 (padded): an image's data, in both formats.
/// The alphabet needs no escaping.
pub(crate) fn put_base64(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'"');
    put_base64_unquoted(out, bytes);
    out.push(b'"');
}

/// `bytes` in standard base64 (padded), without quotes (inside a `data:` URL).
pub(crate) fn put_base64_unquoted(out: &mut Vec<u8>, bytes: &[u8]) {
    use base64::Engine as _;
    let start = out.len();
    out.resize(start + base64::encoded_len(bytes.len(), true).unwrap_or(0), 0);
    let written = base64::engine::general_purpose::STANDARD
        .encode_slice(bytes, &mut out[start..])
        .unwrap_or(0);
    out.truncate(start + written);
}

/// The bytes of `image` in `images`; empty when they were not loaded, which
/// [`crate::check_request`] refuses before anything is sent.
pub(crate) fn image_bytes<'a>(images: &'a ImageData, image: &ImageRef) -> &'a [u8] {
    images.get(&image.sha256).unwrap_or_default()
}

/// The media type an image is sent with: its logged one when it is one models are given (the
/// log checks refuse others), else `application/octet-stream` — never text that would need
/// escaping inside a `data:` URL.
pub(crate) fn media_type(image: &ImageRef) -> &'static str {
    ImageFormat::of_media_type(&image.media_type)
        .map_or("application/octet-stream", ImageFormat::media_type)
}

/// What an empty tool result is sent as, in both formats.
pub const EMPTY_TOOL_OUTPUT: &str = "(no output)";

/// Tools in UTF-16 code-unit order of their names (what the TypeScript harness did); equal
/// names keep their order. Both formats write them so.
pub(crate) fn sorted_tools(tools: &[ToolSchema]) -> Vec<&ToolSchema> {
    let mut sorted: Vec<&ToolSchema> = tools.iter().collect();
    sorted.sort_by(|a, b| a.name.encode_utf16().cmp(b.name.encode_utf16()));
    sorted
}

/// `temperature` and `top_p`, when set: the same fields, in this order, in both formats.
pub(crate) fn put_sampling(out: &mut Vec<u8>, config: &LlmCallConfig) {
    if let Some(temperature) = config.temperature {
        out.extend_from_slice(b",\"temperature\":");
        put(out, &temperature);
    }
    if let Some(top_p) = config.top_p {
        out.extend_from_slice(b",\"top_p\":");
        put(out, &top_p);
    }
}

/// Writes a JSON value with object keys in byte order, at every depth.
pub(crate) fn put_canonical(out: &mut Vec<u8>, value: &serde_json::Value) {
    match value {
        serde_json::Value::Array(items) => {
            out.push(b'[');
            for (position, item) in items.iter().enumerate() {
                if position > 0 {
                    out.push(b',');
                }
                put_canonical(out, item);
            }
            out.push(b']');
        }
        serde_json::Value::Object(map) => {
            let mut entries: Vec<(&String, &serde_json::Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (position, (key, item)) in entries.into_iter().enumerate() {
                if position > 0 {
                    out.push(b',');
                }
                put_str(out, key);
                out.push(b':');
                put_canonical(out, item);
            }
            out.push(b'}');
        }
        serde_json::Value::String(text) => put_str(out, text),
        scalar => put(out, scalar),
    }
}

/// Appends a string as JSON, byte for byte what `serde_json` writes (`"` and `\\` escaped, the
/// control characters as `\b \f \n \r \t` or `\u00xx` in lowercase hex, nothing else).
///
/// A long conversation's body is mostly long strings, so this is the hot loop of serializing
/// one from scratch. It goes sixteen bytes at a time: a block with nothing to escape (found
/// eight bytes at a time) is copied as it is; any other block is written byte by byte without
/// a branch on the byte — each byte's JSON form comes from [`FORM`], is stored whole and the
/// cursor moves by its length — into a staging buffer appended at once. Code and prose have an
/// escape every few dozen bytes (a newline, a quote), which made a copy per run and a write per
/// escape cost more than the bytes themselves.
pub(crate) fn put_str(out: &mut Vec<u8>, text: &str) {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    /// Whether any byte of `word` is a control character, `"` or `\\`: the high bit of such a
    /// byte is set in the mask (bits above a flagged byte may be spurious: a borrow carries
    /// upward only from a byte that is flagged itself, so the mask is zero exactly when no byte
    /// is).
    fn needs_escape(word: &[u8]) -> bool {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(word);
        let word = u64::from_le_bytes(bytes);
        let below_space = word.wrapping_sub(ONES * 0x20) & !word;
        let zero_byte = |v: u64| v.wrapping_sub(ONES) & !v;
        let quote = zero_byte(word ^ (ONES * u64::from(b'"')));
        let backslash = zero_byte(word ^ (ONES * u64::from(b'\\')));
        (below_space | quote | backslash) & HIGHS != 0
    }
    /// Writes each byte's form into `staged` and appends the result to `out`.
    fn put_escaped(out: &mut Vec<u8>, staged: &mut [u8; STAGED], bytes: &[u8]) {
        let mut len = 0;
        for &byte in bytes {
            let (form, form_len) = &FORM[usize::from(byte)];
            staged[len..len + 8].copy_from_slice(form);
            len += usize::from(*form_len);
        }
        out.extend_from_slice(&staged[..len]);
    }
    const BLOCK: usize = 16;
    /// The longest form of a block, and room to store the last byte's form whole.
    const STAGED: usize = BLOCK * 6 + 8;
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut staged = [0u8; STAGED];
    let mut blocks = bytes.chunks_exact(BLOCK);
    for block in &mut blocks {
        if block.chunks_exact(8).any(needs_escape) {
            put_escaped(out, &mut staged, block);
        } else {
            out.extend_from_slice(block);
        }
    }
    put_escaped(out, &mut staged, blocks.remainder());
    out.push(b'"');
}

/// Each byte's form inside a JSON string, padded to eight bytes, and its length: the byte
/// itself; `\\` and a letter (`"`, `\\` and the five control characters with one); or
/// `\\u00xx` in lowercase hex (the other control characters) — `serde_json`'s escapes.
static FORM: [([u8; 8], u8); 256] = {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut table = [([0u8; 8], 1u8); 256];
    let mut byte = 0;
    while byte < 256 {
        let letter = match byte as u8 {
            0x08 => b'b',
            0x09 => b't',
            0x0a => b'n',
            0x0c => b'f',
            0x0d => b'r',
            b'"' => b'"',
            b'\\' => b'\\',
            0x00..0x20 => b'u',
            _ => 0,
        };
        table[byte] = match letter {
            0 => ([byte as u8, 0, 0, 0, 0, 0, 0, 0], 1),
            b'u' => ([b'\\', b'u', b'0', b'0', HEX[byte >> 4], HEX[byte & 0xf], 0, 0], 6),
            _ => ([b'\\', letter, 0, 0, 0, 0, 0, 0], 2),
        };
        byte += 1;
    }
    table
};

/// Appends the compact JSON of a number or scalar value.
pub(crate) fn put<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    // Serializing strings, integers, floats and scalar `Value`s into a `Vec` cannot fail: there
    // is no I/O and there are no map keys. (Non-finite floats become `null`.)
    let result = serde_json::to_writer(out, value);
    debug_assert!(result.is_ok(), "serializing a scalar failed");
}

#[cfg(test)]
mod tests;
