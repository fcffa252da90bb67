//! Request bodies as shared pieces, the memoized prefix they are cut from, when a memoized
//! prefix starts a request, and a body's digest.
//!
//! A long conversation's body is mostly its memoized prefix (`WireCache`): copying it into a
//! fresh buffer at every step made a step's cost grow with the conversation (a 49 MB body is
//! a 49 MB allocation, page faults and copy per step). The prefix is kept instead as sealed
//! segments of [`SEGMENT`] bytes, shared by every body cut from it, and an open segment; a body
//! is those segments, a copy of the open one and the request's own rest. The HTTP request sends
//! the pieces one after the other with an exact `Content-Length`: the bytes on the wire are
//! the same.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use dsh_session::{EpochHeader, GenerateRequest, Message};
use sha2::{Digest, Sha256};

/// Bytes of an open segment sealed into a shared piece: a step copies at most this much of
/// its prefix.
const SEGMENT: usize = 64 * 1024;

/// Bytes a batch of [`Prefix::extend_each`] writes before the rest is hashed on a thread of its
/// own: a thread costs tens of microseconds, hashing this much about a millisecond.
const HASH_APART_FROM: usize = 1024 * 1024;

/// A request body: the exact bytes, as pieces. Two are equal when their bytes are, however cut.
#[derive(Clone, Default)]
pub struct WireBytes {
    parts: Vec<Bytes>,
    len: usize,
}

impl WireBytes {
    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The pieces, in order.
    pub fn parts(&self) -> &[Bytes] {
        &self.parts
    }

    /// The bytes in one buffer (a copy).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len);
        for part in &self.parts {
            out.extend_from_slice(part);
        }
        out
    }

    /// The offset of the first byte where `other` differs from these bytes (the shorter one's
    /// length when one is a prefix of the other); `None` when they are equal. Compared a
    /// piece at a time, without copying the pieces into one buffer.
    pub fn first_difference(&self, other: &[u8]) -> Option<usize> {
        let mut at = 0;
        for part in &self.parts {
            let theirs = other.get(at..).unwrap_or_default();
            let theirs = &theirs[..theirs.len().min(part.len())];
            if part[..theirs.len()] != *theirs || theirs.len() < part.len() {
                let within = part.iter().zip(theirs).position(|(x, y)| x != y);
                return Some(at + within.unwrap_or(theirs.len()));
            }
            at += part.len();
        }
        (other.len() != at).then_some(at)
    }

    /// The body of an HTTP request: the pieces in order, with an exact size (so the request
    /// carries `Content-Length`, never chunked encoding).
    pub(crate) fn to_http(&self) -> reqwest::Body {
        match self.parts.as_slice() {
            [] => reqwest::Body::from(Bytes::new()),
            [one] => reqwest::Body::from(one.clone()),
            _ => reqwest::Body::wrap(Pieces {
                parts: self.parts.iter().cloned().collect(),
                remaining: self.len as u64,
            }),
        }
    }
}

impl PartialEq for WireBytes {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.parts.iter().flatten().eq(other.parts.iter().flatten())
    }
}

impl Eq for WireBytes {}

impl std::fmt::Debug for WireBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireBytes")
            .field("len", &self.len)
            .field("parts", &self.parts.len())
            .finish()
    }
}

impl From<Vec<u8>> for WireBytes {
    fn from(bytes: Vec<u8>) -> Self {
        Bytes::from(bytes).into()
    }
}

impl From<Bytes> for WireBytes {
    fn from(bytes: Bytes) -> Self {
        let len = bytes.len();
        WireBytes { parts: if bytes.is_empty() { Vec::new() } else { vec![bytes] }, len }
    }
}

/// An [`http_body::Body`] over pieces, whose exact size it knows.
struct Pieces {
    parts: VecDeque<Bytes>,
    remaining: u64,
}

impl http_body::Body for Pieces {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let next = self.parts.pop_front();
        if let Some(part) = &next {
            self.remaining -= part.len() as u64;
        }
        Poll::Ready(next.map(|part| Ok(http_body::Frame::data(part))))
    }

    fn is_end_stream(&self) -> bool {
        self.parts.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.remaining)
    }
}

/// The memoized start of a body, with its running sha256.
#[derive(Clone, Default)]
pub(crate) struct Prefix {
    sealed: Vec<Bytes>,
    open: Vec<u8>,
    len: usize,
    digest: Sha256,
}

