//! The browser's session cookie: `NONCE.MAC`, where `MAC` is HMAC-SHA256 (RFC 2104) of the
//! nonce under the bearer token. Checking one needs no state, so it survives a daemon restart;
//! replacing the token file ends every session.
//!
//! With it, each login hands the page a **tab secret**: another HMAC of the same nonce under
//! the token, with another label. Browsers send a cookie to every port of its host, so another
//! local server the browser visits receives the cookie too; the secret travels in the login
//! redirect's fragment (never sent to a server) into the page's `localStorage` (scoped to the
//! origin, port included), and the API asks for both.

use anyhow::Context as _;
use sha2::{Digest, Sha256};

/// The cookie's name.
pub const NAME: &str = "dsh_web";

/// The header a `POST` of the page carries its tab secret in.
pub const SECRET_HEADER: &str = "x-dsh-tab-secret";

/// A WebSocket handshake of the page carries its tab secret as the subprotocol `dsh.SECRET`
/// (a browser's WebSocket can set no other header), which the front echoes when it accepts.
const PROTOCOL_PREFIX: &str = "dsh.";

/// 16 random bytes from the kernel's CSPRNG, as 32 hex digits.
pub fn random_hex() -> anyhow::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut random| std::io::Read::read_exact(&mut random, &mut bytes))
        .context("reading /dev/urandom")?;
    Ok(hex(&bytes))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// HMAC-SHA256 of `message` under `key`.
fn hmac(key: &[u8], message: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.map(|k| k ^ byte);
    let inner = Sha256::new().chain_update(pad(0x36)).chain_update(message).finalize();
    Sha256::new().chain_update(pad(0x5c)).chain_update(inner).finalize().into()
}

fn mac(token: &str, nonce: &str) -> String {
    hex(&hmac(token.as_bytes(), format!("dsh web session {nonce}").as_bytes()))
}

fn tab_mac(token: &str, nonce: &str) -> String {
    hex(&hmac(token.as_bytes(), format!("dsh web tab {nonce}").as_bytes()))
}

/// What a login hands the browser.
pub struct Login {
    /// The cookie's value, `NONCE.MAC`.
    pub cookie: String,
    /// The tab secret of the same nonce (64 hex digits), for the page's `localStorage`.
    pub secret: String,
}

/// A new login: a fresh nonce, its cookie and its tab secret.
pub fn issue(token: &str) -> anyhow::Result<Login> {
    let nonce = random_hex()?;
    let mac = mac(token, &nonce);
    Ok(Login { cookie: format!("{nonce}.{mac}"), secret: tab_mac(token, &nonce) })
}

/// The nonce of `value` when it is a cookie issued under `token`.
fn nonce_of<'a>(token: &str, value: &'a str) -> Option<&'a str> {
    let (nonce, given) = value.split_once('.')?;
    if nonce.len() != 32 || !nonce.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return None;
    }
    crate::network::same(given.as_bytes(), mac(token, nonce).as_bytes()).then_some(nonce)
}

/// Whether `value` is a cookie issued under `token`.
pub fn valid(token: &str, value: &str) -> bool {
    nonce_of(token, value).is_some()
}

/// Whether `secret` is the tab secret of the login that issued the cookie `value`.
pub fn secret_matches(token: &str, value: &str, secret: &str) -> bool {
    nonce_of(token, value).is_some_and(|nonce| {
        crate::network::same(secret.as_bytes(), tab_mac(token, nonce).as_bytes())
    })
}

/// The values of the cookies named [`NAME`] in a `Cookie` header: every one, since another
/// server on the host can set one of that name too (cookies are not scoped by port).
pub fn in_header(header: &str) -> impl Iterator<Item = &str> {
    header.split(';').filter_map(|pair| {
        let (name, value) = pair.trim().split_once('=')?;
        (name == NAME).then_some(value)
    })
}

