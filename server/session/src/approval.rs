//! The approval policy of a tool call — `auto`, `ask` or `deny` — and the one order of their
//! strictness. The configuration reads it from files, the agent applies it (the stricter of two
//! wins); it is not logged.

use std::str::FromStr;

/// What happens when the model calls a tool, from the least held back to the most.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Approval {
    /// Run it without asking.
    Auto,
    /// Ask a person first.
    Ask,
    /// Refuse it.
    Deny,
}

impl Approval {
    /// Its name in files.
    pub fn name(self) -> &'static str {
        match self {
            Approval::Auto => "auto",
            Approval::Ask => "ask",
            Approval::Deny => "deny",
        }
    }

    /// The one of the two that holds back more: `deny` over `ask` over `auto`.
    pub fn stricter(self, other: Approval) -> Approval {
        let rank = |approval: Approval| match approval {
            Approval::Auto => 0,
            Approval::Ask => 1,
            Approval::Deny => 2,
        };
        if rank(other) > rank(self) { other } else { self }
    }
}

impl FromStr for Approval {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "auto" => Ok(Approval::Auto),
            "ask" => Ok(Approval::Ask),
            "deny" => Ok(Approval::Deny),
            other => Err(format!("unknown approval policy `{other}` (expected auto, ask or deny)")),
        }
    }
}