impl Prefix {
    /// Its length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Appends what `put` writes.
    pub(crate) fn extend(&mut self, put: impl FnOnce(&mut Vec<u8>)) {
        let start = self.open.len();
        put(&mut self.open);
        self.digest.update(&self.open[start..]);
        self.len += self.open.len() - start;
        self.seal_if_full();
    }

    /// Appends what `put` writes for each item, in order: [`Prefix::extend`] for each. Once the
    /// batch has written [`HASH_APART_FROM`] bytes (a conversation serialized from scratch:
    /// "what the model saw" of a long session nobody looked at yet), the rest is hashed on a
    /// second thread, a sealed segment at a time, while the serialization goes on — the bytes
    /// and the digest are the same, in about the time of the slower of the two instead of both.
    pub(crate) fn extend_each<T>(
        &mut self,
        items: impl IntoIterator<Item = T>,
        mut put: impl FnMut(&mut Vec<u8>, T),
    ) {
        let mut items = items.into_iter().peekable();
        let start = self.len;
        while self.len - start < HASH_APART_FROM {
            let Some(item) = items.next() else { return };
            self.extend(|out| put(out, item));
        }
        if items.peek().is_some() {
            self.extend_hashing_apart(items, put);
        }
    }

    /// [`Prefix::extend_each`] with the digest updated on a thread of its own. Without one (the
    /// thread could not be started) it hashes as it goes.
    fn extend_hashing_apart<T>(
        &mut self,
        items: impl Iterator<Item = T>,
        mut put: impl FnMut(&mut Vec<u8>, T),
    ) {
        #[cfg(test)]
        tests::HASHED_APART.with(|count| count.set(count.get() + 1));
        // The digest covers every byte so far, the open segment's included: the first piece
        // sealed from here on starts with `hashed` bytes it must not hash again.
        let mut hashed = self.open.len();
        let (pieces, received) = std::sync::mpsc::sync_channel::<(Bytes, usize)>(64);
        let mut digest = self.digest.clone();
        std::thread::scope(|scope| {
            let hasher = std::thread::Builder::new().name("dsh-wire-hash".into()).spawn_scoped(
                scope,
                move || {
                    for (piece, skip) in received {
                        digest.update(&piece[skip..]);
                    }
                    digest
                },
            );
            let Ok(hasher) = hasher else {
                for item in items {
                    self.extend(|out| put(out, item));
                }
                return;
            };
            for item in items {
                let before = self.open.len();
                put(&mut self.open, item);
                self.len += self.open.len() - before;
                if let Some(piece) = self.seal_if_full() {
                    // The hasher stops early only by panicking: `join` passes that on below,
                    // without serializing the rest first.
                    if pieces.send((piece, hashed)).is_err() {
                        break;
                    }
                    hashed = 0;
                }
            }
            drop(pieces);
            let mut digest = hasher.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            digest.update(&self.open[hashed..]);
            self.digest = digest;
        });
    }

    /// Seals the open segment once it is full; returns the sealed piece.
    fn seal_if_full(&mut self) -> Option<Bytes> {
        if self.open.len() < SEGMENT {
            return None;
        }
        // Copied out, so a sealed piece holds no spare capacity and the open buffer keeps its
        // own for the next segment.
        let piece = Bytes::copy_from_slice(&self.open);
        self.sealed.push(piece.clone());
        self.open.clear();
        // A huge message (a long tool result) does not leave its size behind.
        self.open.shrink_to(2 * SEGMENT);
        Some(piece)
    }

    /// The prefix followed by `rest`, and the whole body's lowercase hex sha256.
    pub(crate) fn finish(&self, rest: &[u8]) -> (WireBytes, String) {
        let mut digest = self.digest.clone();
        digest.update(rest);
        let mut last = Vec::with_capacity(self.open.len() + rest.len());
        last.extend_from_slice(&self.open);
        last.extend_from_slice(rest);
        let mut parts = Vec::with_capacity(self.sealed.len() + 1);
        parts.extend(self.sealed.iter().cloned());
        if !last.is_empty() {
            parts.push(Bytes::from(last));
        }
        (WireBytes { parts, len: self.len + rest.len() }, hex(&digest.finalize()))
    }
}

