//! `dsh web`: asks the daemon (started if none runs) for its browser viewer — the loopback
//! network front, started if it is not listening — and a one-time login URL, prints it and
//! hands it to the browser.
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
    if !no_open && let Err(error) = open(&result.url) {
        eprintln!("dsh web: could not start a browser ({error:#}): open the link yourself");
    }
    Ok(ExitCode::SUCCESS)
}

/// Starts `$BROWSER URL`, else `xdg-open URL` (macOS: `open URL`), detached from this
/// terminal's output.
fn open(url: &str) -> anyhow::Result<()> {
    let browser = std::env::var("BROWSER").ok().filter(|browser| !browser.trim().is_empty());
    let program = browser.unwrap_or_else(|| {
        if cfg!(target_os = "macos") { "open".to_owned() } else { "xdg-open".to_owned() }
    });
    std::process::Command::new(&program)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {program}"))?;
    Ok(())
}
