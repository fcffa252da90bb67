//! The session owner: one task per live session that alone appends to its log.
//!
//! Everything that touches a live session goes through a [`SessionHandle`]: the loop appending
//! chunks, a client injecting a steering message, a reader rebuilding a step. The owner task
//! processes these commands one at a time, so two operations never interleave inside the log,
//! and the step boundary — the message snapshot followed by the `step/start` append — is a single
//! command ([`SessionHandle::begin_step`]): nothing can slip between the two.
//!
//! Appended events fan out to subscribers through a bounded broadcast channel; a subscription
//! starts with the stored events from a given seq and continues with live ones, taken in one
//! command so there is no gap and no duplicate at the seam. A subscriber that falls behind by
//! more than the channel's capacity gets `Lagged` and catches up from the log.

use std::sync::Arc;

use dsh_session::{EpochHeader, Event, EventData, Message, Session, StepStart, SurfaceMark};
use dsh_store::{LiveLog, StoreError};
use tokio::sync::{broadcast, mpsc, oneshot};

use crate::error::AgentError;

/// Commands queued to one owner before senders wait (backpressure, not unbounded memory).
const COMMAND_QUEUE: usize = 256;
/// Events buffered per subscriber before it lags and must catch up from the log.
const SUBSCRIBER_BUFFER: usize = 4096;

/// What the loop needs at a step boundary, taken atomically with the `step/start` append.
#[derive(Clone, Debug)]
pub struct StepSnapshot {
    /// Seq of the `step/start` just appended: the request's messages come from before it.
    pub boundary_seq: u64,
    /// The surface at the boundary — or, when `extends`, only what joined it since the mark
    /// the caller passed (the caller holds the rest).
    pub messages: Vec<Arc<Message>>,
    /// Whether `messages` extends the caller's surface instead of being all of it.
    pub extends: bool,
    /// Where the surface stands at the boundary: the mark to pass next time.
    pub mark: SurfaceMark,
    /// The header folded from the log at the boundary.
    pub header: Option<EpochHeader>,
}

type Query = Box<dyn FnOnce(&Session) + Send>;
type Condition = Box<dyn FnOnce(&Session) -> bool + Send>;

enum Command {
    Append {
        data: EventData,
        reply: oneshot::Sender<Result<Event, StoreError>>,
    },
    AppendAll {
        data: Vec<EventData>,
        reply: oneshot::Sender<Result<Vec<Event>, StoreError>>,
    },
    AppendUnless {
        data: EventData,
        unless: Condition,
        reply: oneshot::Sender<Result<Option<Event>, StoreError>>,
    },
    BeginStep {
        start: StepStart,
        known: Option<SurfaceMark>,
        reply: oneshot::Sender<Result<StepSnapshot, StoreError>>,
    },
    Query(Query),
    Close {
        reply: oneshot::Sender<()>,
    },
    Subscribe {
        from_seq: u64,
        reply: oneshot::Sender<(Vec<Event>, broadcast::Receiver<Event>)>,
    },
}

/// A cloneable handle to a live session's owner task.
#[derive(Clone, Debug)]
pub struct SessionHandle {
    session_id: Arc<str>,
    commands: mpsc::Sender<Command>,
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Command::Append { .. } => "Append",
            Command::AppendAll { .. } => "AppendAll",
            Command::AppendUnless { .. } => "AppendUnless",
            Command::BeginStep { .. } => "BeginStep",
            Command::Query(_) => "Query",
            Command::Close { .. } => "Close",
            Command::Subscribe { .. } => "Subscribe",
        })
    }
}

/// Starts the owner task of `log` on the current tokio runtime and returns its handle. The task
/// ends, closing the log (sync, unlock), when the last handle is dropped.
pub fn spawn_owner(log: LiveLog) -> SessionHandle {
    let session_id: Arc<str> = Arc::from(log.session_id());
    let (commands, receiver) = mpsc::channel(COMMAND_QUEUE);
    tokio::spawn(run_owner(log, receiver));
    SessionHandle { session_id, commands }
}

