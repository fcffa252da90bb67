//! The `dsh` binary: the daemon (`serve`, `stdio`), its CLI clients, the offline demo and the
//! mock provider.
//!
//! One daemon per user holds the sessions and runs the loops (`daemon`); every session command
//! of the CLI is a client of it (`remote`, `client`) and starts it on demand. `audit` reads a log
//! file directly, `demo` runs a private loop against the built-in mock, and `mock` serves the
//! mock alone. Output goes to stdout; diagnostics (`tracing`, filtered by `DSH_LOG`) go to stderr
//! (for a daemon started by a client: `$DSH_HOME/daemon.log`).
#![allow(clippy::print_stdout, clippy::print_stderr)] // a CLI prints its results

mod cli;
mod client;
mod daemon;
mod demo;
mod printer;
mod remote;
mod run;
mod settings;
mod views;

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use dsh_store::read_log;

use crate::cli::{AuditArgs, Cli, Command, MockArgs, ServeArgs, StdioArgs};
use crate::daemon::serve::{ServeOptions, run as serve, run_in_process};
use crate::daemon::state::DaemonConfig;
use crate::settings::{Settings, workspace_dir};

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("DSH_LOG").unwrap_or_else(
            |_| tracing_subscriber::EnvFilter::new(default_log_level(&cli.command)),
        ))
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("dsh: starting the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let code = match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("dsh: {error:#}");
            ExitCode::FAILURE
        }
    };
    // A blocking read of stdin (the stdio front) would keep a plain runtime drop waiting for
    // input that may never come; everything that matters has been flushed by now.
    runtime.shutdown_timeout(Duration::from_millis(200));
    code
}

fn default_log_level(command: &Command) -> &'static str {
    match command {
        Command::Serve(_) => "info",
        _ => "warn",
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let settings = Settings::resolve(&cli.global)?;
    match cli.command {
        Command::Demo(args) => demo::run_demo(&settings, args.keep).await,
        Command::Prompt(args) => {
            let options = remote::PromptOptions {
                workspace: workspace_dir(args.workspace.as_deref())?,
                session: args.session,
                yes: args.yes,
                max_steps: args.max_steps,
                text: args.text.join(" "),
            };
            remote::prompt(&settings, options).await
        }
        Command::Inject(args) => {
            remote::inject(&settings, &args.session, args.text.join(" ")).await
        }
        Command::Cancel(args) => remote::cancel(&settings, &args.session).await,
        Command::Sessions(args) => {
            remote::sessions(&settings, &workspace_dir(args.workspace.as_deref())?).await
        }
        Command::Usage(args) => remote::usage(&settings, &args.session).await,
        Command::Saw(args) => {
            remote::saw(&settings, &args.session, args.step, args.wire, args.diff).await
        }
        Command::Audit(args) => audit(&settings, &args),
        Command::Fork(args) => remote::fork(&settings, &args.session, args.at).await,
        Command::Compact(args) => remote::compact(&settings, &args.session).await,
        Command::Serve(args) => serve_command(settings, &args).await,
        Command::Stdio(args) => stdio(settings, &args).await,
        Command::Status => remote::status(&settings).await,
        Command::Shutdown => remote::shutdown(&settings).await,
        Command::Mock(args) => mock(&args).await,
    }
}

fn daemon_config(
    settings: Settings,
    approval_timeout: u64,
    check_invariants: bool,
) -> DaemonConfig {
    let home = settings.home.clone();
    let default_model = settings.model.clone();
    let base_url = settings.base_url.clone();
    let settings = Arc::new(settings);
    DaemonConfig {
        home,
        provider: Box::new(move || settings.provider()),
        base_url,
        default_model,
        approval_timeout: Duration::from_secs(approval_timeout),
        check_invariants,
    }
}

async fn serve_command(settings: Settings, args: &ServeArgs) -> anyhow::Result<ExitCode> {
    let options = ServeOptions {
        listen: args.listen,
        allow_origins: args.allow_origin.clone(),
        idle_exit: args.idle_exit.map(|minutes| Duration::from_secs_f64((minutes * 60.0).max(0.0))),
    };
    let config = daemon_config(settings, args.approval_timeout, args.check_invariants);
    serve(config, options).await?;
    Ok(ExitCode::SUCCESS)
}

async fn stdio(settings: Settings, args: &StdioArgs) -> anyhow::Result<ExitCode> {
    if args.in_process {
        run_in_process(daemon_config(settings, args.approval_timeout, false)).await?;
        return Ok(ExitCode::SUCCESS);
    }
    remote::stdio_bridge(&settings).await
}

fn audit(settings: &Settings, args: &AuditArgs) -> anyhow::Result<ExitCode> {
    let path = if Path::new(&args.target).is_file() {
        Path::new(&args.target).to_path_buf()
    } else {
        settings.session_path(&args.target)?
    };
    let read = read_log(&path)?;
    let audit = views::audit(&read.events);
    if settings.json {
        println!("{}", serde_json::to_string_pretty(&audit.to_json())?);
    } else {
        if let Some(torn) = &read.torn {
            println!(
                "note: the log ends in a torn line at byte {} ({} bytes), ignored",
                torn.offset, torn.len
            );
        }
        print!("{}", views::audit_text(&audit));
    }
    Ok(if audit.ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

async fn mock(args: &MockArgs) -> anyhow::Result<ExitCode> {
    let mut config = dsh_mock::MockConfig::default();
    config.cache.granularity = args.granularity;
    config.cache.mode = match args.cache_mode.as_str() {
        "block" => dsh_mock::CacheMode::Block,
        "units" => dsh_mock::CacheMode::Units,
        other => anyhow::bail!("unknown cache mode `{other}` (expected block or units)"),
    };
    dsh_mock::serve_forever(config, args.port).await.context("running the mock server")?;
    Ok(ExitCode::SUCCESS)
}
