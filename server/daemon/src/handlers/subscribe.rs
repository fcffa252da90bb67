//! `session/subscribe`: stored events then live ones, as the API's typed events (with where
//! steering landed on each `step/start`), and the background priming of "what the model saw".

use super::*;

/// `session/subscribe`: stored events from `fromSeq`, then live ones, with no gap and no
/// duplicate at the seam (both come from one owner command). A subscriber that lags behind the
/// live buffer catches up from the log the same way.
pub async fn session_subscribe(
    params: Params<'static>,
    pending: PendingSubscriptionSink,
    daemon: Arc<Daemon>,
) {
    let params = match parse::<method::SessionSubscribe>(&params) {
        Ok(params) => params,
        Err(error) => return pending.reject(error).await,
    };
    let live = match load(&daemon, &params.session_id).await {
        Ok(live) => live,
        Err(error) => return pending.reject(error).await,
    };
    let mut next = params.from_seq.unwrap_or(0);
    // The log only grows, so a fromSeq within it now stays within it.
    match live.handle.query(|s| s.next_seq()).await {
        Ok(length) if next > length => {
            let message = format!("fromSeq {next} is beyond the end of the log ({length} events)");
            return pending.reject(ApiError::out_of_range(message)).await;
        }
        Ok(_) => {}
        Err(error) => return pending.reject(ApiError::from(error)).await,
    }
    let (mut stored, mut receiver) = match live.handle.subscribe(next).await {
        Ok(subscription) => subscription,
        Err(error) => return pending.reject(ApiError::from(error)).await,
    };
    let Ok(sink) = pending.accept().await else { return };
    prime_view(&daemon, &live);
    let id = sink.subscription_id();
    loop {
        // Where steering landed, for every `step/start` of the batch: one fold over the log in
        // the owner task (a catch-up from seq 0 holds a long session's steps at once).
        let starts: Vec<u64> = stored
            .iter()
            .filter(|event| matches!(event.data, EventData::StepStart(_)))
            .map(|event| event.seq)
            .collect();
        let mut joined = if starts.is_empty() {
            Vec::new()
        } else {
            let fold = move |s: &dsh_session::Session| {
                starts.iter().map(|&seq| (seq, dsh_session::joined_at(s.events(), seq))).collect()
            };
            live.handle.query(fold).await.unwrap_or_default()
        }
        .into_iter();
        for event in stored.drain(..) {
            if event.seq < next {
                continue;
            }
            next = event.seq + 1;
            let mut delivered = SessionEvent::new(live.id.as_str(), event);
            if matches!(delivered.event.data, EventData::StepStart(_)) {
                let seq = delivered.event.seq;
                delivered.joined = joined
                    .by_ref()
                    .find(|(start, _)| *start == seq)
                    .map(|(_, seqs)| seqs)
                    .unwrap_or_default();
            }
            let message = SubscriptionMessage::new(method::SESSION_EVENT, id.clone(), &delivered);
            let Ok(message) = message else { return };
            if sink.send(message).await.is_err() {
                return;
            }
        }
        // Cancel-safety: `recv` is cancel-safe; `closed` is cancel-safe.
        let received = tokio::select! {
            received = receiver.recv() => received,
            () = sink.closed() => return,
        };
        match received {
            Ok(event) => stored.push(event),
            Err(broadcast::error::RecvError::Lagged(_)) => {
                // Fell behind the live buffer: catch up from the log, without a gap.
                match live.handle.subscribe(next).await {
                    Ok((catch_up, fresh)) => {
                        stored = catch_up;
                        receiver = fresh;
                    }
                    Err(_) => return,
                }
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// A session a client follows gets its last step's wire body serialized in the background,
/// so the first "what the model saw" — of that step, usually — compares instead of
/// serializing on the click. Not while a turn runs, nor when the loop's memo or the view's
/// already holds a body.
fn prime_view(daemon: &Arc<Daemon>, live: &Arc<LiveSession>) {
    // Never waits: a memo in use is being filled already.
    let empty = |memo: &std::sync::Mutex<dsh_provider::WireCache>| {
        memo.try_lock().is_ok_and(|memo| memo.is_empty())
    };
    // A running turn fills the loop's memo with a newer step anyway.
    let idle = !live.is_busy() && !daemon.shutdown.is_cancelled();
    if !idle || !empty(&live.wire_memo) || !empty(&live.loop_wire) {
        return;
    }
    // One at a time: subscribers arriving together share the one preparation.
    let priming = Arc::clone(&live.priming);
    if priming.swap(true, std::sync::atomic::Ordering::AcqRel) {
        return;
    }
    let memo = Arc::clone(&live.wire_memo);
    let handle = live.handle.clone();
    daemon.tasks.spawn(async move {
        let _done = Priming(priming);
        let rebuilt = handle
            .query(|session| {
                dsh_session::reconstruct_session_step_shared(session, session.last_step())
            })
            .await;
        let Ok(Ok(rebuilt)) = rebuilt else { return };
        let _ = tokio::task::spawn_blocking(move || {
            let mut memo = memo.lock().unwrap_or_else(PoisonError::into_inner);
            if memo.is_empty() {
                let _ = memo.body(&rebuilt.request);
            }
        })
        .await;
    });
}

/// Clears a session's "priming" flag when its preparation ends, however it ends.
struct Priming(Arc<std::sync::atomic::AtomicBool>);

impl Drop for Priming {
    fn drop(&mut self) {
        self.0.store(false, std::sync::atomic::Ordering::Release);
    }
}

/// A log event as the API delivers it: for a `step/start`, with the steering and context
/// messages that joined its request (`events` reaches back to the previous `step/start`).
pub fn api_event(session_id: &str, event: &Event, events: &[Event]) -> SessionEvent {
    let mut delivered = SessionEvent::new(session_id, event.clone());
    if matches!(event.data, EventData::StepStart(_)) {
        delivered.joined = dsh_session::joined_at(events, event.seq);
    }
    delivered
}
