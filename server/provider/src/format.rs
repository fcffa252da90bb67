//! The wire formats, one [`Format`] each, and the one place that dispatches on them.
//!
//! A call config's `wire` kind names the format a request is written in and its answer read
//! in: chat completions (`deepseek`, `openai-compatible`: `crate::chat` writes the body, in the
//! dialect the call config names; `crate::chunk` reads the stream) or Anthropic Messages
//! (`anthropic`: `crate::anthropic` and `crate::anthropic::stream`). Every operation that
//! differs by format — the body, its memo, the checks before dispatch, the adapter id, the
//! endpoint's path and headers, the stream decoder — is one `match` on [`Format`] here; nothing
//! else in the crate asks which format it has.
//!
//! The format modules never import each other: both write through `crate::json` and memoize
//! through `crate::body`; this module is the only one that knows them both.

use dsh_session::{GenerateRequest, LlmCallConfig, ProviderKind};
use reqwest::header::{AUTHORIZATION, HeaderName};

use crate::ProviderError;
use crate::anthropic::stream::MessagesDecoder;
use crate::body::WireBytes;
use crate::chunk::ChunkDecoder;
use crate::decoded::Decoded;
use crate::{anthropic, chat};

/// A wire format: how a request is written, where it is sent and how its answer is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    /// Chat completions, DeepSeek's or another OpenAI-compatible server's (`POST
    /// /chat/completions`); the dialect's byte-changing options are the call config's `wire`.
    Chat,
    /// Anthropic Messages (`POST /v1/messages`).
    Anthropic,
}

/// The `anthropic-version` header sent to Messages endpoints.
const ANTHROPIC_VERSION: &str = "2023-06-01";

impl Format {
    /// The format an endpoint of this kind speaks.
    pub(crate) fn of(kind: ProviderKind) -> Format {
        match kind {
            ProviderKind::Deepseek | ProviderKind::OpenaiCompatible => Format::Chat,
            ProviderKind::Anthropic => Format::Anthropic,
        }
    }

    /// The format `request` is written in.
    fn of_request(request: &GenerateRequest) -> Format {
        Format::of(request.header.config.kind())
    }

    /// The path requests are posted to, after the base URL.
    pub(crate) fn path(self) -> &'static str {
        match self {
            Format::Chat => "chat/completions",
            Format::Anthropic => "v1/messages",
        }
    }

    /// The header that carries the API key, and its value.
    pub(crate) fn key_header(self, key: &str) -> (HeaderName, String) {
        match self {
            Format::Chat => (AUTHORIZATION, format!("Bearer {key}")),
            Format::Anthropic => (HeaderName::from_static("x-api-key"), key.to_owned()),
        }
    }

    /// Headers every request carries (name, value); a profile header of the same name
    /// overrides one.
    pub(crate) fn fixed_headers(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Format::Chat => &[],
            // The version the decoder and serializer follow; a profile header may pin another.
            Format::Anthropic => &[("anthropic-version", ANTHROPIC_VERSION)],
        }
    }

    /// A decoder for the data events of one response.
    pub(crate) fn decoder(self) -> Decoder {
        match self {
            Format::Chat => Decoder::Chat(ChunkDecoder::new()),
            Format::Anthropic => Decoder::Anthropic(MessagesDecoder::new()),
        }
    }
}

/// The decoder of one attempt's data events, by format.
pub(crate) enum Decoder {
    Chat(ChunkDecoder),
    Anthropic(MessagesDecoder),
}

impl Decoder {
    /// Decodes one SSE data payload.
    pub(crate) fn decode(&mut self, data: &str) -> Result<Decoded, ProviderError> {
        match self {
            Decoder::Chat(decoder) => decoder.decode(data),
            Decoder::Anthropic(decoder) => decoder.decode(data),
        }
    }
}

/// The adapter that writes requests with this call config (logged in `request/sent`).
pub fn adapter_id(config: &LlmCallConfig) -> &'static str {
    match Format::of(config.kind()) {
        Format::Chat => chat::adapter_id(config),
        Format::Anthropic => anthropic::ANTHROPIC_ADAPTER,
    }
}

/// Serializes a request into the exact body bytes its format sends (`/chat/completions` or
/// `/v1/messages`, by the call config's `wire` kind).
///
/// Pure and deterministic: same request, same bytes.
pub fn wire_body(request: &GenerateRequest) -> Vec<u8> {
    match Format::of_request(request) {
        Format::Chat => chat::body(request),
        Format::Anthropic => anthropic::body(request),
    }
}

