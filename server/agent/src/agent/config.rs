//! How a loop instance is configured: [`AgentConfig`] (the call config of a log with no header
//! yet, the step limit, approvals, the date note, context pressure, the instruction policy) and
//! [`CallOverrides`], the explicit options that beat the logged header's config on the first
//! request of a loop instance. Plain values: nothing here reads a log or a file.

use dsh_session::LlmCallConfig;

use crate::approval::ApprovalPolicy;
use crate::compact::ContextPolicy;
use crate::prompt::InstructionPolicy;
use crate::tools::WebSettings;

/// Explicit call options (from the command line, `session/create`, a fork): on the first request
/// of a loop instance they beat the logged header's config.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CallOverrides {
    /// Model id.
    pub model: Option<String>,
    /// Output limit.
    pub max_tokens: Option<u32>,
    /// Thinking on/off.
    pub thinking: Option<bool>,
    /// Reasoning effort.
    pub reasoning_effort: Option<String>,
    /// Temperature.
    pub temperature: Option<f64>,
    /// Provider profile.
    pub profile: Option<String>,
}

impl CallOverrides {
    /// Takes every option `other` sets in place of this one's.
    pub fn merge(&mut self, other: CallOverrides) {
        let CallOverrides { model, max_tokens, thinking, reasoning_effort, temperature, profile } =
            other;
        self.model = model.or(self.model.take());
        self.max_tokens = max_tokens.or(self.max_tokens);
        self.thinking = thinking.or(self.thinking);
        self.reasoning_effort = reasoning_effort.or(self.reasoning_effort.take());
        self.temperature = temperature.or(self.temperature);
        self.profile = profile.or(self.profile.take());
    }

    /// `base` with every set option applied.
    pub fn apply(&self, mut base: LlmCallConfig) -> LlmCallConfig {
        if let Some(profile) = &self.profile {
            base.profile = Some(profile.clone());
        }
        if let Some(model) = &self.model {
            base.model = model.clone();
        }
        if let Some(max_tokens) = self.max_tokens {
            base.max_tokens = max_tokens;
        }
        if let Some(thinking) = self.thinking {
            base.thinking = thinking;
        }
        if let Some(effort) = &self.reasoning_effort {
            base.reasoning_effort = Some(effort.clone());
        }
        if let Some(temperature) = self.temperature {
            base.temperature = Some(temperature);
        }
        base
    }
}

/// How the loop behaves.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// The call config of a session whose log has no header yet.
    pub default_call: LlmCallConfig,
    /// Explicit options for this loop instance's first request.
    pub overrides: CallOverrides,
    /// Steps per turn before the turn ends with `maxSteps`.
    pub max_steps: u32,
    /// Rebuild every request from the log at dispatch and compare (on in debug builds).
    pub check_invariants: bool,
    /// Tool approval policy.
    pub approvals: ApprovalPolicy,
    /// Log today's date as a `context/message` at the start of a turn when it changed.
    pub date_context: bool,
    /// Context-pressure management (trimming, compaction) before each step.
    pub context: ContextPolicy,
    /// What an instruction file's edit does, unless the endpoint's configuration says.
    pub instructions: InstructionPolicy,
    /// `web_fetch`'s rules and limits, unless the endpoint's configuration says.
    pub web: WebSettings,
}

impl AgentConfig {
    /// Defaults for `model`: 8192 output tokens, thinking on, 50 steps per turn, invariants on in
    /// debug builds, the default approval policy.
    pub fn new(model: &str) -> Self {
        AgentConfig {
            default_call: LlmCallConfig {
                model: model.to_owned(),
                profile: None,
                wire: None,
                max_tokens: 8192,
                thinking: true,
                reasoning_effort: None,
                temperature: None,
                top_p: None,
                response_format: None,
            },
            overrides: CallOverrides::default(),
            max_steps: 50,
            check_invariants: cfg!(debug_assertions),
            approvals: ApprovalPolicy::default(),
            date_context: true,
            context: ContextPolicy::ModelDefaults,
            instructions: InstructionPolicy::default(),
            web: WebSettings::default(),
        }
    }
}
