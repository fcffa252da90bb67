//! The front's HTTP answers for the browser: the login exchange, the embedded assets, the
//! pages that say why a browser was refused, and the headers every answer carries.

use http::header::{self, HeaderValue};
use jsonrpsee::server::{HttpBody, HttpResponse};

use super::{Refused, Web, assets, cookie};

/// The headers of every answer of the front: a policy that allows scripts, styles and
/// connections from the page's own origin only (no inline script), no framing, no sniffing,
/// no referrer (a login URL holds a code), no caching.
pub(crate) fn secure(response: &mut HttpResponse, own_origin: Option<&str>) {
    let connect = own_origin
        .and_then(|origin| origin.strip_prefix("http://"))
        .map_or_else(String::new, |host| format!(" ws://{host}"));
    let policy = format!(
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         connect-src 'self'{connect}; object-src 'none'; base-uri 'none'; form-action 'self'; \
         frame-ancestors 'none'"
    );
    let headers = response.headers_mut();
    if let Ok(policy) = HeaderValue::from_str(&policy) {
        headers.insert(header::CONTENT_SECURITY_POLICY, policy);
    }
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

fn answer(status: u16, content_type: &'static str, body: impl Into<HttpBody>) -> HttpResponse {
    let mut response = HttpResponse::new(body.into());
    *response.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::OK);
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// A page that explains itself: plain HTML, no script and no stylesheet (a browser that is not
/// logged in gets none of the page's files).
pub(crate) fn page(status: u16, title: &str, text: &str) -> HttpResponse {
    let body = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <meta name=\"color-scheme\" content=\"light dark\"><title>dsh · {title}</title></head>\
         <body><main><h1>{title}</h1><p>{text}</p>\
         <p>Run <code>dsh web</code> in a terminal for a new login link.</p></main></body></html>\n"
    );
    answer(status, "text/html; charset=utf-8", body)
}

/// The answer to a request that is neither authorized by the token nor by the cookie.
pub(crate) fn not_logged_in(wants_page: bool) -> HttpResponse {
    if wants_page {
        return page(401, "Not logged in", "This browser has no dsh session.");
    }
    answer(401, "text/plain; charset=utf-8", "missing or wrong bearer token or session cookie\n")
}

/// What the login redirect's fragment starts with, before the tab secret (`web/src/login.ts`).
const SECRET_FRAGMENT: &str = "tab=";

/// `GET /login?code=…[&workspace=…]`: a good code becomes a cookie and a redirect to the page
/// with the tab secret in its fragment; any other gets a page saying why.
pub(crate) fn login(web: &Web, token: &str, query: Option<&str>) -> HttpResponse {
    let parameter = |name: &str| {
        query?.split('&').find_map(|pair| {
            let (key, value) = pair.split_once('=')?;
            (key == name).then_some(value)
        })
    };
    let Some(code) = parameter("code") else {
        return page(400, "No login code", "This address needs the login code dsh web prints.");
    };
    match web.redeem(code) {
        Ok(()) => {}
        Err(Refused::Unknown) => {
            return page(
                403,
                "Login link already used",
                "This login link was already used, or it is not one this daemon made: \
                 each link works once.",
            );
        }
        Err(Refused::Expired) => {
            return page(
                403,
                "Login link expired",
                &format!(
                    "This login link is older than {} minutes.",
                    super::CODE_LIFETIME.as_secs() / 60
                ),
            );
        }
    }
    let Ok(login) = cookie::issue(token) else {
        return page(500, "Login failed", "The daemon could not read random bytes for a session.");
    };
    // The workspace goes on to the page as given (percent-encoded by `daemon/web`); anything
    // else in it is dropped rather than put into a header. The tab secret goes in the
    // fragment, which the browser keeps to itself: the page moves it to its storage.
    let location = match parameter("workspace") {
        Some(workspace) if workspace.bytes().all(is_url_safe) => format!("/?workspace={workspace}"),
        _ => "/".to_owned(),
    };
    let location = format!("{location}#{SECRET_FRAGMENT}{}", login.secret);
    let mut response = answer(303, "text/plain; charset=utf-8", "logged in\n");
    let headers = response.headers_mut();
    if let (Ok(location), Ok(set)) = (
        HeaderValue::from_str(&location),
        HeaderValue::from_str(&cookie::set_cookie(&login.cookie)),
    ) {
        headers.insert(header::LOCATION, location);
        headers.insert(header::SET_COOKIE, set);
    }
    response
}

fn is_url_safe(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"-._~%/".contains(&byte)
}

/// Percent-encodes everything but unreserved characters and `/`.
pub(crate) fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|byte| {
            if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
                char::from(byte).to_string()
            } else {
                format!("%{byte:02X}")
            }
        })
        .collect()
}

/// An embedded asset, or a 404 page.
pub(crate) fn asset(path: &str) -> HttpResponse {
    match assets::find(path) {
        Some(asset) => answer(200, asset.content_type, HttpBody::from(asset.bytes.to_vec())),
        None => page(404, "Not found", "There is no such page."),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]

    use super::*;

    #[test]
    fn percent_encoding_keeps_paths_readable_and_escapes_the_rest() {
        assert_eq!(percent_encode("/tmp/a b&c=d?é"), "/tmp/a%20b%26c%3Dd%3F%C3%A9");
        assert!(percent_encode("/x y\r\n").bytes().all(is_url_safe));
    }

    #[test]
    fn a_code_works_once_and_a_second_use_gets_a_page_that_says_so() {
        let web = Web::default();
        let code = web.mint().expect("a code");
        let token = "0123456789abcdef0123456789abcdef";
        let first = login(&web, token, Some(&format!("code={code}&workspace=/tmp/w%20x")));
        assert_eq!(first.status(), 303);
        let location = first.headers()[header::LOCATION].to_str().expect("ASCII");
        let (path, secret) = location.split_once("#tab=").expect("the secret in the fragment");
        assert_eq!(path, "/?workspace=/tmp/w%20x");
        let set = first.headers()[header::SET_COOKIE].to_str().expect("ASCII");
        let value = cookie::in_header(set.split(';').next().expect("a pair")).next().expect("ours");
        assert!(cookie::valid(token, value));
        assert!(cookie::secret_matches(token, value, secret));
        assert!(!set.contains(secret), "the secret is not in the cookie");
        let again = login(&web, token, Some(&format!("code={code}")));
        assert_eq!(again.status(), 403);
        assert!(again.headers().get(header::SET_COOKIE).is_none());
        assert_eq!(login(&web, token, None).status(), 400);
        // A workspace that would not be a safe header value is dropped.
        let code = web.mint().expect("a code");
        let odd = login(&web, token, Some(&format!("code={code}&workspace=/a\"b")));
        assert!(odd.headers()[header::LOCATION].to_str().expect("ASCII").starts_with("/#tab="));
    }
}