async fn run_owner(mut log: LiveLog, mut commands: mpsc::Receiver<Command>) {
    let (events, _) = broadcast::channel(SUBSCRIBER_BUFFER);
    // Appends are small synchronous writes (with an fdatasync at boundaries); they run on this
    // task so that the order of commands is the order of the log.
    let mut closing = None;
    while let Some(command) = commands.recv().await {
        match command {
            Command::Append { data, reply } => {
                let result = log.append(data).cloned();
                if let Ok(event) = &result {
                    // No subscriber is not an error.
                    let _ = events.send(event.clone());
                }
                let _ = reply.send(result);
            }
            Command::AppendAll { data, reply } => {
                // One command: no other event (a client's steering) lands between these.
                let mut appended = Vec::with_capacity(data.len());
                let mut result = Ok(());
                for data in data {
                    match log.append(data).cloned() {
                        Ok(event) => {
                            let _ = events.send(event.clone());
                            appended.push(event);
                        }
                        Err(error) => {
                            result = Err(error);
                            break;
                        }
                    }
                }
                let _ = reply.send(result.map(|()| appended));
            }
            Command::AppendUnless { data, unless, reply } => {
                // The check and the append are one command: nothing can land between them.
                let result = if unless(log.session()) {
                    Ok(None)
                } else {
                    log.append(data).cloned().map(|event| {
                        let _ = events.send(event.clone());
                        Some(event)
                    })
                };
                let _ = reply.send(result);
            }
            Command::BeginStep { start, known, reply } => {
                // The snapshot and the step/start append are one command: the boundary. Only
                // the messages the caller lacks are copied (a long conversation costs the
                // step nothing more).
                let session = log.session();
                let tail = known.and_then(|mark| session.messages_after(mark));
                let extends = tail.is_some();
                let messages = tail.unwrap_or_else(|| session.messages());
                let mark = session.surface_mark();
                let header = session.header().cloned();
                let result = log.append(EventData::StepStart(start)).cloned().map(|event| {
                    let boundary_seq = event.seq;
                    let _ = events.send(event);
                    StepSnapshot { boundary_seq, messages, extends, mark, header }
                });
                let _ = reply.send(result);
            }
            Command::Query(query) => query(log.session()),
            Command::Close { reply } => {
                closing = Some(reply);
                break;
            }
            Command::Subscribe { from_seq, reply } => {
                let start = usize::try_from(from_seq).unwrap_or(usize::MAX);
                let stored = log.session().events().get(start..).unwrap_or_default().to_vec();
                let _ = reply.send((stored, events.subscribe()));
            }
        }
    }
    if let Err(error) = log.close() {
        tracing::error!(%error, "closing a session log failed");
    }
    // Answered once the log is closed (synced, unlocked): the caller may open it again.
    if let Some(reply) = closing {
        let _ = reply.send(());
    }
}

impl SessionHandle {
    /// The session's id.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    async fn send(&self, command: Command) -> Result<(), AgentError> {
        self.commands.send(command).await.map_err(|_| AgentError::SessionClosed)
    }

    /// Appends one event; returns it with its seq and time.
    pub async fn append(&self, data: EventData) -> Result<Event, AgentError> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::Append { data, reply }).await?;
        Ok(answer.await.map_err(|_| AgentError::SessionClosed)??)
    }

    /// Appends every event of `data` in order, in one owner command: nothing is appended
    /// between them. Stops at the first that fails.
    pub async fn append_all(&self, data: Vec<EventData>) -> Result<Vec<Event>, AgentError> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::AppendAll { data, reply }).await?;
        Ok(answer.await.map_err(|_| AgentError::SessionClosed)??)
    }

    /// Appends `data` unless `unless` holds for the session, in one owner command (nothing is
    /// appended between the check and the append). Returns the event when it was appended.
    pub async fn append_unless(
        &self,
        data: EventData,
        unless: impl FnOnce(&Session) -> bool + Send + 'static,
    ) -> Result<Option<Event>, AgentError> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::AppendUnless { data, unless: Box::new(unless), reply }).await?;
        Ok(answer.await.map_err(|_| AgentError::SessionClosed)??)
    }

    /// Snapshots the messages and the folded header, then appends `step/start`, atomically.
    /// With `known` (the mark of the surface the caller holds), only what joined since is
    /// returned when that surface is still a prefix (`StepSnapshot::extends`).
    pub async fn begin_step(
        &self,
        step: u64,
        turn: u64,
        known: Option<SurfaceMark>,
    ) -> Result<StepSnapshot, AgentError> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::BeginStep { start: StepStart { step, turn }, known, reply }).await?;
        Ok(answer.await.map_err(|_| AgentError::SessionClosed)??)
    }

    /// Runs `query` against the live session inside the owner task and returns its result.
    pub async fn query<R: Send + 'static>(
        &self,
        query: impl FnOnce(&Session) -> R + Send + 'static,
    ) -> Result<R, AgentError> {
        let (reply, answer) = oneshot::channel();
        let boxed: Query = Box::new(move |session| {
            let _ = reply.send(query(session));
        });
        self.send(Command::Query(boxed)).await?;
        answer.await.map_err(|_| AgentError::SessionClosed)
    }

    /// Closes the session: every command sent before this one is carried out, then the log is
    /// synced and unlocked; resolves when it is. Later commands, from any handle, fail with
    /// [`AgentError::SessionClosed`].
    pub async fn close(&self) {
        let (reply, answer) = oneshot::channel();
        if self.send(Command::Close { reply }).await.is_ok() {
            let _ = answer.await;
        }
    }

    /// The stored events from `from_seq` on, and a receiver of every later event, with no gap
    /// and no duplicate between the two.
    pub async fn subscribe(
        &self,
        from_seq: u64,
    ) -> Result<(Vec<Event>, broadcast::Receiver<Event>), AgentError> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::Subscribe { from_seq, reply }).await?;
        answer.await.map_err(|_| AgentError::SessionClosed)
    }
}
