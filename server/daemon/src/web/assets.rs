//! The viewer's files, built from `web/` (TypeScript bundled by esbuild: `web/scripts/build.sh`)
//! into `web/dist/`, which is committed so that a `cargo build` needs no npm; the web test
//! script rebuilds it and fails when the committed bundle is stale.

/// One embedded file.
pub struct Asset {
    /// Its bytes.
    pub bytes: &'static [u8],
    /// Its `Content-Type`.
    pub content_type: &'static str,
}

macro_rules! asset {
    ($file:literal, $type:literal) => {
        Asset {
            bytes: include_bytes!(concat!("../../../../web/dist/", $file)),
            content_type: $type,
        }
    };
}

/// The asset served at `path`.
pub fn find(path: &str) -> Option<Asset> {
    Some(match path {
        "/" | "/index.html" => asset!("index.html", "text/html; charset=utf-8"),
        "/app.js" => asset!("app.js", "text/javascript; charset=utf-8"),
        "/app.css" => asset!("app.css", "text/css; charset=utf-8"),
        "/favicon.svg" => asset!("favicon.svg", "image/svg+xml"),
        _ => return None,
    })
}
