//! The browser viewer's side of the network front (`dsh web`, the `daemon/web` method).
//!
//! The page is one more protocol client over the front's WebSocket; what this module adds is
//! how a browser gets in, and the page's own files:
//! - **Starting the front.** A daemon started with `--listen` has it already; otherwise
//!   `daemon/web` starts it on loopback, on the port the last one used (recorded in the home,
//!   so a tab left open reconnects to a restarted daemon's front) or, if that is taken, one the
//!   system picks.
//! - **Login.** `daemon/web` mints a one-time code ([`Web::mint`]), valid for
//!   [`WEB_CODE_SECONDS`]; `GET /login?code=…` redeems it once for a session cookie,
//!   HttpOnly and SameSite=Strict ([`cookie`]). A stale or reused code gets a page saying so.
//! - **The cookie** is a random nonce and its HMAC-SHA256 under the bearer token: it holds no
//!   state in the daemon, survives a restart, and stops working when the token file is
//!   replaced. It opens the page's files; the API also wants the page's own origin (another
//!   local server's page is same-site for cookies) and the login's tab secret, which the
//!   redirect hands the page in its fragment (other local servers receive the cookie too).
//! - **Assets** ([`assets`]) are the bundle built from `web/` and embedded in the binary, served
//!   with a Content-Security-Policy that allows no inline script and no other origin.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use dsh_protocol::{DaemonWebParams, DaemonWebResult, WEB_CODE_SECONDS};
use jsonrpsee::server::ServerHandle;

use crate::daemon::Daemon;
use crate::error::{ApiError, ApiResult};
use crate::network::WebSockets;

pub mod assets;
pub mod cookie;
pub(crate) mod http;

/// How long a login code works.
const CODE_LIFETIME: Duration = Duration::from_secs(WEB_CODE_SECONDS);

/// Codes minted and not yet redeemed, at most this many (older ones are dropped first).
const MAX_CODES: usize = 64;

/// The network front of one daemon and the browser's login codes.
#[derive(Default)]
pub struct Web {
    /// What starting the front needs: set by `dsh serve`, absent in an in-process daemon.
    starter: Mutex<Option<Starter>>,
    /// The running front.
    front: tokio::sync::Mutex<Option<Front>>,
    /// Unredeemed login codes and when they were minted.
    codes: Mutex<HashMap<String, Instant>>,
}

/// What the front is started with.
struct Starter {
    websockets: WebSockets,
    allow_origins: Vec<String>,
}

/// A running front.
struct Front {
    handle: ServerHandle,
    addr: SocketAddr,
}

/// Why a login code was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// Never minted, or already redeemed.
    Unknown,
    /// Minted more than [`CODE_LIFETIME`] ago.
    Expired,
}

impl Web {
    /// Makes the front startable (`dsh serve` does, once).
    pub(crate) fn install(&self, websockets: WebSockets, allow_origins: Vec<String>) {
        *lock(&self.starter) = Some(Starter { websockets, allow_origins });
    }

    /// Starts the front on `addr` (`dsh serve --listen`).
    pub(crate) async fn start(&self, home: &Path, addr: SocketAddr) -> anyhow::Result<SocketAddr> {
        let mut front = self.front.lock().await;
        if let Some(front) = front.as_ref() {
            return Ok(front.addr);
        }
        let (websockets, origins) = {
            let starter = lock(&self.starter);
            let starter = starter.as_ref().context("this daemon serves no network front")?;
            (starter.websockets.clone(), starter.allow_origins.clone())
        };
        let (handle, addr) = crate::network::start(home, addr, &origins, websockets).await?;
        *front = Some(Front { handle, addr });
        Ok(addr)
    }

    /// The front's address, started on loopback if it is not running: on the port recorded
    /// in the home when it is free, else on one the system picks (recorded for next time).
    /// True when this call started it.
    async fn ensure(&self, home: &dsh_store::DshHome) -> anyhow::Result<(SocketAddr, bool)> {
        if let Some(front) = self.front.lock().await.as_ref() {
            return Ok((front.addr, false));
        }
        let port_file = home.web_port_file();
        let recorded = std::fs::read_to_string(&port_file)
            .ok()
            .and_then(|text| text.trim().parse::<u16>().ok())
            .filter(|port| *port != 0);
        let addr = |port| SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let started = match recorded {
            Some(port) => match self.start(home.root(), addr(port)).await {
                Ok(bound) => bound,
                Err(error) => {
                    tracing::info!(%error, port, "the recorded web port is taken; another one");
                    self.start(home.root(), addr(0)).await?
                }
            },
            None => self.start(home.root(), addr(0)).await?,
        };
        if recorded != Some(started.port()) {
            crate::network::write_private(&port_file, started.port().to_string().as_bytes())?;
        }
        Ok((started, true))
    }

