//! The deterministic approximate tokenizer "approx-v1" (docs/mock.md, "Tokenizer").
//!
//! A rendered request is a list of [`Segment`]s: one-token markers and free text. Each text
//! segment is tokenized on its own, so the tokens of a rendered prefix are always a prefix of the
//! tokens of any append-extension. That property is what makes the prefix-cache accounting of
//! this mock meaningful. The tokenizer does not try to match any real vocabulary; it only aims
//! for a realistic density (about 4 characters per token for English, one per CJK character).

use std::fmt;

/// A one-token special marker of the rendering (written `⟦X⟧` in docs/mock.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Marker {
    /// Beginning of sequence.
    Bos,
    /// Start of a user turn.
    User,
    /// Generation marker: start of an assistant turn.
    Assistant,
    /// Opens a reasoning block.
    Think,
    /// Closes a reasoning block.
    EndThink,
    /// Starts one tool call inside an assistant turn.
    ToolCall,
    /// End of an assistant turn.
    Eos,
}

impl Marker {
    /// The reserved token id of the marker; text tokens never collide with these.
    fn id(self) -> u64 {
        match self {
            Marker::Bos => 1,
            Marker::User => 2,
            Marker::Assistant => 3,
            Marker::Think => 4,
            Marker::EndThink => 5,
            Marker::ToolCall => 6,
            Marker::Eos => 7,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Marker::Bos => "BOS",
            Marker::User => "USER",
            Marker::Assistant => "ASSISTANT",
            Marker::Think => "THINK",
            Marker::EndThink => "/THINK",
            Marker::ToolCall => "TOOL_CALL",
            Marker::Eos => "EOS",
        }
    }
}

/// One element of a rendered request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// A one-token marker.
    Marker(Marker),
    /// Text, tokenized independently of its neighbours.
    Text(String),
    /// An image: `tokens` tokens whose identities derive from `digest` (a hash of its bytes),
    /// so that another image changes the prefix there (docs/mock.md, "Images").
    Image {
        /// FNV-1a of the image's decoded bytes.
        digest: u64,
        /// How many tokens it counts for.
        tokens: u64,
    },
}

impl fmt::Display for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Segment::Marker(marker) => write!(f, "⟦{}⟧", marker.name()),
            Segment::Text(text) => f.write_str(text),
            Segment::Image { digest, tokens } => write!(f, "⟦IMAGE {digest:016x} ×{tokens}⟧"),
        }
    }
}

/// The tokens an image of `bytes` decoded bytes counts for: 1 plus one per started 1,000
/// bytes (docs/mock.md, "Images"; a documented stand-in for providers' pixel-based rules).
pub fn image_tokens(bytes: usize) -> u64 {
    1 + (bytes as u64).div_ceil(1000)
}

/// A token identity. Markers use small reserved ids; a text piece's id is a 63-bit hash of its
/// bytes with the top bit set, so equal pieces always have equal ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token(pub u64);

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a over `bytes`, continuing from `state`.
pub(crate) fn fnv1a(mut state: u64, bytes: &[u8]) -> u64 {
    for byte in bytes {
        state ^= u64::from(*byte);
        state = state.wrapping_mul(FNV_PRIME);
    }
    state
}

impl Token {
    fn of_piece(piece: &str) -> Token {
        Token(fnv1a(FNV_OFFSET, piece.as_bytes()) | (1 << 63))
    }
}

/// The longest piece, in UTF-8 bytes, that one token may cover (unless one character is longer).
const MAX_PIECE_BYTES: usize = 4;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Letter,
    Digit,
    Space,
    Other,
}

fn class_of(character: char) -> Class {
    if character.is_alphabetic() {
        Class::Letter
    } else if character.is_numeric() {
        Class::Digit
    } else if character.is_whitespace() {
        Class::Space
    } else {
        Class::Other
    }
}

/// Splits `text` into pre-tokens: letter runs with at most one leading space, digit runs of 1–3,
/// single punctuation or symbol characters, and whitespace runs.
fn pre_tokens(text: &str) -> Vec<&str> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let end_of = |index: usize| chars.get(index).map_or(text.len(), |(offset, _)| *offset);
    let mut out = Vec::new();
    let mut index = 0;
    while index < chars.len() {
        let (start, character) = chars[index];
        let next_class = chars.get(index + 1).map(|(_, c)| class_of(*c));
        let mut stop = index + 1;
        match class_of(character) {
            Class::Letter => {
                while stop < chars.len() && class_of(chars[stop].1) == Class::Letter {
                    stop += 1;
                }
            }
            Class::Digit => {
                while stop < chars.len()
                    && stop - index < 3
                    && class_of(chars[stop].1) == Class::Digit
                {
                    stop += 1;
                }
            }
            Class::Space if character == ' ' && next_class == Some(Class::Letter) => {
                // A single space joins the letter run after it.
                stop += 1;
                while stop < chars.len() && class_of(chars[stop].1) == Class::Letter {
                    stop += 1;
                }
            }
            Class::Space => {
                while stop < chars.len() && class_of(chars[stop].1) == Class::Space {
                    // Leave a final ' ' for a following letter run.
                    let leaves_space_for_letters = chars[stop].1 == ' '
                        && chars.get(stop + 1).map(|(_, c)| class_of(*c)) == Some(Class::Letter);
                    if leaves_space_for_letters {
                        break;
                    }
                    stop += 1;
                }
            }
            Class::Other => {}
        }
        out.push(&text[start..end_of(stop)]);
        index = stop;
    }
    out
}

/// Cuts `text` into token pieces. The pieces concatenate back to `text` exactly.
pub fn pieces(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for pre_token in pre_tokens(text) {
        let mut start = 0;
        let mut end = 0;
        for (offset, character) in pre_token.char_indices() {
            let width = character.len_utf8();
            if end > start && offset + width - start > MAX_PIECE_BYTES {
                out.push(&pre_token[start..end]);
                start = offset;
            }
            end = offset + width;
        }
        if end > start {
            out.push(&pre_token[start..end]);
        }
    }
    out
}

/// The number of tokens in `text` when it is one segment.
pub fn count(text: &str) -> u64 {
    pieces(text).len() as u64
}

/// Tokenizes a rendered segment list.
pub fn tokenize(segments: &[Segment]) -> Vec<Token> {
    let mut out = Vec::new();
    for segment in segments {
        match segment {
            Segment::Marker(marker) => out.push(Token(marker.id())),
            Segment::Text(text) => out.extend(pieces(text).into_iter().map(Token::of_piece)),
            Segment::Image { digest, tokens } => out.extend(
                (0..*tokens).map(|index| Token(fnv1a(*digest, &index.to_le_bytes()) | (1 << 63))),
            ),
        }
    }
    out
}

#[cfg(test)]
mod tests;
