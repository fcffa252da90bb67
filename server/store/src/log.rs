//! Reading a log file: splitting whole lines from a torn tail, decoding, and the integrity checks
//! every reader applies (format version, first event, contiguous seqs).

use std::path::{Path, PathBuf};

use dsh_session::{DecodeError, DecodeErrorKind, Event, EventData, FORMAT_VERSION, decode_event};

use crate::error::StoreError;

/// An incomplete final line: bytes after the last `\n`, left by a crash in the middle of a write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TornTail {
    /// Byte offset of the torn line in the log (= the length of the log's whole lines).
    pub offset: u64,
    /// Its length in bytes.
    pub len: u64,
    /// Where recovery moved its bytes (`<id>.jsonl.torn-<offset>`); `None` when the log was only
    /// read, not recovered.
    pub sidecar: Option<PathBuf>,
}

/// A log as read from disk, without taking its lock.
#[derive(Clone, Debug)]
pub struct LogRead {
    /// Every whole event, in seq order.
    pub events: Vec<Event>,
    /// The torn final line, if there is one; it is ignored by the events.
    pub torn: Option<TornTail>,
    /// The size of the whole-line part of the file in bytes.
    pub len: u64,
}

/// Reads and decodes a session log without locking or modifying it.
///
/// A torn final line is ignored and reported in [`LogRead::torn`]; a complete line that does not
/// decode is an error naming the line. Works while another process is appending: it sees a
/// prefix of the log (perhaps with a torn tail, the line being written).
pub fn read_log(path: &Path) -> Result<LogRead, StoreError> {
    let bytes = std::fs::read(path).map_err(|source| StoreError::Io {
        action: "reading session log",
        path: path.to_owned(),
        cause: source,
    })?;
    parse_log(path, &bytes)
}

/// Splits `bytes` into whole lines and a torn tail, decodes the lines and checks them.
pub(crate) fn parse_log(path: &Path, bytes: &[u8]) -> Result<LogRead, StoreError> {
    let whole = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |last| last + 1);
    let torn = (whole < bytes.len()).then(|| TornTail {
        offset: whole as u64,
        len: (bytes.len() - whole) as u64,
        sidecar: None,
    });
    if whole == 0 {
        // Logs are created whole (meta line first, atomically): no whole line is no session.
        return Err(StoreError::Empty { path: path.to_owned(), len: bytes.len() as u64 });
    }
    let mut events = Vec::new();
    // Every piece ends with its `\n`; an empty slice yields no piece.
    for (index, piece) in bytes[..whole].split_inclusive(|b| *b == b'\n').enumerate() {
        let line = piece.strip_suffix(b"\n").unwrap_or(piece);
        let line_no = index + 1;
        let event = decode_line(path, line, line_no)?;
        check_event(path, &event, line_no)?;
        events.push(event);
    }
    Ok(LogRead { events, torn, len: whole as u64 })
}

fn decode_line(path: &Path, line: &[u8], line_no: usize) -> Result<Event, StoreError> {
    let decode_error = |kind| StoreError::Decode {
        path: path.to_owned(),
        cause: DecodeError { line: line_no, kind },
    };
    let text = std::str::from_utf8(line).map_err(|error| {
        decode_error(DecodeErrorKind::Envelope(format!("the line is not UTF-8: {error}")))
    })?;
    decode_event(text, line_no).map_err(|error| match error.kind {
        DecodeErrorKind::UnknownFormatVersion { found } => StoreError::UnsupportedFormatVersion {
            path: path.to_owned(),
            found,
            supported: FORMAT_VERSION,
        },
        kind => decode_error(kind),
    })
}

fn check_event(path: &Path, event: &Event, line_no: usize) -> Result<(), StoreError> {
    let expected = (line_no - 1) as u64;
    if event.seq != expected {
        return Err(StoreError::SeqMismatch {
            path: path.to_owned(),
            line: line_no,
            expected,
            found: event.seq,
        });
    }
    if line_no == 1 && !matches!(event.data, EventData::SessionMeta(_)) {
        return Err(StoreError::NoMeta { path: path.to_owned() });
    }
    Ok(())
}
