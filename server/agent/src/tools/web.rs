//! `web_fetch`: an HTTP(S) GET of one URL, its body returned as Markdown, plain text or as is.
//!
//! The rules, in the order they apply:
//! - With the session's network off (the sandbox's network rule) the call is refused, unless
//!   the user's configuration allows it (`[web] allow = true`).
//! - Only `http://` and `https://` URLs, without a user name or password.
//! - The host is resolved here, once per hop, and every address it resolves to is checked
//!   (`address.rs`): loopback, link-local, private and the other non-public ranges are refused
//!   unless the host is listed in `[web] allow_hosts`. The connection goes to the addresses
//!   checked — the client's resolver knows only them — so a second DNS answer cannot move it
//!   (DNS rebinding). No proxy from the environment is used.
//! - Redirects are followed here, at most [`MAX_REDIRECTS`], each hop checked like the first.
//! - A connect timeout, a read timeout (between chunks) and an overall deadline for the whole
//!   call (a server that trickles bytes forever ends there); the body is read up to the size
//!   cap and cut there, which the result says.
//! - The request carries no provider key and no configured header: a fresh client, with only
//!   a User-Agent naming dsh and an `Accept` header.
//!
//! The result — final URL, status, content type, notes (cut, redirected, bytes replaced), then
//! the content — is the tool result, logged like any other: nothing else about the fetch
//! reaches the model.

pub mod address;
pub mod convert;

#[cfg(test)]
mod tests;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use serde::Deserialize;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Tool, ToolOutput, parse};

/// The most redirects one call follows.
pub const MAX_REDIRECTS: usize = 5;

/// The most bytes of content one result holds (after conversion); the rest is cut, said.
pub const CONTENT_CAP_BYTES: usize = 100_000;

/// The largest body cap a configuration may set.
pub const MAX_BODY_CAP: u64 = convert::MAX_CONVERT_BYTES as u64;

/// The User-Agent of every request.
const USER_AGENT: &str = concat!("dsh/", env!("CARGO_PKG_VERSION"), " (web_fetch)");

/// What the configuration says about `web_fetch` (`[web]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebSettings {
    /// Fetch even while the session's network is off (`[web] allow`, the user's file only).
    pub allow_offline: bool,
    /// Hosts that may be on loopback, link-local or private addresses (`[web] allow_hosts`).
    pub allow_hosts: Vec<String>,
    /// The overall deadline of one call, redirects included.
    pub timeout: Duration,
    /// The connect timeout of each hop.
    pub connect_timeout: Duration,
    /// The longest wait for the next bytes of a response.
    pub read_timeout: Duration,
    /// The most body bytes read; a longer body is cut.
    pub max_bytes: u64,
}

impl Default for WebSettings {
    fn default() -> WebSettings {
        WebSettings {
            allow_offline: false,
            allow_hosts: Vec::new(),
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(15),
            max_bytes: 2 << 20,
        }
    }
}

/// What the model asks for.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// HTML converted to Markdown (other text as is).
    #[default]
    Markdown,
    /// HTML stripped to its text (other text as is).
    Text,
    /// The body as it came, decoded to text.
    Raw,
}

impl Format {
    fn name(self) -> &'static str {
        match self {
            Format::Markdown => "markdown",
            Format::Text => "text",
            Format::Raw => "raw",
        }
    }
}

/// The call's arguments, as the schema says: unknown fields are refused.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Arguments {
    url: String,
    #[serde(default)]
    format: Format,
}

/// One response, read.
struct Fetched {
    url: Url,
    status: reqwest::StatusCode,
    content_type: Option<String>,
    body: Vec<u8>,
    /// Whether the body was longer than the cap (and cut there).
    cut: bool,
    /// The URLs redirected from, in order.
    redirects: Vec<Url>,
}

