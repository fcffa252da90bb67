//! Request bodies as shared pieces, and the memoized prefix they are cut from.
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
use std::task::{Context, Poll};

use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::wire::hex;

/// Bytes of an open segment sealed into a shared piece: a step copies at most this much of
/// its prefix.
const SEGMENT: usize = 64 * 1024;

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
        if self.open.len() >= SEGMENT {
            // Copied out, so a sealed piece holds no spare capacity and the open buffer keeps
            // its own for the next segment.
            self.sealed.push(Bytes::copy_from_slice(&self.open));
            self.open.clear();
            // A huge message (a long tool result) does not leave its size behind.
            self.open.shrink_to(2 * SEGMENT);
        }
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