    /// Stops the front and forgets what starts it (shutdown).
    pub(crate) async fn stop(&self) {
        lock(&self.starter).take();
        if let Some(front) = self.front.lock().await.take() {
            let _ = front.handle.stop();
        }
    }

    /// A new one-time login code: 32 hex digits from the kernel's CSPRNG.
    pub fn mint(&self) -> anyhow::Result<String> {
        let code = cookie::random_hex()?;
        let mut codes = lock(&self.codes);
        codes.retain(|_, minted| minted.elapsed() < CODE_LIFETIME);
        while codes.len() >= MAX_CODES {
            let Some(oldest) = codes.iter().min_by_key(|(_, minted)| **minted) else { break };
            let oldest = oldest.0.clone();
            codes.remove(&oldest);
        }
        codes.insert(code.clone(), Instant::now());
        Ok(code)
    }

    /// Redeems a code: it works once, within its lifetime.
    pub fn redeem(&self, code: &str) -> Result<(), Refused> {
        self.redeem_at(code, Instant::now())
    }

    fn redeem_at(&self, code: &str, now: Instant) -> Result<(), Refused> {
        let minted = lock(&self.codes).remove(code).ok_or(Refused::Unknown)?;
        if now.saturating_duration_since(minted) >= CODE_LIFETIME {
            return Err(Refused::Expired);
        }
        Ok(())
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `daemon/web`: the front started (or reused) and a login URL with a fresh code.
pub async fn daemon_web(
    daemon: Arc<Daemon>,
    params: DaemonWebParams,
) -> ApiResult<DaemonWebResult> {
    if let Some(workspace) = &params.workspace
        && !Path::new(workspace).is_absolute()
    {
        return Err(ApiError::invalid_workspace(format!(
            "workspace {workspace}: not an absolute path"
        )));
    }
    let (addr, started) =
        daemon.web.ensure(daemon.home()).await.map_err(|error| {
            ApiError::unavailable(format!("the web front cannot start: {error:#}"))
        })?;
    let code = daemon.web.mint().map_err(|error| ApiError::store(format!("{error:#}")))?;
    let origin = format!("http://{addr}");
    let mut url = format!("{origin}/login?code={code}");
    if let Some(workspace) = &params.workspace {
        url.push_str("&workspace=");
        url.push_str(&http::percent_encode(workspace));
    }
    Ok(DaemonWebResult { origin, url, started })
}

/// The origin a page served from `addr` has.
pub(crate) fn origin_of(addr: SocketAddr) -> String {
    format!("http://{addr}")
}

/// Set once the front is bound: the page's own origin.
pub(crate) type OwnOrigin = Arc<OnceLock<String>>;

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]

    use super::*;

    #[test]
    fn a_code_expires_after_its_lifetime_and_is_gone_then() {
        let web = Web::default();
        let code = web.mint().expect("a code");
        let late = Instant::now() + CODE_LIFETIME + Duration::from_secs(1);
        assert_eq!(web.redeem_at(&code, late), Err(Refused::Expired));
        assert_eq!(web.redeem(&code), Err(Refused::Unknown), "an expired code is used up too");
        let code = web.mint().expect("a code");
        assert_eq!(web.redeem(&code), Ok(()));
        assert_eq!(web.redeem(&code), Err(Refused::Unknown));
    }

    #[test]
    fn codes_are_distinct_and_at_most_the_newest_are_kept() {
        let web = Web::default();
        let first = web.mint().expect("a code");
        let codes: Vec<String> = (0..MAX_CODES).map(|_| web.mint().expect("a code")).collect();
        assert_eq!(codes.iter().collect::<std::collections::HashSet<_>>().len(), MAX_CODES);
        assert_eq!(web.redeem(&first), Err(Refused::Unknown), "the oldest was dropped");
        for code in &codes {
            assert_eq!(web.redeem(code), Ok(()));
        }
    }
}
