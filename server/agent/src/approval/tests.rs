//! The tool-call decision as a table: the facts of one call → the policy that applies to it,
//! and whether the `allowAlways` fold is consulted for it.

use std::collections::BTreeMap;

use super::*;

/// One row: a call's facts, whether a person allowed the tool for the session, and what the
/// rules must say.
struct Row {
    case: &'static str,
    tool: &'static str,
    access: Option<Access>,
    server_policy: Option<Policy>,
    policies: Vec<ApprovalPolicy>,
    sandbox_degraded: bool,
    protected_write: bool,
    allowed_always: bool,
    consults: bool,
    expected: Policy,
}

/// A built-in tool's call under the default policy, nothing special about it.
fn builtin(case: &'static str, tool: &'static str, access: Access) -> Row {
    Row {
        case,
        tool,
        access: Some(access),
        server_policy: None,
        policies: vec![ApprovalPolicy::default()],
        sandbox_degraded: false,
        protected_write: false,
        allowed_always: false,
        consults: false,
        expected: Policy::Auto,
    }
}

/// An MCP tool's call whose server says `server_policy`, under the default policy.
fn mcp(case: &'static str, server_policy: Policy) -> Row {
    Row {
        tool: "fx__echo",
        access: None,
        server_policy: Some(server_policy),
        ..builtin(case, "", Access::Read)
    }
}

fn per_tool(tool: &str, policy: Policy) -> ApprovalPolicy {
    ApprovalPolicy {
        per_tool: BTreeMap::from([(tool.to_owned(), policy)]),
        ..ApprovalPolicy::default()
    }
}

fn with_command(policy: Policy) -> ApprovalPolicy {
    ApprovalPolicy { command: policy, ..ApprovalPolicy::default() }
}

fn with_mcp(policy: Policy) -> ApprovalPolicy {
    ApprovalPolicy { mcp: Some(policy), ..ApprovalPolicy::default() }
}

impl Row {
    fn policies(self, policies: Vec<ApprovalPolicy>) -> Row {
        Row { policies, ..self }
    }
    fn degraded(self) -> Row {
        Row { sandbox_degraded: true, ..self }
    }
    fn protected(self) -> Row {
        Row { protected_write: true, ..self }
    }
    fn allowed_always(self) -> Row {
        Row { allowed_always: true, ..self }
    }
    fn consults(self) -> Row {
        Row { consults: true, ..self }
    }
    fn expect(self, expected: Policy) -> Row {
        Row { expected, ..self }
    }
}

