//! `mock_request`: the mock's chat request validation and answer on arbitrary bodies, under the
//! default configuration and under one with every strictness rule off.
//!
//! No panic; a rejection is a 400 or 422 with a message; an answer's prompt fits the model's
//! context; the same body always gets the same answer.

use std::sync::OnceLock;

use dsh_mock::{MockConfig, PassbackRule, StrictnessConfig, answer_chat_body};

fn configs() -> &'static [MockConfig; 2] {
    static CONFIGS: OnceLock<[MockConfig; 2]> = OnceLock::new();
    CONFIGS.get_or_init(|| {
        let lenient = MockConfig {
            strictness: StrictnessConfig {
                reasoning_passback: PassbackRule::Off,
                reject_null_content_without_tool_calls: false,
                reject_developer_role: false,
                thinking_rejects_forced_tool_choice: false,
            },
            ..MockConfig::default()
        };
        [MockConfig::default(), lenient]
    })
}

/// Checks one request body.
pub fn check(body: &[u8]) {
    for config in configs() {
        let answer = answer_chat_body(body, config);
        match &answer {
            Ok((prompt_tokens, _completion_tokens)) => {
                let context = config.models.iter().map(|model| model.context).max().unwrap();
                assert!(*prompt_tokens <= context);
            }
            Err((status, message)) => {
                assert!(matches!(status, 400 | 422), "status {status}: {message}");
                assert!(!message.is_empty());
            }
        }
        assert_eq!(answer_chat_body(body, config), answer, "the answer is not deterministic");
    }
}
