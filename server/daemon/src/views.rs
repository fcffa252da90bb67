//! Views the daemon builds from a session log: "what the model saw" (the rebuilt request, its
//! wire body, and the step diff), the audit, and the words for a cache drop. Every view is
//! rebuilt from the log, never from memory. The CLI's text rendering of the API's results lives
//! in the CLI; the request's text form lives here because the step diff is made of it. Costs are
//! the one thing not from the log: prices are configuration, and the usage view says which it
//! used.

use std::fmt::Write as _;
use std::sync::Arc;

use dsh_config::Config;
use dsh_protocol::{
    ModelStatus, PriceUsed, ProfileStatus, SeqMessage, SessionAuditResult, SessionRequestResult,
    SessionUsageResult, UsageEntry, WireBody,
};
use dsh_provider::{WireCache, adapter_id, sha256_hex, wire_body};
use dsh_session::{
    Cost, Event, EventData, ImageData, Message, Price, Severity, StepRequest, Usage, UsageRow,
    check_log, reconstruct_step, usage_totals,
};

use crate::settings::LEGACY_PROFILE;

/// Why a step's cache hit looks the way it does, in words.
pub fn explain(row: &UsageRow) -> String {
    let causes: Vec<String> = row.causes.iter().map(ToString::to_string).collect();
    match (row.dropped, causes.is_empty()) {
        (_, false) => causes.join("; "),
        (true, true) => "no logged cause (provider cache eviction)".to_owned(),
        (false, true) => String::new(),
    }
}

/// Where the wire body of a rebuilt request comes from.
pub enum Body<'a> {
    /// Serialized and hashed from scratch.
    Fresh,
    /// Through a loaded session's memo: a request that extends the one serialized last is
    /// serialized only for its new messages — the same bytes ([`WireCache`] equals
    /// `wire_body` by construction).
    Memo(&'a mut WireCache),
}

/// "What the model saw" in the API's shape, from a rebuilt step.
pub fn request_result(rebuilt: &StepRequest, body: Body<'_>) -> SessionRequestResult {
    let (body, sha256) = match body {
        Body::Memo(memo) => {
            let (body, sha256) = memo.body(&rebuilt.request);
            (body.to_vec(), sha256)
        }
        Body::Fresh => {
            let body = wire_body(&rebuilt.request);
            let sha256 = sha256_hex(&body);
            (body, sha256)
        }
    };
    SessionRequestResult {
        step: rebuilt.step,
        turn: rebuilt.turn,
        boundary_seq: rebuilt.boundary_seq,
        header: rebuilt.request.header.clone(),
        header_events: rebuilt.header_events.clone(),
        messages: rebuilt
            .surface
            .iter()
            .map(|node| SeqMessage { seq: node.id, message: Arc::clone(&node.message) })
            .collect(),
        wire: WireBody {
            adapter: adapter_id(&rebuilt.request.header.config).to_owned(),
            sha256,
            bytes: body.len() as u64,
            // Bodies are UTF-8 (serialized from strings): no copy of a long body.
            body: String::from_utf8(body)
                .unwrap_or_else(|error| String::from_utf8_lossy(error.as_bytes()).into_owned()),
        },
        sent: rebuilt.sent.clone(),
        usage: rebuilt.usage,
        diff: None,
    }
}

