//! [`Hash`]: the SHA-256 of an object's uncompressed bytes, the name of everything in the store.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest, Sha256};

/// The SHA-256 of an object's uncompressed bytes. Displayed and parsed as 64 lowercase hex
/// digits; a checkpoint is named by the hash of its root tree.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Hash([u8; 32]);

impl Hash {
    /// The hash of `bytes`.
    pub fn of(bytes: &[u8]) -> Hash {
        Hash(Sha256::digest(bytes).into())
    }

    /// The hash from its 32 raw bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> Hash {
        Hash(bytes)
    }

    /// The 32 raw bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for Hash {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(formatter, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Hash {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "Hash({self})")
    }
}

/// A string that is not 64 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a checkpoint hash (64 lowercase hex digits): {0:?}")]
pub struct ParseHashError(pub String);

impl FromStr for Hash {
    type Err = ParseHashError;

    fn from_str(text: &str) -> Result<Hash, ParseHashError> {
        let invalid = || ParseHashError(text.to_owned());
        if text.len() != 64 {
            return Err(invalid());
        }
        let mut bytes = [0u8; 32];
        for (byte, pair) in bytes.iter_mut().zip(text.as_bytes().chunks(2)) {
            let digit = |c: u8| match c {
                b'0'..=b'9' => Some(c - b'0'),
                b'a'..=b'f' => Some(c - b'a' + 10),
                _ => None,
            };
            *byte =
                (digit(pair[0]).ok_or_else(invalid)? << 4) | digit(pair[1]).ok_or_else(invalid)?;
        }
        Ok(Hash(bytes))
    }
}
