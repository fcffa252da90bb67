//! The front's output, bounded: [`Backlog`] counts the bytes handed to the SDK to send and the
//! bytes written to the editor ([`Counted`]); [`send_update`] queues one `session/update` and
//! waits while the editor is too far behind, and gives up on an editor that reads nothing.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::Duration;

use agent_client_protocol::v1::schema::{SessionNotification, SessionUpdate};
use tokio::io::AsyncWrite;

use crate::front::Connection;

/// Unread bytes past which forwarding waits for the editor to read.
pub(crate) const BACKLOG_LIMIT: u64 = 16 * 1024 * 1024;
/// How long an editor may read nothing while past [`BACKLOG_LIMIT`].
pub(crate) const BACKLOG_STALL: Duration = Duration::from_secs(60);

/// Queues one `session/update`, then waits while the editor has more than [`BACKLOG_LIMIT`]
/// bytes left unread (the SDK's outgoing queue is unbounded). An editor that reads nothing for
/// [`BACKLOG_STALL`] is given up on: the front ends rather than grow without bound (the turn
/// goes on in the daemon).
pub(crate) async fn send_update(
    connection: &Connection,
    backlog: &Backlog,
    session_id: &str,
    update: SessionUpdate,
) -> Result<(), Stalled> {
    let notification = SessionNotification::new(session_id.to_owned(), update);
    let bytes = serde_json::to_vec(&notification).map_or(0, |line| line.len() as u64 + 1);
    match connection.send_notification(notification) {
        Ok(()) => backlog.queued(bytes),
        Err(error) => tracing::debug!("sending an update: {error}"),
    }
    drain(backlog, BACKLOG_LIMIT, BACKLOG_STALL).await
}

/// Waits while more than `limit` bytes are unread; [`Stalled`] when the editor read nothing
/// for `stall`.
async fn drain(backlog: &Backlog, limit: u64, stall: Duration) -> Result<(), Stalled> {
    let mut seen = backlog.written();
    let mut since = tokio::time::Instant::now();
    while backlog.unread() > limit {
        tokio::time::sleep(Duration::from_millis(10)).await;
        if backlog.written() != seen {
            seen = backlog.written();
            since = tokio::time::Instant::now();
        } else if since.elapsed() > stall {
            return Err(Stalled);
        }
    }
    Ok(())
}

/// The editor stopped reading.
#[derive(Debug)]
pub(crate) struct Stalled;

/// Bytes handed to the SDK to send and bytes written to the editor's stdin, so the front knows
/// how much the editor has not read yet.
#[derive(Debug, Default)]
pub(crate) struct Backlog {
    queued: AtomicU64,
    written: AtomicU64,
}

impl Backlog {
    fn queued(&self, bytes: u64) {
        self.queued.fetch_add(bytes, Ordering::Relaxed);
    }

    fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    fn unread(&self) -> u64 {
        self.queued.load(Ordering::Relaxed).saturating_sub(self.written())
    }
}

/// The front's output, counting what reaches the editor.
pub(crate) struct Counted<W> {
    inner: W,
    backlog: Arc<Backlog>,
}

impl<W> Counted<W> {
    pub(crate) fn new(inner: W, backlog: Arc<Backlog>) -> Counted<W> {
        Counted { inner, backlog }
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Counted<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
        buffer: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(context, buffer);
        if let Poll::Ready(Ok(written)) = &polled {
            self.backlog.written.fetch_add(*written as u64, Ordering::Relaxed);
        }
        polled
    }

    fn poll_flush(
        mut self: Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(context)
    }

    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(context)
    }
}

#[cfg(test)]
mod tests;
