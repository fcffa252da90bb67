//! `log_load`: a session log file of arbitrary bytes, read by the store and folded by the
//! session crate.
//!
//! `read_log` never panics; a log it reads has contiguous seqs from 0, opens with
//! `session/meta`, reports exactly the bytes after the last newline as its torn tail, and
//! decodes to what `decode_log` makes of its whole lines; its listing summary and every fold
//! and law of [`super::folds`] hold.

use std::path::Path;

use dsh_session::{EventData, decode_log};
use dsh_store::{read_log, summarize};

/// Writes `bytes` to `path` as a log file and checks what reading it gives.
pub fn check(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap();
    let Ok(read) = read_log(path) else { return };
    let whole = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |last| last + 1);
    assert_eq!(read.len, whole as u64);
    match &read.torn {
        Some(torn) => {
            assert_eq!((torn.offset, torn.len), (whole as u64, (bytes.len() - whole) as u64));
        }
        None => assert_eq!(whole, bytes.len()),
    }
    assert!(matches!(read.events.first().map(|e| &e.data), Some(EventData::SessionMeta(_))));
    let text = std::str::from_utf8(&bytes[..whole]).unwrap();
    assert_eq!(decode_log(text).unwrap(), read.events, "the store and decode_log disagree");

    super::folds::check(&read.events);
    let summary = summarize(path, read.events, read.torn);
    assert!(!format!("{summary:?}").is_empty());
}
