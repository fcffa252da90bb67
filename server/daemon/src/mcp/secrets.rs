//! What of an MCP server's definition is never shown — its `env` and header values, the
//! credentials, long path segments, query and fragment of its URL — and the scrub applied to
//! everything a server or its transport says before it reaches a log, a client or an error
//! (stderr lines, failures, call errors).

use dsh_config::McpTransport;

/// What of a server's definition must never be shown: env and header values, and the
/// credentials and query of its URL (errors from the HTTP stack quote the URL).
pub(super) fn secrets(transport: &McpTransport) -> Vec<String> {
    let mut secrets: Vec<String> = match transport {
        McpTransport::Stdio { env, .. } => env.values().cloned().collect(),
        McpTransport::Http { url, headers } => {
            let mut secrets: Vec<String> = headers.values().cloned().collect();
            if let Ok(url) = reqwest::Url::parse(url) {
                // Hosted servers put tokens in the path too: its long segments (short ones are
                // words like `mcp` or `servers`, which would blank out messages).
                let long = url.path().split('/').filter(|segment| segment.len() >= 12);
                secrets.extend(long.map(str::to_owned));
                secrets.push(url.username().to_owned());
                secrets.extend(url.password().map(str::to_owned));
                secrets.extend(url.query().map(str::to_owned));
                secrets.extend(url.fragment().map(str::to_owned));
            }
            secrets
        }
    };
    // Longest first, so a secret holding another is replaced whole; short values (`1`,
    // `true`) would blank out ordinary words and protect nothing.
    secrets.retain(|secret| secret.len() >= 4);
    secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
    secrets.dedup();
    secrets
}

/// `text` with every secret of the server replaced by `***`.
pub(super) fn scrub(text: String, secrets: &[String]) -> String {
    secrets.iter().fold(text, |text, secret| {
        if text.contains(secret.as_str()) { text.replace(secret.as_str(), "***") } else { text }
    })
}
