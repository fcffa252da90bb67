//! Approvals: a per-tool policy (`auto`, `ask`, `deny`) and the seam through which a person
//! answers an `ask`.
//!
//! `ask` appends `approval/request`, waits for an [`Approver`] (the CLI asks on the terminal; the
//! daemon routes the question to its clients), appends `approval/decision`, and runs or refuses
//! the call accordingly. An `allowAlways` decision is remembered for the session by folding the
//! log, so it survives a restart.
//!
//! Which of the three a call gets is [`decide`], a pure function of [`CallFacts`] (the policies
//! in force, the tool's kind, the sandbox, a protected path) and the `allowAlways` fold's answer;
//! the loop gathers the facts, asks, logs and runs.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;

use dsh_session::{ApprovalRequest, ApprovalVerdict, Event, EventData};
use tokio_util::sync::CancellationToken;

use crate::tools::Access;

#[cfg(test)]
mod tests;

/// What happens when the model calls a tool: the session crate's [`dsh_session::Approval`], whose
/// `stricter` is the one order of strictness (the configuration's too).
pub use dsh_session::Approval as Policy;

/// The approval policy: by access class, overridden per tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApprovalPolicy {
    /// Reading tools (`read_file`, `list_dir`, `glob`, `grep`); default `auto`.
    pub read: Policy,
    /// Writing tools (`write_file`, `edit_file`); default `ask`.
    pub write: Policy,
    /// `run_command`; default `ask`.
    pub command: Policy,
    /// `web_fetch`; default `ask`.
    pub web: Policy,
    /// MCP tools, beating each server's own `approval`; `None`: the server's.
    pub mcp: Option<Policy>,
    /// Per-tool overrides.
    pub per_tool: BTreeMap<String, Policy>,
}

impl Default for ApprovalPolicy {
    fn default() -> Self {
        ApprovalPolicy {
            read: Policy::Auto,
            write: Policy::Ask,
            command: Policy::Ask,
            web: Policy::Ask,
            mcp: None,
            per_tool: BTreeMap::new(),
        }
    }
}

impl ApprovalPolicy {
    /// Every tool runs without asking (the CLI's `--yes`).
    pub fn allow_all() -> Self {
        ApprovalPolicy {
            read: Policy::Auto,
            write: Policy::Auto,
            command: Policy::Auto,
            web: Policy::Auto,
            mcp: Some(Policy::Auto),
            per_tool: BTreeMap::new(),
        }
    }

    /// The policy for an MCP tool whose server says `server_policy`.
    pub fn for_external(&self, name: &str, server_policy: Policy) -> Policy {
        match self.per_tool.get(name) {
            Some(policy) => *policy,
            None => self.mcp.unwrap_or(server_policy),
        }
    }

    /// The policy for one tool.
    pub fn for_tool(&self, name: &str, access: Access) -> Policy {
        if let Some(policy) = self.per_tool.get(name) {
            return *policy;
        }
        match access {
            Access::Read => self.read,
            Access::Write => self.write,
            Access::Command => self.command,
            Access::Web => self.web,
            // The plan touches nothing outside the session: it never asks by class.
            Access::Plan => Policy::Auto,
        }
    }
}

/// One tool call as the approval rules see it: everything [`decide`] depends on but the
/// `allowAlways` fold, gathered by the loop.
#[derive(Clone, Debug)]
pub(crate) struct CallFacts<'a> {
    /// The tool's request name (per-tool entries and `allowAlways` are by name).
    pub tool: &'a str,
    /// A built-in tool's access class; `None` for an MCP tool, or a tool nobody offers.
    pub access: Option<Access>,
    /// An MCP tool's own policy (its server's, the stricter of now and as the turn first saw
    /// it); `None` for any other tool.
    pub server_policy: Option<Policy>,
    /// The policies in force — now, as the turn began, the user's own — of which the stricter
    /// holds: a loosened configuration waits for the next turn, a workspace's file never loosens
    /// the user's.
    pub policies: &'a [&'a ApprovalPolicy],
    /// The command sandbox is weaker than its policy (a kernel without a layer it wants).
    pub sandbox_degraded: bool,
    /// The call writes what configures dsh or runs at the user's next git command (`.dsh/`,
    /// `.git/hooks`, `.git/config`).
    pub protected_write: bool,
}

