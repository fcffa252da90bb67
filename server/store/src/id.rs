//! Session ids: generated sortable and collision-resistant, validated when given by users.

use std::fmt;

use crate::error::StoreError;

/// The longest accepted session id.
const MAX_ID_LEN: usize = 128;

/// Lowercase RFC 4648 base32 alphabet, for the random suffix.
const BASE32: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

/// A session id that is safe to use as a file name: ASCII letters, digits, `-`, `_`, `.`; not
/// starting with `.` (so never `.`/`..` and never a hidden or temporary file); no separators.
///
/// Generated ids look like `20261130-170155-k3x9qa` (UTC time, then 6 random base32
/// characters), so they sort by creation time.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionId(String);

impl SessionId {
    /// Validates an id given by a user.
    pub fn parse(id: &str) -> Result<Self, StoreError> {
        let invalid = |reason| Err(StoreError::InvalidSessionId { id: id.to_owned(), reason });
        if id.is_empty() {
            return invalid("it is empty");
        }
        if id.len() > MAX_ID_LEN {
            return invalid("it is too long");
        }
        if id.contains(['/', '\\']) {
            return invalid("it contains a path separator");
        }
        if id.starts_with('.') {
            return invalid("it starts with `.`");
        }
        if !id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')) {
            return invalid("it contains a character other than letters, digits, `-`, `_`, `.`");
        }
        Ok(SessionId(id.to_owned()))
    }

    /// A fresh id for a session created at `time_ms` (unix milliseconds), with 30 random bits.
    pub fn generate(time_ms: u64, rng: &mut fastrand::Rng) -> Self {
        let (year, month, day, hour, minute, second) = utc_from_unix_ms(time_ms);
        let suffix: String =
            (0..6).map(|_| char::from(BASE32[rng.usize(..BASE32.len())])).collect();
        SessionId(format!("{year:04}{month:02}{day:02}-{hour:02}{minute:02}{second:02}-{suffix}"))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for SessionId {
    type Err = StoreError;

    fn from_str(id: &str) -> Result<Self, StoreError> {
        SessionId::parse(id)
    }
}

/// `(year, month, day, hour, minute, second)` in UTC, by the days-from-civil inverse
/// (H. Hinnant's algorithm), so no date library is needed.
pub fn utc_from_unix_ms(time_ms: u64) -> (i64, u32, u32, u32, u32, u32) {
    let seconds = (time_ms / 1000) as i64;
    let days = seconds.div_euclid(86_400);
    let of_day = seconds.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    let hour = (of_day / 3600) as u32;
    let minute = (of_day % 3600 / 60) as u32;
    let second = (of_day % 60) as u32;
    (year, month, day, hour, minute, second)
}