/// Refuses, before it is sent, a request whose images are not all loaded, and one its format
/// would reject (the Anthropic Messages
/// checks: a tool result without its `tool_use`, an empty text block, unsigned reasoning in a
/// tool-use turn, …); the chat-completions formats have nothing to check here.
pub fn check_request(request: &GenerateRequest) -> Result<(), String> {
    if let Some(image) = request.missing_image() {
        return Err(format!(
            "image {} ({} bytes) is not loaded: a request is never sent without an image its \
             log names",
            image.sha256, image.size
        ));
    }
    match Format::of_request(request) {
        Format::Chat => Ok(()),
        Format::Anthropic => anthropic::check(request),
    }
}

/// Whether `arguments`, the streamed text of a tool call, can be sent back in the format of
/// `config` (Anthropic's `input` must be a JSON object; chat completions send any string).
pub fn check_tool_arguments(config: &LlmCallConfig, arguments: &str) -> Result<(), String> {
    match Format::of(config.kind()) {
        Format::Chat => Ok(()),
        Format::Anthropic => anthropic::tool_input(arguments).map(drop),
    }
}

/// [`wire_body`] memoized across the consecutive requests of one conversation, with the body's
/// sha256.
///
/// A request whose header equals the previous one and whose messages extend the previous ones
/// (the same shared `Arc`s, or equal messages, in order) serializes only its new messages (for
/// Anthropic Messages, its last three turns) and feeds only their bytes to the running digest:
/// the cost of a step is O(new messages), not O(conversation). Anything else — a header change,
/// a surface rewrite, another conversation, another format — starts over. The result is always
/// byte-identical to [`wire_body`]; the loop's invariant check compares the two.
#[derive(Clone, Default)]
pub struct WireCache {
    /// The memo of the format serialized last; `None` before the first body.
    memo: Option<Memo>,
}

/// One format's memo.
#[derive(Clone)]
enum Memo {
    Chat(chat::Memo),
    Anthropic(anthropic::Memo),
}

impl Memo {
    fn format(&self) -> Format {
        match self {
            Memo::Chat(_) => Format::Chat,
            Memo::Anthropic(_) => Format::Anthropic,
        }
    }
}

impl std::fmt::Debug for WireCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WireCache")
            .field("format", &self.memo.as_ref().map(Memo::format))
            .field("memoized_bytes", &self.memoized_bytes())
            .finish()
    }
}

impl WireCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether it holds no body yet.
    pub fn is_empty(&self) -> bool {
        match &self.memo {
            None => true,
            Some(Memo::Chat(memo)) => memo.is_empty(),
            Some(Memo::Anthropic(memo)) => memo.is_empty(),
        }
    }

    /// The bytes of body it holds (what it costs in memory, besides its shared messages).
    pub fn memoized_bytes(&self) -> usize {
        match &self.memo {
            None => 0,
            Some(Memo::Chat(memo)) => memo.memoized_bytes(),
            Some(Memo::Anthropic(memo)) => memo.memoized_bytes(),
        }
    }

    /// Whether the body of `request` extends the one memoized: then [`WireCache::body`]
    /// serializes only its new messages. The memoized messages become `request`'s own (equal)
    /// ones, so the next body of a request sharing them compares pointers, not contents.
    pub fn adopt(&mut self, request: &GenerateRequest) -> bool {
        // A request missing an image's bytes is never memoized (see `body`): nothing to adopt.
        if request.missing_image().is_some() {
            return false;
        }
        match (&mut self.memo, Format::of_request(request)) {
            (Some(Memo::Chat(memo)), Format::Chat) => memo.adopt(request),
            (Some(Memo::Anthropic(memo)), Format::Anthropic) => memo.adopt(request),
            // No memo, or another format's: its header differs, so it extends nothing.
            _ => false,
        }
    }

    /// The body of `request` (equal to `wire_body(request)`) and its lowercase hex sha256.
    pub fn body(&mut self, request: &GenerateRequest) -> (WireBytes, String) {
        // The memo is keyed by messages, not by the image bytes they name: a body written
        // without an image's bytes (a request `check_request` refuses) must not be memoized
        // for a later request that has them.
        if request.missing_image().is_some() {
            let body = wire_body(request);
            let sha256 = crate::sha256_hex(&body);
            return (WireBytes::from(body), sha256);
        }
        let format = Format::of_request(request);
        let memo = match &mut self.memo {
            Some(memo) if memo.format() == format => memo,
            // Another format's memo can never serve this request (the call config is part of
            // the header it compares): it makes way rather than hold its bytes.
            slot => slot.insert(match format {
                Format::Chat => Memo::Chat(chat::Memo::default()),
                Format::Anthropic => Memo::Anthropic(anthropic::Memo::default()),
            }),
        };
        match memo {
            Memo::Chat(memo) => memo.body(request),
            Memo::Anthropic(memo) => memo.body(request),
        }
    }
}