/// Runs a `web_fetch` call. `network` says whether the session's network is on.
pub(crate) async fn fetch(
    settings: &WebSettings,
    network: bool,
    arguments: &str,
    cancel: &CancellationToken,
) -> ToolOutput {
    let arguments = match parse::<Arguments>(Tool::WebFetch, arguments) {
        Ok(arguments) => arguments,
        Err(error) => return ToolOutput::error(error),
    };
    if !network && !settings.allow_offline {
        return ToolOutput::error(
            "web_fetch refused: the network is off for this session (the sandbox's network \
             rule). The user can allow web_fetch with `[web] allow = true` in their own \
             configuration file, or give the session the network."
                .to_owned(),
        );
    }
    let url = match Url::parse(arguments.url.trim()) {
        Ok(url) => url,
        Err(error) => return ToolOutput::error(format!("web_fetch refused: not a URL ({error})")),
    };
    if let Err(why) = address::check_url(&url) {
        return ToolOutput::error(format!("web_fetch refused: {why}"));
    }
    let deadline = Instant::now() + settings.timeout;
    let fetched = tokio::select! {
        biased;
        () = cancel.cancelled() => return ToolOutput::error("web_fetch was cancelled".to_owned()),
        fetched = tokio::time::timeout_at(deadline, get(settings, url, deadline)) => fetched,
    };
    match fetched {
        Ok(Ok(fetched)) => {
            let format = arguments.format;
            // Conversion is CPU work on up to the body cap: off the async threads.
            match tokio::task::spawn_blocking(move || render(&fetched, format)).await {
                Ok(output) => output,
                Err(error) => {
                    tracing::error!(%error, "web_fetch conversion failed");
                    ToolOutput::error("web_fetch failed with an internal error".to_owned())
                }
            }
        }
        Ok(Err(error)) => ToolOutput::error(format!("web_fetch failed: {error}")),
        Err(_) => ToolOutput::error(format!(
            "web_fetch failed: no complete response within {} s (the overall deadline)",
            settings.timeout.as_secs_f64()
        )),
    }
}

/// GETs `url`, following redirects by hand, each hop checked.
async fn get(settings: &WebSettings, mut url: Url, deadline: Instant) -> Result<Fetched, String> {
    let mut redirects = Vec::new();
    loop {
        address::check_url(&url).map_err(|why| format!("refused ({}): {why}", shown(&url)))?;
        let addresses = resolve(&url, settings).await?;
        let client = client(&url, &addresses, settings, deadline)?;
        let request = client.get(url.clone()).header(
            reqwest::header::ACCEPT,
            "text/html, text/markdown, text/plain;q=0.9, */*;q=0.8",
        );
        let mut response = request.send().await.map_err(|error| describe(&url, &error))?;
        let status = response.status();
        if status.is_redirection()
            && let Some(location) = response.headers().get(reqwest::header::LOCATION)
        {
            if redirects.len() == MAX_REDIRECTS {
                return Err(format!(
                    "more than {MAX_REDIRECTS} redirects (the last to {})",
                    shown(&url)
                ));
            }
            let location = location.to_str().map_err(|_| {
                format!("{} redirected to a location that is not text", shown(&url))
            })?;
            let next = url.join(location).map_err(|error| {
                format!("{} redirected to a bad location ({error})", shown(&url))
            })?;
            redirects.push(std::mem::replace(&mut url, next));
            continue;
        }
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        let cap = usize::try_from(settings.max_bytes.min(MAX_BODY_CAP)).unwrap_or(usize::MAX);
        let mut body = Vec::new();
        let mut cut = false;
        while let Some(chunk) = response.chunk().await.map_err(|error| describe(&url, &error))? {
            let room = cap - body.len();
            if chunk.len() > room {
                body.extend_from_slice(&chunk[..room]);
                cut = true;
                break;
            }
            body.extend_from_slice(&chunk);
        }
        return Ok(Fetched { url, status, content_type, body, cut, redirects });
    }
}

