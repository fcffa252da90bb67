//! Where `web_fetch` may go: the URL rules (http or https, no credentials, a host) and the
//! address rules — an address on loopback, link-local (the cloud metadata endpoint
//! 169.254.169.254 among them), private (RFC 1918, IPv6 unique local), shared (CGNAT),
//! unspecified, broadcast, multicast or documentation ranges, an IPv4-mapped, -translated or
//! 6to4 IPv6 form of one, a Teredo tunnel or the local-use NAT64 prefix, is refused unless its
//! host is listed in `[web] allow_hosts`. Pure
//! functions: the resolving and connecting are the caller's.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use reqwest::Url;

/// Why an address is not on the public internet, or `None` when it is.
pub fn non_public(address: IpAddr) -> Option<&'static str> {
    match address {
        IpAddr::V4(v4) => non_public_v4(v4),
        IpAddr::V6(v6) => {
            // The IPv4 an IPv6 form names (mapped `::ffff:a.b.c.d`, the NAT64 well-known prefix
            // `64:ff9b::/96`) is judged as that IPv4 address.
            if let Some(v4) = v6.to_ipv4_mapped() {
                return non_public_v4(v4);
            }
            let segments = v6.segments();
            if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                let [a, b, c, d] = v6.octets()[12..] else { return Some("an invalid address") };
                return non_public_v4(Ipv4Addr::new(a, b, c, d));
            }
            // 6to4 `2002:a.b.c.d::/48` reaches the IPv4 address it embeds.
            if segments[0] == 0x2002 {
                let [a, b, c, d] = v6.octets()[2..6] else { return Some("an invalid address") };
                return non_public_v4(Ipv4Addr::new(a, b, c, d));
            }
            non_public_v6(v6)
        }
    }
}

fn non_public_v4(address: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = address.octets();
    if address.is_loopback() {
        Some("a loopback address")
    } else if address.is_unspecified() || a == 0 {
        Some("an unspecified address")
    } else if address.is_link_local() {
        Some("a link-local address (the cloud metadata endpoint is one)")
    } else if address.is_private() {
        Some("a private address")
    } else if a == 100 && (64..128).contains(&b) {
        Some("a shared (CGNAT) address")
    } else if address.is_broadcast() || a >= 240 {
        Some("a reserved address")
    } else if address.is_multicast() {
        Some("a multicast address")
    } else if address.is_documentation()
        || (a == 192 && b == 0)
        || (a == 198 && (18..20).contains(&b))
    {
        Some("a special-purpose address")
    } else {
        None
    }
}

fn non_public_v6(address: Ipv6Addr) -> Option<&'static str> {
    let first = address.segments()[0];
    if address.is_loopback() {
        Some("a loopback address")
    } else if address.is_unspecified() {
        Some("an unspecified address")
    } else if first & 0xffc0 == 0xfe80 {
        Some("a link-local address")
    } else if first & 0xffc0 == 0xfec0 {
        Some("a site-local address")
    } else if first & 0xfe00 == 0xfc00 {
        Some("a private (unique local) address")
    } else if address.is_multicast() {
        Some("a multicast address")
    } else if first == 0x2001 && address.segments()[1] == 0x0db8 {
        Some("a documentation address")
    } else if first == 0x2001 && address.segments()[1] == 0 {
        // Teredo: a tunnel whose far end is an IPv4 address, obfuscated — not judged here.
        Some("a tunnel (Teredo) address")
    } else if address.segments()[..3] == [0x64, 0xff9b, 1] {
        // The NAT64 local-use prefix `64:ff9b:1::/48` translates to a network's own addresses.
        Some("a local NAT64 address")
    } else if address.segments()[..6] == [0; 6] {
        // IPv4-compatible `::a.b.c.d` (deprecated) and the rest of `::/96`.
        Some("a reserved address")
    } else {
        None
    }
}

/// A URL `web_fetch` may ask for, or why not. The refusal never repeats the URL's password.
pub fn check_url(url: &Url) -> Result<(), String> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "the scheme `{}` is not fetched: only http:// and https:// URLs are",
            url.scheme()
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("a URL with a user name or password is refused (credentials would be sent \
                    to the server and kept in the session's log)"
            .to_owned());
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("the URL has no host".to_owned());
    }
    Ok(())
}

/// `host` (as a URL writes it: lower case, IPv6 in brackets) without brackets.
pub fn bare_host(host: &str) -> &str {
    host.strip_prefix('[').and_then(|host| host.strip_suffix(']')).unwrap_or(host)
}

/// Whether `host` is listed in `allow_hosts` (names compared without case and without a final
/// dot; IPv6 addresses with or without brackets).
pub fn allowed(host: &str, allow_hosts: &[String]) -> bool {
    let normal = |host: &str| bare_host(host.trim()).trim_end_matches('.').to_ascii_lowercase();
    let host = normal(host);
    allow_hosts.iter().any(|listed| normal(listed) == host)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn judge(address: &str) -> Option<&'static str> {
        non_public(address.parse().unwrap_or_else(|_| panic!("{address} is an address")))
    }

    #[test]
    fn private_and_special_addresses_are_refused() {
        for address in [
            "127.0.0.1",
            "127.8.9.10",
            "0.0.0.0",
            "0.1.2.3",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.254",
            "224.0.0.1",
            "255.255.255.255",
            "240.0.0.1",
            "192.0.0.8",
            "198.18.0.1",
            "::1",
            "::",
            "fe80::1",
            "fc00::1",
            "fd12:3456::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::ffff:10.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b:1::a00:1",
            "2002:7f00:1::1",
            "2002:a9fe:a9fe::",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "::127.0.0.1",
            "2001:db8::1",
        ] {
            assert!(judge(address).is_some(), "{address} should be refused");
        }
    }

    #[test]
    fn public_addresses_pass() {
        for address in [
            "93.184.215.14",
            "1.1.1.1",
            "8.8.8.8",
            "100.128.0.1",
            "172.32.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "2002:808:808::1",
        ] {
            assert_eq!(judge(address), None, "{address} should pass");
        }
    }

    #[test]
    fn the_metadata_endpoint_is_named_in_the_refusal() {
        assert!(judge("169.254.169.254").is_some_and(|why| why.contains("metadata")));
    }

    #[test]
    fn urls_need_http_a_host_and_no_credentials() {
        let check = |url: &str| check_url(&Url::parse(url).unwrap_or_else(|_| panic!("{url}")));
        assert!(check("https://example.com/a?b").is_ok());
        assert!(check("http://127.0.0.1:8080/").is_ok());
        assert!(check("file:///etc/passwd").is_err_and(|e| e.contains("`file`")));
        assert!(check("ftp://example.com/").is_err());
        let refused = check("https://user:hunter2@example.com/").unwrap_err();
        assert!(refused.contains("password") && !refused.contains("hunter2"), "{refused}");
        assert!(check("https://user@example.com/").is_err());
    }

    #[test]
    fn allow_hosts_match_names_and_addresses() {
        let list = vec!["LocalHost".to_owned(), "[::1]".to_owned(), "10.0.0.5".to_owned()];
        assert!(allowed("localhost", &list));
        assert!(allowed("localhost.", &list));
        assert!(allowed("[::1]", &list));
        assert!(allowed("10.0.0.5", &list));
        assert!(!allowed("127.0.0.1", &list));
        assert!(!allowed("evil-localhost", &list));
    }
}
