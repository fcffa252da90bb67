//! The folds' checks, shared by `log_load` (logs from bytes) and `log_events` (logs built
//! from structured input).
//!
//! Every fold over a log is total: none may panic on any well-typed event sequence. Where a law
//! holds, it is checked: replay equals live (a step rebuilt from the log has the messages the
//! live fold had when the step started), the memoized wire body equals the plain one and is
//! JSON, and the closing events close a well-formed open log — directly and in every fork.

use std::collections::HashSet;

use dsh_provider::{WireCache, wire_body};
use dsh_session::{
    Closing, Event, EventData, GenerateRequest, Session, Severity, StopReason, check_log,
    closing_events, reconstruct_step, usage_rows, usage_totals,
};
use dsh_store::{SessionId, fork_events};

/// Runs every fold and law over `events`, whatever they are.
pub fn check(events: &[Event]) {
    let diagnostics = check_log(events);
    let session = Session::from_events(events.iter().cloned());
    let _ =
        (session.header(), session.surface_generation(), session.last_step(), session.anomalies());
    let rows = usage_rows(events);
    let _ = usage_totals(&rows);
    let contiguous = events.iter().enumerate().all(|(index, event)| event.seq == index as u64);

    // Replay equals live, step by step; the wire body of each step two ways.
    let mut live = Session::new();
    let mut steps_seen = HashSet::new();
    let mut cache = WireCache::new();
    for event in events {
        if let EventData::StepStart(start) = &event.data
            && contiguous
            && steps_seen.insert(start.step)
            && let Ok(rebuilt) = reconstruct_step(events, start.step)
        {
            assert_eq!(
                rebuilt.boundary_seq, event.seq,
                "step {} rebuilt at another boundary",
                start.step
            );
            let live_messages = live.messages();
            assert!(
                rebuilt
                    .request
                    .messages
                    .iter()
                    .map(|m| &**m)
                    .eq(live_messages.iter().map(|m| &**m)),
                "step {}: the rebuilt messages differ from the live fold's",
                start.step
            );
            let body = wire_body(&rebuilt.request);
            assert!(
                serde_json::from_slice::<serde_json::Value>(&body).is_ok(),
                "the wire body is not JSON"
            );
            // The live request shares its message projections with earlier steps, so the cache
            // takes its incremental path here.
            let live_request = GenerateRequest {
                images: Default::default(),
                header: rebuilt.request.header.clone(),
                messages: live_messages,
            };
            assert_eq!(
                cache.body(&live_request).0.to_vec(),
                body,
                "WireCache differs from wire_body"
            );
        }
        let _ = live.append(event.clone());
    }
    for step in session.steps() {
        let _ = reconstruct_step(events, step.step);
    }

    // A well-formed log, open or not, is closed by its closing events: every prefix (as a
    // fork) and the whole log (as the loop does after a crash).
    if !contiguous || diagnostics.iter().any(|d| d.severity == Severity::Error) {
        return;
    }
    let closing = Closing { reason: StopReason::Cancelled, error: "fuzz", tool_result: "fuzz" };
    let mut closed = events.to_vec();
    for data in closing_events(events, closing) {
        closed.push(Event { seq: closed.len() as u64, time: 0, data });
    }
    let findings = check_log(&closed);
    assert!(findings.is_empty(), "closing a well-formed log leaves findings: {findings:?}");
    let id = SessionId::parse("fuzz-fork").unwrap();
    for cut in 1..=events.len() as u64 {
        let fork = fork_events(events, Some(cut), &id, 0).unwrap();
        let findings = check_log(&fork);
        assert!(findings.is_empty(), "a fork at {cut} is not well-formed: {findings:?}");
    }
}
