//! The backlog: what reaches the editor is counted; an editor that reads nothing is given up on.
#![allow(clippy::unwrap_used)]

use super::*;

#[tokio::test]
async fn the_backlog_counts_what_reaches_the_editor() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let backlog = Arc::new(Backlog::default());
    let (near, mut far) = tokio::io::duplex(64);
    let mut output = Counted { inner: near, backlog: Arc::clone(&backlog) };
    backlog.queued(10);
    assert_eq!(backlog.unread(), 10);
    output.write_all(b"0123456789").await.unwrap();
    let mut read = [0; 10];
    far.read_exact(&mut read).await.unwrap();
    assert_eq!(backlog.unread(), 0);
}

#[tokio::test]
async fn an_editor_that_reads_nothing_is_given_up_on_and_one_that_reads_is_waited_for() {
    let stall = Duration::from_millis(200);
    let backlog = Arc::new(Backlog::default());
    backlog.queued(1_000 + 500);
    let started = tokio::time::Instant::now();
    assert!(drain(&backlog, 1_000, stall).await.is_err());
    assert!(started.elapsed() >= stall);

    // A slow reader: 100 bytes every 50 ms, well within the stall limit each time.
    let reader = Arc::clone(&backlog);
    tokio::spawn(async move {
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            reader.written.fetch_add(100, Ordering::Relaxed);
        }
    });
    assert!(drain(&backlog, 1_000, stall).await.is_ok());
    assert!(backlog.unread() <= 1_000);
}
