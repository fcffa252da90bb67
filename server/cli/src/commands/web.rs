//! `dsh web`: asks the daemon (started if none runs) for its browser viewer — the loopback
//! network front, started if it is not listening — and a one-time login URL, prints it and
//! hands the browser a private page that leads to it (the link itself never goes on a command
//! line).
#![allow(clippy::print_stdout, clippy::print_stderr)] // CLI commands print

use std::path::Path;
use std::process::{ExitCode, Stdio};

use anyhow::Context as _;
use dsh_protocol::method;
use dsh_protocol::{DaemonWebParams, WEB_CODE_SECONDS};

use super::{connect, print_json};
use crate::settings::Settings;

/// `dsh web [--workspace DIR] [--no-open]`.
pub async fn web(
    settings: &Settings,
    workspace: Option<&Path>,
    no_open: bool,
) -> anyhow::Result<ExitCode> {
    let workspace = workspace
        .map(|dir| dir.canonicalize().with_context(|| format!("workspace {}", dir.display())))
        .transpose()?;
    let (client, _) = connect(settings).await?;
    let params = DaemonWebParams { workspace: workspace.map(|dir| dir.display().to_string()) };
    let result = client.call::<method::DaemonWeb>(params).await?;
    if settings.json {
        print_json(&result)?;
    } else {
        println!("{}", result.url);
        let started = if result.started { "started on" } else { "already on" };
        eprintln!(
            "dsh web: the daemon's network front is {started} {}; the link logs one browser in, \
             once, within {} minutes",
            result.origin,
            WEB_CODE_SECONDS / 60
        );
    }
    if !no_open {
        let opened = login_page(settings.home.root(), &result.url).and_then(|page| open(&page));
        if let Err(error) = opened {
            eprintln!("dsh web: could not start a browser ({error:#}): open the link yourself");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The name of the page that hands the browser its login link, in the state directory.
pub const LOGIN_PAGE: &str = "web-login.html";

/// Writes a page (0600, in the state directory, which is the user's alone) that sends the
/// browser on to `url`: what the browser is started with is this page's path, never the link —
/// a program's arguments are readable by every local user for as long as it runs, and the
/// link's one-time code must not be.
fn login_page(home: &Path, url: &str) -> anyhow::Result<std::path::PathBuf> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let escaped =
        url.replace('&', "&amp;").replace('"', "&quot;").replace('<', "&lt;").replace('>', "&gt;");
    let page = format!(
        "<!doctype html>\n<meta charset=\"utf-8\">\n<meta http-equiv=\"refresh\" \
         content=\"0;url={escaped}\">\n<title>dsh</title>\n<a href=\"{escaped}\">Log in to dsh</a>\n"
    );
    let path = home.join(LOGIN_PAGE);
    let partial = home.join(format!("{LOGIN_PAGE}.{}", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&partial)
        .with_context(|| format!("creating {}", partial.display()))?;
    file.write_all(page.as_bytes()).with_context(|| format!("writing {}", partial.display()))?;
    std::fs::rename(&partial, &path).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Starts `$BROWSER PAGE`, else `xdg-open PAGE` (macOS: `open PAGE`), detached from this
/// terminal's output.
fn open(page: &Path) -> anyhow::Result<()> {
    let browser = std::env::var("BROWSER").ok().filter(|browser| !browser.trim().is_empty());
    let program = browser.unwrap_or_else(|| {
        if cfg!(target_os = "macos") { "open".to_owned() } else { "xdg-open".to_owned() }
    });
    std::process::Command::new(&program)
        .arg(page)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {program}"))?;
    Ok(())
}