#[test]
fn a_calls_decision_follows_the_table() {
    use Access::{Command, Read, Write};
    use Policy::{Ask, Auto, Deny};
    let rows = [
        // By access class, under the default policy.
        builtin("a read runs", "read_file", Read),
        builtin("a write asks", "write_file", Write).consults().expect(Ask),
        builtin("a command asks", "run_command", Command).consults().expect(Ask),
        builtin("a web fetch asks", "web_fetch", Access::Web).consults().expect(Ask),
        builtin("class web = auto runs a web fetch", "web_fetch", Access::Web)
            .policies(vec![ApprovalPolicy { web: Auto, ..ApprovalPolicy::default() }]),
        builtin("the user's web = deny beats a workspace's auto", "web_fetch", Access::Web)
            .policies(vec![
                ApprovalPolicy { web: Auto, ..ApprovalPolicy::default() },
                ApprovalPolicy { web: Deny, ..ApprovalPolicy::default() },
            ])
            .consults()
            .expect(Deny),
        builtin("a degraded sandbox does not make a web fetch ask", "web_fetch", Access::Web)
            .policies(vec![ApprovalPolicy { web: Auto, ..ApprovalPolicy::default() }])
            .degraded(),
        Row {
            access: None,
            ..builtin("a tool nobody offers runs (and fails as unknown)", "nope", Read)
        },
        // Per-tool entries beat the class.
        builtin("a per-tool auto runs a command", "run_command", Command)
            .policies(vec![per_tool("run_command", Auto)]),
        builtin("a per-tool deny refuses a read", "read_file", Read)
            .policies(vec![per_tool("read_file", Deny)])
            .consults()
            .expect(Deny),
        // Several policies in force: the stricter holds.
        builtin("the turn's floor holds back a loosened command", "run_command", Command)
            .policies(vec![with_command(Auto), with_command(Ask)])
            .consults()
            .expect(Ask),
        builtin("the user's own deny beats a workspace's auto", "run_command", Command)
            .policies(vec![with_command(Auto), with_command(Auto), with_command(Deny)])
            .consults()
            .expect(Deny),
        builtin("auto everywhere runs", "run_command", Command)
            .policies(vec![with_command(Auto), with_command(Auto)]),
        // allowAlways turns ask and deny into auto, and is only consulted then.
        builtin("allowAlways runs an asking write", "write_file", Write)
            .allowed_always()
            .consults()
            .expect(Auto),
        builtin("allowAlways runs a denied command", "run_command", Command)
            .policies(vec![with_command(Deny)])
            .allowed_always()
            .consults()
            .expect(Auto),
        builtin("allowAlways is not consulted for what runs anyway", "read_file", Read)
            .allowed_always(),
        // A degraded sandbox makes every command ask; deny stays deny.
        builtin("a degraded sandbox makes an auto command ask", "run_command", Command)
            .policies(vec![with_command(Auto)])
            .degraded()
            .expect(Ask),
        builtin("a degraded sandbox is not skipped by allowAlways", "run_command", Command)
            .degraded()
            .allowed_always()
            .expect(Ask),
        builtin("a degraded sandbox leaves a denied command denied", "run_command", Command)
            .policies(vec![with_command(Deny)])
            .degraded()
            .expect(Deny),
        builtin("a degraded sandbox does not touch reads", "read_file", Read).degraded(),
        builtin("a degraded sandbox does not touch writes", "write_file", Write)
            .policies(vec![ApprovalPolicy::allow_all()])
            .degraded(),
        // A write to a protected path asks, whatever the policy; deny stays deny.
        builtin("a protected write asks under allow-all", "write_file", Write)
            .policies(vec![ApprovalPolicy::allow_all()])
            .protected()
            .expect(Ask),
        builtin("a protected write is not skipped by allowAlways", "edit_file", Write)
            .protected()
            .allowed_always()
            .expect(Ask),
        builtin("a protected write a policy denies is refused", "write_file", Write)
            .policies(vec![per_tool("write_file", Deny)])
            .protected()
            .expect(Deny),
        // MCP tools: the server's policy unless `[approvals] mcp` or a per-tool entry says.
        mcp("an MCP tool runs when its server says auto", Auto),
        mcp("an MCP tool asks when its server says ask", Ask).consults().expect(Ask),
        mcp("an MCP tool is refused when its server says deny", Deny).consults().expect(Deny),
        mcp("[approvals] mcp beats the server", Auto)
            .policies(vec![with_mcp(Ask)])
            .consults()
            .expect(Ask),
        mcp("a per-tool entry beats [approvals] mcp", Deny)
            .policies(vec![ApprovalPolicy { mcp: Some(Ask), ..per_tool("fx__echo", Auto) }]),
        mcp("the user's own mcp entry holds back a workspace's", Auto)
            .policies(vec![with_mcp(Auto), with_mcp(Deny)])
            .consults()
            .expect(Deny),
        mcp("allowAlways runs an asking MCP tool", Ask).allowed_always().consults().expect(Auto),
        mcp("a degraded sandbox does not touch MCP tools", Auto).degraded(),
    ];
    for row in rows {
        let policies: Vec<&ApprovalPolicy> = row.policies.iter().collect();
        let facts = CallFacts {
            tool: row.tool,
            access: row.access,
            server_policy: row.server_policy,
            policies: &policies,
            sandbox_degraded: row.sandbox_degraded,
            protected_write: row.protected_write,
        };
        assert_eq!(decide(&facts, row.allowed_always), row.expected, "{}", row.case);
        assert_eq!(facts.consults_allow_always(), row.consults, "{} (consults)", row.case);
    }
}