/// "What the model saw" as text. `full` prints every message and tool schema whole (for
/// diffs); otherwise long texts are shortened for reading.
pub fn request_text(result: &SessionRequestResult, full: bool) -> String {
    let header = &result.header;
    let mut out = String::new();
    let header_events = if result.header_events.is_empty() {
        "none (carried forward)".to_owned()
    } else {
        result.header_events.iter().map(|s| format!("seq {s}")).collect::<Vec<_>>().join(", ")
    };
    let _ = writeln!(
        out,
        "step {} (turn {}) · boundary seq {} · header events: {header_events}",
        result.step, result.turn, result.boundary_seq
    );
    let config = &header.config;
    let mut line = format!(
        "model {} · max_tokens {} · thinking {}",
        config.model,
        config.max_tokens,
        if config.thinking { "on" } else { "off" }
    );
    if let Some(effort) = &config.reasoning_effort {
        let _ = write!(line, " · effort {effort}");
    }
    if let Some(temperature) = config.temperature {
        let _ = write!(line, " · temperature {temperature}");
    }
    let _ = writeln!(out, "{line}");
    match &header.system {
        Some(system) => {
            let _ = writeln!(out, "system prompt ({} lines):", system.lines().count());
            for line in system.split('\n') {
                let _ = writeln!(out, "  | {line}");
            }
        }
        None => {
            let _ = writeln!(out, "system prompt: none");
        }
    }
    let tools: Vec<&str> = header.tool_list().iter().map(|t| t.name.as_str()).collect();
    let _ = writeln!(
        out,
        "tools: {}",
        if tools.is_empty() { "none".to_owned() } else { tools.join(", ") }
    );
    if full {
        for tool in header.tool_list() {
            let _ = writeln!(
                out,
                "  tool {}: {}",
                tool.name,
                serde_json::to_string(tool).unwrap_or_default()
            );
        }
    }
    let _ = writeln!(out, "messages ({}):", result.messages.len());
    for entry in &result.messages {
        let _ = writeln!(out, "  [seq {}] {}", entry.seq, message_text(&entry.message, full));
    }
    let wire = &result.wire;
    let _ = write!(out, "wire: {} · {} bytes · sha256 {}", wire.adapter, wire.bytes, wire.sha256);
    match &result.sent {
        Some(sent) if sent.sha256 == wire.sha256 => {
            let _ = writeln!(out, " (matches request/sent)");
        }
        Some(sent) => {
            let _ = writeln!(out, " (DIFFERS from request/sent {})", sent.sha256);
        }
        None => {
            let _ = writeln!(out, " (never sent)");
        }
    }
    if let Some(usage) = result.usage {
        let _ = writeln!(
            out,
            "usage: prompt {} · cached {} · new {} · out {} · hit {:.1}%",
            usage.prompt_tokens,
            usage.cache_hit_tokens,
            usage.cache_miss_tokens,
            usage.completion_tokens,
            usage.hit_ratio() * 100.0
        );
    }
    out
}

fn shorten(text: &str, full: bool) -> String {
    const LIMIT: usize = 160;
    if full || text.chars().count() <= LIMIT {
        return format!("{text:?}");
    }
    let head: String = text.chars().take(LIMIT).collect();
    format!("{head:?}… ({} chars)", text.chars().count())
}

fn message_text(message: &Message, full: bool) -> String {
    match message {
        Message::System { content } => format!("system: {}", shorten(content, full)),
        Message::User { content, images } => {
            format!("user: {}{}", shorten(content, full), images_text(images))
        }
        Message::Tool { call_id, content, images } => {
            format!("tool {call_id}: {}{}", shorten(content, full), images_text(images))
        }
        Message::Assistant(assistant) => {
            let mut text = format!("assistant: {}", shorten(&assistant.content, full));
            if let Some(reasoning) = &assistant.reasoning_content {
                let _ = write!(text, " · reasoning {}", shorten(reasoning, full));
            }
            for call in &assistant.tool_calls {
                let _ = write!(text, " · call {} {} {}", call.id, call.name, call.arguments);
            }
            text
        }
    }
}

/// ` · [image: NAME, SIZE bytes, SHA256]` for each image.
fn images_text(images: &[dsh_session::ImageRef]) -> String {
    images
        .iter()
        .map(|image| {
            let name = image.name.as_deref().unwrap_or(&image.media_type);
            format!(" · [image: {name}, {} bytes, {}]", image.size, image.sha256)
        })
        .collect()
}

/// A unified diff of step `step - 1`'s request against step `step`'s, both rebuilt.
/// `current` is the step's answer already built (its body is not serialized again).
pub fn diff_text(previous: &StepRequest, current: &SessionRequestResult) -> String {
    let old = request_text(&request_result(previous, Body::Fresh), true);
    let new = request_text(current, true);
    similar::TextDiff::from_lines(&old, &new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("step {}", previous.step), &format!("step {}", current.step))
        .to_string()
}

