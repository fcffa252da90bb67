//! The mock server's knobs (docs/mock.md, "Configuration"): [`MockConfig`] and its parts — the
//! accepted keys, the served models, cache accounting, stream shape, optional validation rules
//! and prices.
//!
//! Every knob has a default, so `MockConfig::default()` is a working server and a partial JSON
//! or TOML document deserializes into a full configuration. The config is read once at start;
//! the control API changes scripts, faults and cache state, never the config.

use serde::{Deserialize, Serialize};

/// The full configuration of a [`crate::MockServer`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MockConfig {
    /// API keys the server accepts, each with a balance and a concurrency limit.
    pub keys: Vec<KeyConfig>,
    /// Models the server serves; unknown model ids are rejected with `Model Not Exist`.
    pub models: Vec<ModelConfig>,
    /// `"approx-v1"`; `"hf:<file>"` is reserved and currently refused at start.
    pub tokenizer: String,
    /// Prefix-cache accounting.
    pub cache: CacheConfig,
    /// Streaming shape.
    pub stream: StreamConfig,
    /// Which optional validation rules are enforced.
    pub strictness: StrictnessConfig,
    /// Prices used to deduct each completed request from the key's balance.
    pub pricing: PricingConfig,
    /// Seed of the generator of response ids and tool-call ids.
    pub seed: u64,
    /// The fixed clock: the `created` field of every response (Unix seconds).
    pub created: u64,
}

impl Default for MockConfig {
    fn default() -> Self {
        MockConfig {
            keys: vec![KeyConfig::default()],
            models: vec![
                ModelConfig::new("deepseek-v4-flash", true, 1_048_576, 393_216),
                ModelConfig::new("deepseek-v4-pro", true, 1_048_576, 393_216),
                ModelConfig::new("deepseek-flash", true, 1_048_576, 393_216),
                ModelConfig::new("deepseek-chat", false, 131_072, 8192),
                ModelConfig::new("deepseek-reasoner", true, 131_072, 65_536),
                ModelConfig {
                    images: true,
                    ..ModelConfig::new("mock-vision", false, 131_072, 8192)
                },
            ],
            tokenizer: "approx-v1".to_owned(),
            cache: CacheConfig::default(),
            stream: StreamConfig::default(),
            strictness: StrictnessConfig::default(),
            pricing: PricingConfig::default(),
            seed: 0x5eed,
            created: 1_767_225_600,
        }
    }
}

impl MockConfig {
    /// Sets the context window and maximum output of every configured model, e.g. a tiny
    /// window to force compaction in a client test.
    pub fn with_model_limits(mut self, context: u64, max_output: u64) -> Self {
        for model in &mut self.models {
            model.context = context;
            model.max_output = max_output;
        }
        self
    }
}

/// One accepted API key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct KeyConfig {
    /// The bearer token.
    pub key: String,
    /// Starting balance in CNY as a decimal string, e.g. `"100.00"`.
    pub balance_cny: String,
    /// In-flight requests allowed at once; one more gets 429.
    pub concurrency: u32,
}

impl Default for KeyConfig {
    fn default() -> Self {
        KeyConfig { key: "sk-test".to_owned(), balance_cny: "100.00".to_owned(), concurrency: 8 }
    }
}

/// One served model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelConfig {
    /// The model id, passed through unchanged.
    pub id: String,
    /// Whether thinking is on when the request has no `thinking` field.
    pub thinking_default: bool,
    /// Context window in tokens: prompt plus `max_tokens` must fit.
    pub context: u64,
    /// Largest accepted `max_tokens`.
    pub max_output: u64,
    /// Whether it reads images (content parts `image_url` with a `data:` URL on the chat
    /// endpoints, `image` blocks on the Messages endpoints); others answer 400 to an image.
    pub images: bool,
}

impl ModelConfig {
    /// A model with the given id and limits.
    pub fn new(id: &str, thinking_default: bool, context: u64, max_output: u64) -> Self {
        ModelConfig { id: id.to_owned(), thinking_default, context, max_output, images: false }
    }
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig::new("deepseek-v4-flash", true, 1_048_576, 393_216)
    }
}

/// How cache units are persisted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheMode {
    /// Units at every multiple of the granularity of each prompt and completion.
    Block,
    /// Only end-of-input, end-of-output, common-prefix and fixed-interval units (V4 guide).
    Units,
}

