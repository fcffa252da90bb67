//! A running sub-agent's progress (docs/subagents.md): when a live `task/spawn` of a session
//! open here is forwarded, the front subscribes to the child's log too, and each step the
//! child ends becomes a `tool_call_update` of the parent's `task` call — one short line,
//! `step N: TOOLS · T tokens · $C` (the child's cost so far), with the child's dsh session id
//! and the numbers under `_meta["dsh/taskProgress"]`. The call's result (the child's answer
//! and its cost line) ends it, as any call's; the subscription is dropped at the child's turn
//! end. Only the running turn's children are followed: a replay shows each call's result.

use agent_client_protocol::v1::schema::{SessionUpdate, ToolCallUpdate, ToolCallUpdateFields};
use dsh_protocol::{Event, EventData, SessionSubscribeParams, TaskSpawn, method};
use serde_json::Value;

use super::{Front, lock};
use crate::ext;

/// A child followed for its parent's `task` call.
#[derive(Debug)]
pub(super) struct Followed {
    /// The parent session (open here).
    parent: String,
    /// The parent's `task` call.
    call_id: String,
    /// The first seq of the child's own events (a `fork` child's log starts with its
    /// parent's).
    cut: u64,
    /// The next seq not yet folded (a second subscription's duplicates are skipped).
    next_seq: u64,
    /// The tools the child's current step called.
    tools: Vec<String>,
    /// Its own steps ended so far.
    steps: u64,
    /// The daemon's subscription id, once known.
    subscription: Option<Value>,
}

impl Front {
    /// Starts following `spawn`'s child for `parent`'s `task` call: subscribes to its log
    /// from its start (its steps so far come first).
    pub(super) async fn follow_child(&self, parent: &str, spawn: &TaskSpawn) {
        let followed = Followed {
            parent: parent.to_owned(),
            call_id: spawn.call_id.clone(),
            cut: 0,
            next_seq: 0,
            tools: Vec::new(),
            steps: 0,
            subscription: None,
        };
        if lock(&self.children).insert(spawn.session_id.clone(), followed).is_some() {
            return;
        }
        let params =
            SessionSubscribeParams { session_id: spawn.session_id.clone(), from_seq: Some(0) };
        match self.client.call::<method::SessionSubscribe>(params).await {
            Ok(subscription) => {
                if let Some(followed) = lock(&self.children).get_mut(&spawn.session_id) {
                    followed.subscription = Some(subscription);
                }
            }
            Err(error) => {
                tracing::debug!("following sub-agent {}: {error}", spawn.session_id);
                lock(&self.children).remove(&spawn.session_id);
            }
        }
    }

    /// Whether `session_id` is a child followed here.
    pub(super) fn is_followed(&self, session_id: &str) -> bool {
        lock(&self.children).contains_key(session_id)
    }

    /// The progress update `event` of followed child `child` makes, as (parent session,
    /// update); `None` for the events that make none. The child's turn end stops the
    /// following.
    pub(super) async fn child_progress(
        &self,
        child: &str,
        event: &Event,
    ) -> Option<(String, SessionUpdate)> {
        let ended = match self.fold_child(child, event)? {
            Folded::Step(ended) => ended,
            Folded::Stop(subscription) => {
                if let Some(subscription) = subscription {
                    let _ = self.client.call::<method::SessionUnsubscribe>([subscription]).await;
                }
                return None;
            }
        };
        let StepEnded { parent, call_id, steps, tools, usage } = ended;
        // The call answered already (a late event): nothing to add to it.
        let pending = lock(&self.sessions)
            .get(&parent)
            .is_some_and(|open| open.translator.is_pending(&call_id));
        if !pending {
            return None;
        }
        let cost = match self.usage(child).await {
            Ok(usage) => usage.cost,
            Err(_) => None,
        };
        let tokens = usage.prompt_tokens + usage.completion_tokens;
        let line = progress_line(steps, &tools, tokens, cost.as_ref());
        let fields = ToolCallUpdateFields::new().content(vec![line.as_str().into()]);
        let meta = ext::task_progress_meta(child, steps, &usage, cost.as_ref());
        let update = ToolCallUpdate::new(call_id, fields).meta(meta);
        Some((parent, SessionUpdate::ToolCallUpdate(update)))
    }
}

/// What one event of a followed child comes to.
enum Folded {
    /// A step ended.
    Step(StepEnded),
    /// Its turn ended: the subscription to drop.
    Stop(Option<Value>),
}

/// A followed child's step that ended.
struct StepEnded {
    parent: String,
    call_id: String,
    steps: u64,
    tools: Vec<String>,
    usage: dsh_protocol::Usage,
}

impl Front {
    /// Folds `event` of followed child `child` (no await: the lock is held).
    fn fold_child(&self, child: &str, event: &Event) -> Option<Folded> {
        let mut children = lock(&self.children);
        let followed = children.get_mut(child)?;
        if event.seq < followed.next_seq {
            return None;
        }
        followed.next_seq = event.seq + 1;
        if let EventData::SessionMeta(meta) = &event.data {
            followed.cut = meta.forked_from.as_ref().map_or(0, |fork| fork.seq);
        }
        if event.seq < followed.cut {
            return None;
        }
        match &event.data {
            EventData::AssistantMessage(turn) => {
                followed.tools =
                    turn.message.tool_calls.iter().map(|call| call.name.clone()).collect();
                None
            }
            EventData::StepEnd(end) => {
                followed.steps += 1;
                Some(Folded::Step(StepEnded {
                    parent: followed.parent.clone(),
                    call_id: followed.call_id.clone(),
                    steps: followed.steps,
                    tools: std::mem::take(&mut followed.tools),
                    usage: end.usage,
                }))
            }
            EventData::TurnEnd(_) => {
                let subscription = children.remove(child).and_then(|gone| gone.subscription);
                Some(Folded::Stop(subscription))
            }
            _ => None,
        }
    }
}

/// `step 2: read_file, grep · 1834 tokens · $0.0003 so far` (`answered` for a step without
/// tools; no cost without a price).
fn progress_line(
    step: u64,
    tools: &[String],
    tokens: u64,
    cost: Option<&dsh_protocol::Cost>,
) -> String {
    let did = if tools.is_empty() { "answered".to_owned() } else { tools.join(", ") };
    let cost = cost.map_or(String::new(), |cost| match cost.currency.as_str() {
        "USD" => format!(" · ${:.4} so far", cost.amount),
        other => format!(" · {:.4} {other} so far", cost.amount),
    });
    format!("sub-agent step {step}: {did} · {tokens} tokens{cost}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_progress_line_names_the_step_its_tools_tokens_and_cost() {
        let cost = dsh_protocol::Cost { amount: 0.00031, saved: 0.0, currency: "USD".to_owned() };
        let tools = ["list_dir".to_owned(), "read_file".to_owned()];
        assert_eq!(
            progress_line(2, &tools, 1834, Some(&cost)),
            "sub-agent step 2: list_dir, read_file · 1834 tokens · $0.0003 so far"
        );
        assert_eq!(progress_line(1, &[], 90, None), "sub-agent step 1: answered · 90 tokens");
    }
}
