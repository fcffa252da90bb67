//! The browser's session cookie: `NONCE.MAC`, where `MAC` is HMAC-SHA256 (RFC 2104) of the
//! nonce under the bearer token. Checking one needs no state, so it survives a daemon restart;
//! replacing the token file ends every session.

use anyhow::Context as _;
use sha2::{Digest, Sha256};

/// The cookie's name.
pub const NAME: &str = "dsh_web";

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

/// A new cookie value.
pub fn issue(token: &str) -> anyhow::Result<String> {
    let nonce = random_hex()?;
    let mac = mac(token, &nonce);
    Ok(format!("{nonce}.{mac}"))
}

/// Whether `value` is a cookie issued under `token`.
pub fn valid(token: &str, value: &str) -> bool {
    let Some((nonce, given)) = value.split_once('.') else { return false };
    if nonce.len() != 32 || !nonce.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return false;
    }
    crate::network::same(given.as_bytes(), mac(token, nonce).as_bytes())
}

/// The value of the cookie named [`NAME`] in a `Cookie` header, if any.
pub fn from_header(header: &str) -> Option<&str> {
    header.split(';').find_map(|pair| {
        let (name, value) = pair.trim().split_once('=')?;
        (name == NAME).then_some(value)
    })
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
    fn a_cookie_is_valid_under_its_token_only_and_untampered() {
        let token = "0123456789abcdef0123456789abcdef";
        let cookie = issue(token).expect("a cookie");
        assert!(valid(token, &cookie));
        assert!(!valid("another token, just as long....", &cookie));
        let (nonce, mac) = cookie.split_once('.').expect("nonce.mac");
        let other_nonce =
            format!("{}{}", &nonce[..31], if nonce.ends_with('0') { '1' } else { '0' });
        assert!(!valid(token, &format!("{other_nonce}.{mac}")));
        assert!(!valid(token, nonce));
        assert!(!valid(token, ""));
        assert_ne!(issue(token).expect("a cookie"), cookie, "each login its own nonce");
    }

    #[test]
    fn the_cookie_is_found_among_others() {
        assert_eq!(from_header("a=1; dsh_web=x.y; b=2"), Some("x.y"));
        assert_eq!(from_header("dsh_webx=1; xdsh_web=2"), None);
        let header = set_cookie("v");
        for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
            assert!(header.contains(attribute), "{header}");
        }
    }
}