/// Whether a body memoized for `header` and `messages` is a prefix of `request`'s: the same
/// shared messages (the loop's steps) or equal ones (a request rebuilt by a fresh fold: a
/// memcmp, far cheaper than serializing and hashing them again).
pub(crate) fn extends(
    header: Option<&EpochHeader>,
    messages: &[Arc<Message>],
    request: &GenerateRequest,
) -> bool {
    header == Some(&request.header)
        && request.messages.len() >= messages.len()
        && messages.iter().zip(&request.messages).all(|(a, b)| Arc::ptr_eq(a, b) || a == b)
}

/// Replaces memoized messages by `request`'s equal ones, so the next compare with a request
/// sharing them is by pointer.
pub(crate) fn adopt_messages(memoized: &mut [Arc<Message>], request: &GenerateRequest) {
    let known = memoized.len();
    memoized.clone_from_slice(&request.messages[..known]);
}

/// Lowercase hex sha256 of a wire body, as `request/sent` records it.
pub fn sha256_hex(body: &[u8]) -> String {
    hex(&Sha256::digest(body))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// How many batches this thread hashed apart.
        pub(super) static HASHED_APART: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    /// The first differing byte is found across pieces, and a prefix differs at its end.
    #[test]
    fn the_first_difference_is_found_across_pieces() {
        let body = WireBytes {
            parts: vec![Bytes::from_static(b"abc"), Bytes::from_static(b"def")],
            len: 6,
        };
        assert_eq!(body.first_difference(b"abcdef"), None);
        assert_eq!(body.first_difference(b"abXdef"), Some(2));
        assert_eq!(body.first_difference(b"abcdeX"), Some(5));
        assert_eq!(body.first_difference(b"abcd"), Some(4));
        assert_eq!(body.first_difference(b"abc"), Some(3));
        assert_eq!(body.first_difference(b"abcdefg"), Some(6));
        assert_eq!(body.first_difference(b""), Some(0));
        assert_eq!(WireBytes::default().first_difference(b""), None);
        assert_eq!(WireBytes::default().first_difference(b"a"), Some(0));
    }

    /// Items of uneven sizes, most smaller than a segment (the open one is rarely empty when
    /// the batch goes over to hashing apart), some larger, with bytes that vary.
    fn item(index: usize) -> Vec<u8> {
        let len = if index % 17 == 5 { 3 * SEGMENT + index } else { 1 + (index * 7919) % 40_000 };
        (0..len).map(|at| (at * 31 + index) as u8).collect()
    }

    /// A batch far past [`HASH_APART_FROM`], hashed on the second thread, gives the bytes and the
    /// digest of one hashed as it goes — from an empty prefix and from one whose open segment
    /// was already hashed (the first piece sealed apart must skip those bytes, not hash them
    /// twice).
    #[test]
    fn a_batch_hashed_apart_has_the_same_bytes_and_digest() {
        for (already, count) in [(0, 150), (1, 150), (2, 300), (0, 3), (1, 2)] {
            let mut sequential = Prefix::default();
            let mut batched = Prefix::default();
            for index in 0..already {
                // Less than a segment: left open, hashed already.
                let bytes = vec![b'h'; 1000 + index];
                sequential.extend(|out| out.extend_from_slice(&bytes));
                batched.extend(|out| out.extend_from_slice(&bytes));
            }
            assert_eq!(!batched.open.is_empty(), already > 0);
            for index in 0..count {
                sequential.extend(|out| out.extend_from_slice(&item(index)));
            }
            let put = |out: &mut Vec<u8>, index: usize| out.extend_from_slice(&item(index));
            let apart_before = HASHED_APART.with(std::cell::Cell::get);
            if already > 0 {
                // Straight to the second thread with hashed bytes in the open segment.
                batched.extend_hashing_apart(0..count, put);
            } else {
                batched.extend_each(0..count, put);
            }
            assert!(count < 10 || batched.len() > 2 * HASH_APART_FROM, "not a long batch");
            // A long batch went over to the second thread by itself; a short one never did.
            let hashed_apart = HASHED_APART.with(std::cell::Cell::get) > apart_before;
            assert_eq!(hashed_apart, already > 0 || count >= 10, "{already} + {count}");
            let (expected, expected_sha) = sequential.finish(b"]}");
            let (body, sha) = batched.finish(b"]}");
            assert!(body.to_vec() == expected.to_vec(), "{already} + {count}: bytes differ");
            assert_eq!(body.len(), expected.len());
            assert_eq!(sha, expected_sha, "{already} + {count}");
            assert_eq!(sha, hex(&Sha256::digest(body.to_vec())));
        }
    }
}