impl CallFacts<'_> {
    /// The stricter of the policies in force for this tool; `None` for a tool no policy can name
    /// (neither built in nor an MCP tool: it runs, and fails as unknown).
    fn configured(&self) -> Option<Policy> {
        let for_tool = |policy: &&ApprovalPolicy| match (self.access, self.server_policy) {
            (Some(access), _) => Some(policy.for_tool(self.tool, access)),
            (None, Some(server_policy)) => Some(policy.for_external(self.tool, server_policy)),
            (None, None) => None,
        };
        self.policies.iter().filter_map(for_tool).reduce(Policy::stricter)
    }

    /// Whether the call asks whatever the policy (unless it denies): a command while the
    /// sandbox is degraded, a write to a protected path.
    fn must_ask(&self) -> bool {
        (self.access == Some(Access::Command) && self.sandbox_degraded) || self.protected_write
    }

    /// Whether an earlier `allowAlways` could change [`decide`]'s answer, so the log is worth
    /// folding for it: the policy would not run the call outright, and nothing makes it ask.
    pub(crate) fn consults_allow_always(&self) -> bool {
        !self.must_ask() && self.configured().is_some_and(|policy| policy != Policy::Auto)
    }
}

/// What happens to one call: `Auto` runs it, `Ask` asks a person, `Deny` refuses it. Neither
/// `auto` nor `allowed_always` (a person allowed the tool for the session) skips the question
/// a degraded sandbox or a protected path asks; `deny` stays `deny`.
pub(crate) fn decide(call: &CallFacts<'_>, allowed_always: bool) -> Policy {
    let Some(configured) = call.configured() else { return Policy::Auto };
    match (call.must_ask(), configured) {
        (true, Policy::Deny) => Policy::Deny,
        (true, _) => Policy::Ask,
        (false, _) if allowed_always => Policy::Auto,
        (false, configured) => configured,
    }
}

/// A boxed future, as returned by [`Approver::ask`].
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Whoever answers approval requests.
pub trait Approver: Send + Sync {
    /// Starts asking about one request and returns the wait for its verdict. The loop calls
    /// this *before* it appends `approval/request`, so whatever must be in place for an answer
    /// to be taken (a waiter registered under the approval id) is in place by the time a client
    /// can see the request; only then does it append and await the returned future. The future
    /// must return promptly when `cancel` fires (the loop then refuses the call); dropping it
    /// withdraws the question.
    fn ask(
        &self,
        request: &ApprovalRequest,
        cancel: &CancellationToken,
    ) -> BoxFuture<'static, ApprovalVerdict>;
}

/// An approver that denies everything: for contexts with nobody to ask.
#[derive(Clone, Copy, Debug, Default)]
pub struct DenyAll;

impl Approver for DenyAll {
    fn ask(
        &self,
        _request: &ApprovalRequest,
        _cancel: &CancellationToken,
    ) -> BoxFuture<'static, ApprovalVerdict> {
        Box::pin(async { ApprovalVerdict::Deny })
    }
}

/// The tools a person allowed for the whole session (`allowAlways`), folded from the log
/// incrementally: each [`AllowAlways::fold`] reads only the events it has not seen, so asking
/// costs O(new events), not O(log).
#[derive(Clone, Debug, Default)]
pub struct AllowAlways {
    /// Tool of each `approval/request` seen, by approval id.
    requests: BTreeMap<String, String>,
    /// Tools allowed for the session.
    tools: BTreeSet<String>,
    /// How many events of the log have been folded.
    folded: usize,
}

impl AllowAlways {
    /// Folds the events of `log` not folded yet (`log` is the whole log, growing).
    pub fn fold(&mut self, log: &[Event]) {
        for event in log.get(self.folded..).unwrap_or_default() {
            match &event.data {
                EventData::ApprovalRequest(request) => {
                    self.requests.insert(request.approval_id.clone(), request.tool.clone());
                }
                EventData::ApprovalDecision(decision)
                    if decision.decision == ApprovalVerdict::AllowAlways =>
                {
                    if let Some(tool) = self.requests.get(&decision.approval_id) {
                        self.tools.insert(tool.clone());
                    }
                }
                _ => {}
            }
        }
        self.folded = log.len();
    }

    /// Whether `tool` was allowed for the whole session.
    pub fn allows(&self, tool: &str) -> bool {
        self.tools.contains(tool)
    }
}
