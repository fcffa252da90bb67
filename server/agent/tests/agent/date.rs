//! The date context note: logged at the first turn of a day, not again that day, again on the
//! next — read from the log incrementally, so a new loop instance knows what an earlier one
//! logged.

use dsh_agent::Agent;
use dsh_session::EventData;
use tokio_util::sync::CancellationToken;

use crate::support::Fixture;

/// Two instants three days apart: different local dates in every time zone.
fn day_one() -> u64 {
    1_700_000_000_000
}

fn day_four() -> u64 {
    day_one() + 3 * 86_400_000
}

/// The `date` notes of the session's log, in order.
async fn date_notes(fixture: &Fixture) -> Vec<String> {
    let events = fixture.session.query(|s| s.events().to_vec()).await.unwrap();
    events
        .into_iter()
        .filter_map(|event| match event.data {
            EventData::ContextMessage(context) if context.source.as_deref() == Some("date") => {
                Some(context.text)
            }
            _ => None,
        })
        .collect()
}

/// One turn of one step (the mock echoes the prompt).
async fn turn(fixture: &Fixture, agent: &mut Agent, n: u32) {
    let prompt = format!("Turn {n}.");
    let outcome = agent.run_turn(&fixture.session, &prompt, &CancellationToken::new()).await;
    let outcome = outcome.unwrap();
    assert_eq!(outcome.steps, 1, "{:?}", outcome.error);
}

#[tokio::test]
async fn the_date_is_noted_once_a_day_by_every_loop_instance() {
    let fixture = Fixture::new().await;
    let mut agent = fixture.agent_with(|config| config.date_context = true);
    agent.set_clock(day_one);
    turn(&fixture, &mut agent, 1).await;
    turn(&fixture, &mut agent, 2).await;
    let notes = date_notes(&fixture).await;
    assert_eq!(notes.len(), 1, "one note on the first day: {notes:?}");
    // A new day: one more note, and none at the next turn of that day.
    agent.set_clock(day_four);
    turn(&fixture, &mut agent, 3).await;
    turn(&fixture, &mut agent, 4).await;
    // The events since the last turn's fold hold no note: the day is still known.
    turn(&fixture, &mut agent, 5).await;
    let notes = date_notes(&fixture).await;
    assert_eq!(notes.len(), 2, "one more note on the new day: {notes:?}");
    assert_ne!(notes[0], notes[1]);
    // A new loop instance on the same session (a restarted daemon) reads the last note.
    let mut again = fixture.agent_with(|config| config.date_context = true);
    again.set_clock(day_four);
    turn(&fixture, &mut again, 6).await;
    assert_eq!(date_notes(&fixture).await.len(), 2, "the new instance noted the day again");
    // And going back to the first day is a change too.
    again.set_clock(day_one);
    turn(&fixture, &mut again, 7).await;
    assert_eq!(date_notes(&fixture).await.len(), 3);
}