/// Prefix-cache accounting (docs/mock.md, "Prefix-cache accounting").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CacheConfig {
    /// `block` or `units`.
    pub mode: CacheMode,
    /// Hits are rounded down to a multiple of this (G).
    pub granularity: u64,
    /// Never serve the last token of the prompt from cache.
    pub withhold_final_block: bool,
    /// Fixed interval (I) of units in `units` mode.
    pub interval: u64,
    /// Delay before a stored unit becomes visible.
    pub persist_delay_ms: u64,
    /// Units expire this long after their last use; `None` keeps them forever.
    pub ttl_ms: Option<u64>,
    /// Components of the cache namespace: any of `key`, `user_id`, `model`, `max_tokens`,
    /// `stream`.
    pub namespace: Vec<String>,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            mode: CacheMode::Block,
            granularity: 64,
            withhold_final_block: true,
            interval: 4096,
            persist_delay_ms: 0,
            ttl_ms: None,
            namespace: vec!["key".to_owned(), "user_id".to_owned(), "model".to_owned()],
        }
    }
}

/// Where streamed usage goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UsagePlacement {
    /// On the chunk that carries `finish_reason` (observed V4 behaviour).
    FinishChunk,
    /// On an extra chunk with `choices: []` after the finish chunk (reference docs).
    SeparateChunk,
}

/// Streaming shape (docs/mock.md, "Responses").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StreamConfig {
    /// `finish_chunk` or `separate_chunk`.
    pub usage_placement: UsagePlacement,
    /// Send usage even when `stream_options.include_usage` is absent or false.
    pub usage_without_include_usage: bool,
    /// Tokenizer pieces per reasoning or content delta.
    pub piece_per_delta: usize,
    /// Size in bytes of tool-argument fragments (cut on character boundaries).
    pub arg_fragment_bytes: usize,
    /// Pause between data frames.
    pub inter_chunk_delay_ms: u64,
    /// Interval of keep-alive comments while a `queue_keepalive_ms` fault holds the stream.
    pub queue_keepalive_interval_ms: u64,
}

impl Default for StreamConfig {
    fn default() -> Self {
        StreamConfig {
            usage_placement: UsagePlacement::FinishChunk,
            usage_without_include_usage: true,
            piece_per_delta: 1,
            arg_fragment_bytes: 8,
            inter_chunk_delay_ms: 0,
            queue_keepalive_interval_ms: 100,
        }
    }
}

/// Which assistant messages must carry `reasoning_content` in thinking mode with tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PassbackRule {
    /// Every assistant message (current DeepSeek wording).
    AllAssistant,
    /// Only assistant messages with tool calls (older wording).
    ToolCallTurns,
    /// Not checked.
    Off,
}

/// Optional validation rules (docs/mock.md, "Validation").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StrictnessConfig {
    /// The reasoning passback rule.
    pub reasoning_passback: PassbackRule,
    /// Reject an assistant message with null or missing content and no tool calls.
    pub reject_null_content_without_tool_calls: bool,
    /// Reject the `developer` role (otherwise it is treated as `system`).
    pub reject_developer_role: bool,
    /// Reject `tool_choice` `required` or named in thinking mode.
    pub thinking_rejects_forced_tool_choice: bool,
}

impl Default for StrictnessConfig {
    fn default() -> Self {
        StrictnessConfig {
            reasoning_passback: PassbackRule::AllAssistant,
            reject_null_content_without_tool_calls: true,
            reject_developer_role: true,
            thinking_rejects_forced_tool_choice: true,
        }
    }
}

/// Prices in CNY per million tokens, as decimal strings (defaults: flash-like rates).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PricingConfig {
    /// Price of cache-hit input tokens.
    pub hit_per_million: String,
    /// Price of cache-miss input tokens.
    pub miss_per_million: String,
    /// Price of output tokens.
    pub output_per_million: String,
}

impl Default for PricingConfig {
    fn default() -> Self {
        PricingConfig {
            hit_per_million: "0.20".to_owned(),
            miss_per_million: "2.00".to_owned(),
            output_per_million: "3.00".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partial_document_fills_every_other_knob_with_its_default() {
        let config: MockConfig = serde_json::from_str(
            r#"{"cache": {"mode": "units", "granularity": 128},
                "stream": {"usage_placement": "separate_chunk"},
                "models": [{"id": "tiny", "context": 512}]}"#,
        )
        .unwrap_or_default();
        assert_eq!(config.cache.mode, CacheMode::Units);
        assert_eq!(config.cache.granularity, 128);
        assert!(config.cache.withhold_final_block);
        assert_eq!(config.stream.usage_placement, UsagePlacement::SeparateChunk);
        assert_eq!(config.stream.arg_fragment_bytes, 8);
        assert_eq!(config.models[0].id, "tiny");
        assert_eq!(config.models[0].context, 512);
        assert_eq!(config.models[0].max_output, 393_216);
        assert_eq!(config.keys, vec![KeyConfig::default()]);
        assert_eq!(MockConfig::default().keys[0].key, "sk-test");
    }
}