/// Rebuilds every step of a log, compares each wire body with its `request/sent` record, and runs
/// the log checks. `images` holds the bytes of the images the log names (loaded before: the
/// rebuild stays pure); a step whose request names one it lacks is a mismatch naming the hash.
pub fn audit(events: &[Event], images: &ImageData) -> SessionAuditResult {
    let mut result = SessionAuditResult {
        ok: false,
        steps: 0,
        matched: 0,
        mismatches: Vec::new(),
        errors: Vec::new(),
        notes: Vec::new(),
    };
    for diagnostic in check_log(events) {
        match diagnostic.severity {
            Severity::Error => result.errors.push(diagnostic.to_string()),
            Severity::Open => result.notes.push(diagnostic.to_string()),
        }
    }
    let last_step = events
        .iter()
        .filter_map(|event| match &event.data {
            dsh_session::EventData::StepStart(start) => Some(start.step),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    for step in 1..=last_step {
        let mut rebuilt = match reconstruct_step(events, step) {
            Ok(rebuilt) => rebuilt,
            Err(error) => {
                result.mismatches.push(format!("step {step}: {error}"));
                continue;
            }
        };
        result.steps += 1;
        rebuilt.request.images = images.clone();
        let Some(sent) = &rebuilt.sent else { continue };
        if let Some(image) = rebuilt.request.missing_image() {
            result.mismatches.push(format!(
                "step {step}: image {} is not in the object store, so the request cannot be \
                 rebuilt",
                image.sha256
            ));
            continue;
        }
        let body = wire_body(&rebuilt.request);
        let sha = sha256_hex(&body);
        let adapter = adapter_id(&rebuilt.request.header.config);
        if sent.adapter != adapter {
            result.mismatches.push(format!(
                "step {step}: sent by adapter {}, this build rebuilds its call config with {adapter}",
                sent.adapter
            ));
        } else if sha != sent.sha256 || body.len() as u64 != sent.bytes {
            result.mismatches.push(format!(
                "step {step}: rebuilt body sha256 {sha} ({} bytes) differs from request/sent {} ({} bytes)",
                body.len(),
                sent.sha256,
                sent.bytes
            ));
        } else {
            result.matched += 1;
        }
    }
    result.ok = result.mismatches.is_empty() && result.errors.is_empty();
    result
}

/// Audits a log file that no daemon holds (`dsh audit FILE`): the same checks as
/// `session/audit`, read straight from the file.
pub fn audit_file(path: &std::path::Path) -> Result<SessionAuditResult, dsh_store::StoreError> {
    let read = dsh_store::read_log(path)?;
    // Every image the log names must be in the workspace's object store, whole: read (the
    // store verifies its hash) before the steps are rebuilt with it.
    let dir = dsh_store::objects_dir_of_log(path);
    let named: Vec<(u64, &dsh_session::ImageRef)> = read
        .events
        .iter()
        .flat_map(|event| {
            crate::images::referenced(&event.data).map(move |image| (event.seq, image))
        })
        .collect();
    let (images, failed) =
        crate::images::load_images(dir.as_deref(), named.iter().map(|(_, image)| *image));
    let mut image_errors = Vec::new();
    for (image, why) in failed {
        let seq = named.iter().find(|(_, named)| named.sha256 == image.sha256).map(|(seq, _)| seq);
        let at = seq.map_or(String::new(), |seq| format!("seq {seq}: "));
        image_errors.push(format!("{at}image {}: {why}", image.sha256));
    }
    let mut result = audit(&read.events, &images);
    result.errors.extend(image_errors);
    result.ok = result.ok && result.errors.is_empty();
    if let Some(torn) = &read.torn {
        result.notes.insert(
            0,
            format!(
                "the log ends in a torn line at byte {} ({} bytes), ignored",
                torn.offset, torn.len
            ),
        );
    }
    Ok(result)
}

/// The workspace a log's `session/meta` names.
pub fn workspace_of(events: &[Event]) -> Option<std::path::PathBuf> {
    match events.first().map(|event| &event.data) {
        Some(EventData::SessionMeta(meta)) => Some(std::path::PathBuf::from(&meta.workspace)),
        _ => None,
    }
}

/// The price of a profile's model in `config` (logs from before profiles are DeepSeek's; an
/// ad-hoc profile has its configured profile's prices).
pub(crate) fn price_of(config: &Config, profile: Option<&str>, model: &str) -> Option<Price> {
    config.profile(profile.unwrap_or(LEGACY_PROFILE)).ok()?.price(model).cloned()
}

/// What steps cost at `config`'s prices, summed; `None` when one has no price or the
/// currencies differ.
pub fn cost_of(config: &Config, usage: &[(Option<String>, String, Usage)]) -> Option<Cost> {
    let mut total: Option<Cost> = None;
    for (profile, model, usage) in usage {
        let cost = price_of(config, profile.as_deref(), model)?.cost(usage);
        total = Some(match total {
            None => cost,
            Some(sum) => sum.plus(&cost)?,
        });
    }
    total
}

/// The profile and model a session's next request uses, as the loop picks them: what
/// `session/meta` pinned it to (`pin`) over its folded header's (`call`) — a fork moved to
/// another model carries its parent's header but asks the pinned model — else the
/// configuration's default profile and model (as its first request will pick them).
pub fn next_model(
    config: Option<&Config>,
    call: Option<&dsh_session::LlmCallConfig>,
    pin: Option<&dsh_session::SessionPin>,
) -> (String, String) {
    if let Some(call) = call {
        let pinned_profile = pin.and_then(|pin| pin.profile.clone());
        let profile = pinned_profile
            .or_else(|| call.profile.clone())
            .unwrap_or_else(|| LEGACY_PROFILE.to_owned());
        let model = pin.and_then(|pin| pin.model.clone()).unwrap_or_else(|| call.model.clone());
        return (profile, model);
    }
    if let Some(pin) = pin
        && let (Some(profile), Some(model)) = (&pin.profile, &pin.model)
    {
        return (profile.clone(), model.clone());
    }
    let (profile, model) =
        (pin.and_then(|p| p.profile.as_deref()), pin.and_then(|p| p.model.as_deref()));
    config
        .and_then(|config| config.pick(profile, model).ok())
        .map(|(profile, model)| (profile.name.clone(), model))
        .unwrap_or_else(|| (LEGACY_PROFILE.to_owned(), crate::startup::DEFAULT_MODEL.to_owned()))
}

/// The context window, in tokens, that requests to `model` of `profile` are measured against —
/// as the loop resolves it (`settings.rs`, `endpoint`): the configured window for every model,
/// else the profile's model's, else the model's known default.
pub fn context_window(config: Option<&Config>, profile: &str, model: &str) -> u64 {
    let configured = config.and_then(|config| {
        config.context.window.as_ref().map(|window| window.value).or_else(|| {
            let profile = config.profile(profile).ok()?;
            let settings = profile.model_settings(model)?;
            settings.context_window.as_ref().map(|window| window.value)
        })
    });
    configured.unwrap_or_else(|| dsh_agent::ContextConfig::for_model(model).window_tokens)
}

/// The usage view with each step's cost at the prices `config` gives (none without one), and
/// the profile, model and context window of the session's next request.
pub fn usage_result(
    mut rows: Vec<UsageRow>,
    config: Option<&Config>,
    (profile, model): (String, String),
) -> SessionUsageResult {
    let context_window = context_window(config, &profile, &model);
    let totals = usage_totals(&rows);
    let mut prices: Vec<PriceUsed> = Vec::new();
    let mut cost: Option<Option<Cost>> = None;
    for row in &mut rows {
        let (Some(usage), Some(model)) = (row.usage, row.model.clone()) else { continue };
        let price = config.and_then(|c| price_of(c, row.profile.as_deref(), &model));
        row.cost = price.as_ref().map(|price| price.cost(&usage));
        if let Some(price) = price {
            let profile = row.profile.clone().unwrap_or_else(|| LEGACY_PROFILE.to_owned());
            if !prices.iter().any(|p| p.profile == profile && p.model == model) {
                prices.push(PriceUsed { profile, model, price });
            }
        }
        cost = Some(match (cost, &row.cost) {
            (None, Some(step)) => Some(step.clone()),
            (Some(Some(sum)), Some(step)) => sum.plus(step),
            _ => None,
        });
    }
    let rows = rows.into_iter().map(|row| UsageEntry { explanation: explain(&row), row }).collect();
    SessionUsageResult {
        rows,
        totals,
        cost: cost.flatten(),
        prices,
        context_window,
        profile,
        model,
        children: Vec::new(),
        with_children: None,
    }
}

/// The profiles of a configuration, for `daemon/status`.
pub fn profile_statuses(config: &Config) -> Vec<ProfileStatus> {
    config
        .profiles
        .values()
        .map(|profile| ProfileStatus {
            name: profile.name.clone(),
            kind: profile.kind.value,
            base_url: profile.base_url.value.clone(),
            default: profile.name == config.profile.value,
            models: profile
                .models
                .iter()
                .map(|(id, model)| ModelStatus {
                    id: id.clone(),
                    context_window: model.context_window.as_ref().map(|w| w.value),
                    price: model.price.as_ref().map(|p| p.value.clone()),
                    images: model.images.as_ref().is_some_and(|images| images.value),
                })
                .collect(),
        })
        .collect()
}