/// The subprotocol in a `Sec-WebSocket-Protocol` header that carries a tab secret, if any.
pub fn protocol_from_header(header: &str) -> Option<&str> {
    header.split(',').map(str::trim).find(|protocol| protocol.starts_with(PROTOCOL_PREFIX))
}

/// The tab secret a subprotocol found by [`protocol_from_header`] carries.
pub fn secret_of_protocol(protocol: &str) -> &str {
    protocol.strip_prefix(PROTOCOL_PREFIX).unwrap_or(protocol)
}

/// The `Set-Cookie` header of a new session: HttpOnly, SameSite=Strict, the whole site, and
/// gone when the browser closes.
pub fn set_cookie(value: &str) -> String {
    format!("{NAME}={value}; HttpOnly; SameSite=Strict; Path=/")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]

    use super::*;

    #[test]
    fn hmac_matches_rfc_4231_test_case_2() {
        let mac = hmac(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(hex(&mac), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    }

    #[test]
    fn a_long_key_is_hashed_first_as_rfc_4231_test_case_6_says() {
        let key = [0xaau8; 131];
        let mac = hmac(&key, b"Test Using Larger Than Block-Size Key - Hash Key First");
        assert_eq!(hex(&mac), "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    }

    #[test]
    fn a_tab_secret_goes_with_its_own_cookie_only() {
        let token = "0123456789abcdef0123456789abcdef";
        let first = issue(token).expect("a login");
        let second = issue(token).expect("a login");
        assert_eq!(first.secret.len(), 64);
        assert!(secret_matches(token, &first.cookie, &first.secret));
        assert!(secret_matches(token, &second.cookie, &second.secret));
        assert!(!secret_matches(token, &first.cookie, &second.secret), "another login's secret");
        assert!(!secret_matches("another token, just as long....", &first.cookie, &first.secret));
        assert!(!secret_matches(token, &first.cookie, ""));
        assert!(!secret_matches(token, "", &first.secret));
        let (nonce, mac) = first.cookie.split_once('.').expect("nonce.mac");
        assert_ne!(first.secret, mac, "the secret is not the cookie's MAC");
        assert!(!secret_matches(token, &first.cookie, mac), "the cookie's MAC is no secret");
        assert!(!secret_matches(token, &format!("{nonce}.{}", first.secret), &first.secret));
    }

    #[test]
    fn a_cookie_is_valid_under_its_token_only_and_untampered() {
        let token = "0123456789abcdef0123456789abcdef";
        let cookie = issue(token).expect("a cookie").cookie;
        assert!(valid(token, &cookie));
        assert!(!valid("another token, just as long....", &cookie));
        let (nonce, mac) = cookie.split_once('.').expect("nonce.mac");
        let other_nonce =
            format!("{}{}", &nonce[..31], if nonce.ends_with('0') { '1' } else { '0' });
        assert!(!valid(token, &format!("{other_nonce}.{mac}")));
        assert!(!valid(token, nonce));
        assert!(!valid(token, ""));
        assert_ne!(issue(token).expect("a cookie").cookie, cookie, "each login its own nonce");
    }

    #[test]
    fn the_cookie_is_found_among_others() {
        assert_eq!(in_header("a=1; dsh_web=x.y; b=2").collect::<Vec<_>>(), ["x.y"]);
        assert_eq!(
            in_header("dsh_web=tossed; a=1; dsh_web=x.y").collect::<Vec<_>>(),
            ["tossed", "x.y"]
        );
        assert_eq!(in_header("dsh_webx=1; xdsh_web=2").next(), None);
        assert_eq!(protocol_from_header("chat, dsh.abc ,x"), Some("dsh.abc"));
        assert_eq!(secret_of_protocol("dsh.abc"), "abc");
        assert_eq!(protocol_from_header("chat, dshabc"), None);
        let header = set_cookie("v");
        for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
            assert!(header.contains(attribute), "{header}");
        }
    }
}