/// The addresses `url`'s host resolves to, every one checked; an address literal is its own.
async fn resolve(url: &Url, settings: &WebSettings) -> Result<Vec<SocketAddr>, String> {
    let host = url.host_str().unwrap_or_default();
    let port = url.port_or_known_default().unwrap_or(80);
    let addresses: Vec<SocketAddr> = match address::bare_host(host).parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((host, port))
            .await
            .map_err(|error| format!("cannot resolve {host}: {error}"))?
            .collect(),
    };
    if addresses.is_empty() {
        return Err(format!("{host} resolves to no address"));
    }
    if !address::allowed(host, &settings.allow_hosts)
        && let Some((ip, why)) = addresses
            .iter()
            .find_map(|socket| address::non_public(socket.ip()).map(|why| (socket.ip(), why)))
    {
        let resolved = if host == ip.to_string() || address::bare_host(host) == ip.to_string() {
            String::new()
        } else {
            format!(" resolves to {ip}, which")
        };
        return Err(format!(
            "refused: {host}{resolved} is {why}; web_fetch reaches only public addresses \
             unless the host is listed in `[web] allow_hosts` of the user's configuration"
        ));
    }
    Ok(addresses)
}

/// A client for one hop: no proxy, no redirects, and a resolver that knows only the checked
/// addresses of this hop's host (any other name fails).
fn client(
    url: &Url,
    addresses: &[SocketAddr],
    settings: &WebSettings,
    deadline: Instant,
) -> Result<reqwest::Client, String> {
    // reqwest is built with `rustls-no-provider`: the ring provider, installed once per
    // process (an error only means one is installed already).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let host = url.host_str().unwrap_or_default().to_ascii_lowercase();
    let resolver = Checked { host, addresses: addresses.to_vec() };
    let remaining = deadline.saturating_duration_since(Instant::now());
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .referer(false)
        .user_agent(USER_AGENT)
        .connect_timeout(settings.connect_timeout)
        .read_timeout(settings.read_timeout)
        .timeout(remaining)
        .dns_resolver(Arc::new(resolver))
        .build()
        .map_err(|error| format!("cannot build the HTTP client: {error}"))
}

/// The resolver of one hop: the host's checked addresses, nothing else.
struct Checked {
    host: String,
    addresses: Vec<SocketAddr>,
}

impl Resolve for Checked {
    fn resolve(&self, name: Name) -> Resolving {
        let answer = if name.as_str().eq_ignore_ascii_case(&self.host) {
            Ok(Box::new(self.addresses.clone().into_iter()) as Addrs)
        } else {
            Err(format!("{} was not checked by web_fetch", name.as_str()).into())
        };
        Box::pin(std::future::ready(answer))
    }
}

/// A URL as shown in messages: without its query and fragment (they may hold tokens, and the
/// model has the URL it asked for).
fn shown(url: &Url) -> String {
    let mut shown = url.clone();
    shown.set_query(None);
    shown.set_fragment(None);
    shown.to_string()
}

/// A transport error in words, with its causes (reqwest's own text says little).
fn describe(url: &Url, error: &reqwest::Error) -> String {
    let what = if error.is_timeout() {
        "timed out"
    } else if error.is_connect() {
        "could not connect"
    } else {
        "request failed"
    };
    let mut causes = Vec::new();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        causes.push(cause.to_string());
        source = cause.source();
    }
    causes.dedup();
    let causes = if causes.is_empty() { String::new() } else { format!(": {}", causes.join(": ")) };
    format!("{} {what}{causes}", shown(url))
}

/// The media type of a `Content-Type` (lower case, without parameters).
fn media_type(content_type: Option<&str>) -> Option<String> {
    let media = content_type?.split(';').next()?.trim().to_ascii_lowercase();
    (!media.is_empty()).then_some(media)
}

/// Whether a media type is text the model can read (HTML, text, JSON, XML, JavaScript…).
fn is_text(media: &str) -> bool {
    media.starts_with("text/")
        || media.ends_with("+json")
        || media.ends_with("+xml")
        || matches!(
            media,
            "application/json"
                | "application/xml"
                | "application/javascript"
                | "application/x-javascript"
                | "application/ecmascript"
                | "application/toml"
                | "application/yaml"
                | "application/x-yaml"
                | "application/x-sh"
        )
}

