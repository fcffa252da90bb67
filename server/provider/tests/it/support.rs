//! Helpers shared by the integration tests: building requests and collecting streams.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use dsh_provider::{
    ApiKey, DeepSeek, DeepSeekConfig, MessageAssembler, ProviderError, RetryPolicy, StreamEvent,
    wire_body,
};
use dsh_session::{
    AssistantMessage, EpochHeader, GenerateRequest, LlmCallConfig, Message, ToolSchema, Usage,
};
use tokio_util::sync::CancellationToken;

/// A config with short timers and fast retries, for tests.
pub fn test_config(base_url: &str, key: &str) -> DeepSeekConfig {
    let mut config = DeepSeekConfig::new(base_url, ApiKey::new(key).unwrap());
    config.data_timeout = Duration::from_secs(5);
    config.overall_timeout = Duration::from_secs(20);
    config.connect_timeout = Duration::from_secs(2);
    config.retry = RetryPolicy {
        max_attempts: 4,
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(40),
    };
    config
}

pub fn client(config: DeepSeekConfig) -> DeepSeek {
    DeepSeek::new(config).unwrap()
}

pub fn call_config(model: &str, thinking: bool) -> LlmCallConfig {
    LlmCallConfig {
        model: model.to_owned(),
        profile: None,
        wire: None,
        max_tokens: 1024,
        thinking,
        reasoning_effort: None,
        temperature: None,
        top_p: None,
        response_format: None,
    }
}

pub fn tool(name: &str) -> ToolSchema {
    ToolSchema {
        name: name.to_owned(),
        description: format!("Use {name}."),
        parameters: serde_json::json!({
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        }),
    }
}

pub fn user(text: &str) -> Arc<Message> {
    Arc::new(Message::user(text))
}

pub fn request(
    config: LlmCallConfig,
    tools: Vec<ToolSchema>,
    messages: Vec<Arc<Message>>,
) -> GenerateRequest {
    GenerateRequest {
        images: Default::default(),
        header: EpochHeader::new(config, Some("You are a test.".to_owned()), tools),
        messages,
    }
}

pub fn body(request: &GenerateRequest) -> Bytes {
    Bytes::from(wire_body(request))
}

/// Everything one call produced.
#[derive(Debug, Default)]
pub struct Outcome {
    pub events: Vec<StreamEvent>,
    pub error: Option<ProviderError>,
}

impl Outcome {
    pub fn retries(&self) -> Vec<u32> {
        self.events
            .iter()
            .filter_map(|event| match event {
                StreamEvent::Retry { attempt, .. } => Some(*attempt),
                _ => None,
            })
            .collect()
    }

    pub fn deltas(&self) -> usize {
        self.events.iter().filter(|event| matches!(event, StreamEvent::Delta(_))).count()
    }

    pub fn finish(&self) -> Option<(String, Usage)> {
        self.events.iter().find_map(|event| match event {
            StreamEvent::Finish { finish_reason, usage } => Some((finish_reason.clone(), *usage)),
            _ => None,
        })
    }

    pub fn message(&self) -> AssistantMessage {
        let mut assembler = MessageAssembler::new();
        for event in &self.events {
            if let StreamEvent::Delta(delta) = event {
                assembler.push(delta);
            }
        }
        assembler.finish()
    }

    pub fn expect_success(&self) -> (String, Usage) {
        assert!(
            self.error.is_none(),
            "unexpected error: {:?}; events {:?}",
            self.error,
            self.events
        );
        self.finish().expect("a Finish event")
    }

    pub fn expect_error(&self) -> &ProviderError {
        assert!(self.finish().is_none(), "unexpected Finish: {:?}", self.events);
        self.error.as_ref().expect("an error")
    }
}

/// Runs one call to its end (with a generous test deadline).
pub async fn collect(deepseek: &DeepSeek, body: impl Into<dsh_provider::WireBytes>) -> Outcome {
    let mut stream = deepseek.stream(body, CancellationToken::new());
    let mut outcome = Outcome::default();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let next = tokio::time::timeout_at(deadline, stream.next()).await.expect("the call hangs");
        match next {
            None => return outcome,
            Some(Ok(event)) => outcome.events.push(event),
            Some(Err(error)) => {
                outcome.error = Some(error);
                assert!(stream.next().await.is_none(), "events after an error");
                return outcome;
            }
        }
    }
}