/// The result the model sees for a response.
fn render(fetched: &Fetched, format: Format) -> ToolOutput {
    let media = media_type(fetched.content_type.as_deref());
    let html = match media.as_deref() {
        Some("text/html" | "application/xhtml+xml") => true,
        Some(_) => false,
        // No content type: HTML if it starts like HTML.
        None => {
            let start = String::from_utf8_lossy(&fetched.body[..fetched.body.len().min(512)])
                .trim_start()
                .to_ascii_lowercase();
            start.starts_with("<!doctype html") || start.starts_with("<html")
        }
    };
    let mut head = vec![
        format!("URL: {}", fetched.url),
        format!("Status: {}", fetched.status),
        format!("Content-Type: {}", fetched.content_type.as_deref().unwrap_or("(none)")),
    ];
    if !fetched.redirects.is_empty() {
        let from: Vec<String> = fetched.redirects.iter().map(Url::to_string).collect();
        head.push(format!("Redirected from: {}", from.join(" → ")));
    }
    let mut notes = Vec::new();
    if fetched.cut {
        notes.push(format!(
            "the body was cut at {} bytes (the size cap); the rest was not read",
            fetched.body.len()
        ));
    }
    let is_error = !fetched.status.is_success();
    let binary = match media.as_deref() {
        Some(media) => !is_text(media) && !html,
        None => fetched.body.contains(&0),
    };
    if binary && format != Format::Raw {
        notes.push(format!(
            "the body ({} bytes of {}) is not text: not shown; format \"raw\" shows it decoded \
             as UTF-8 with replacement characters",
            fetched.body.len(),
            media.as_deref().unwrap_or("unknown type")
        ));
        return finish(head, notes, String::new(), is_error);
    }
    let decoded = convert::decode(&fetched.body, fetched.content_type.as_deref(), html);
    if decoded.replaced {
        notes.push(format!(
            "bytes that are not valid {} were replaced with U+FFFD",
            decoded.encoding
        ));
    } else if decoded.encoding != "UTF-8" {
        notes.push(format!("decoded from {}", decoded.encoding));
    }
    let content = match (format, html) {
        (Format::Markdown, true) => {
            let converted = convert::html_to_markdown(&decoded.text);
            notes.extend(converted.notes);
            if converted.text.trim().is_empty() {
                notes.push(
                    "the page's Markdown is empty: the HTML holds no text (it may be built by \
                     JavaScript); format \"raw\" shows the HTML itself"
                        .to_owned(),
                );
            }
            converted.text
        }
        (Format::Text, true) => {
            let converted = convert::html_to_text(&decoded.text);
            notes.extend(converted.notes);
            if converted.text.trim().is_empty() {
                notes.push("the page has no text; format \"raw\" shows the HTML itself".to_owned());
            }
            converted.text
        }
        (Format::Raw, _) | (_, false) => {
            if format != Format::Raw && !html {
                notes.push(format!(
                    "not HTML: shown as it came (format \"{}\" applies to HTML)",
                    format.name()
                ));
            }
            if decoded.text.is_empty() {
                notes.push("the body is empty".to_owned());
            }
            decoded.text
        }
    };
    finish(head, notes, content, is_error)
}

/// The result's text: the head lines, the notes, a blank line, the content (cut to
/// [`CONTENT_CAP_BYTES`], said).
fn finish(
    head: Vec<String>,
    mut notes: Vec<String>,
    mut content: String,
    is_error: bool,
) -> ToolOutput {
    if content.len() > CONTENT_CAP_BYTES {
        let total = content.len();
        let mut end = CONTENT_CAP_BYTES;
        while !content.is_char_boundary(end) {
            end -= 1;
        }
        content.truncate(end);
        notes.push(format!("the content was cut at {end} of {total} bytes (the tool's cap)"));
    }
    let mut text = head.join("\n");
    for note in notes {
        text.push_str("\nNote: ");
        text.push_str(&note);
    }
    text.push_str("\n\n");
    text.push_str(&content);
    if is_error { ToolOutput::error(text) } else { ToolOutput::success(text) }
}
