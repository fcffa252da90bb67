//! The `dsh` binary: the command line over the agent, the store and the mock provider.
//!
//! Commands run in this process for now: `prompt` runs one turn of the loop here, the read
//! commands (`sessions`, `usage`, `saw`, `audit`) fold the logs directly, and `demo` runs a whole
//! scripted session against the built-in mock. Output goes to stdout; diagnostics (`tracing`,
//! filtered by `DSH_LOG`) go to stderr.
#![allow(clippy::print_stdout)] // a CLI prints its results

mod cli;
mod demo;
mod printer;
mod run;
mod settings;
mod views;

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use dsh_agent::{AgentConfig, CallOverrides};
use dsh_session::{StopReason, reconstruct_step};
use dsh_store::{SessionId, SyncPolicy, fork_log, now_ms, read_log};

use crate::cli::{AuditArgs, Cli, Command, ForkArgs, MockArgs, PromptArgs, SawArgs};
use crate::settings::{Settings, workspace_dir};

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("DSH_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    // reqwest is built without a default TLS provider: install ring once, before any client.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("dsh: starting the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("dsh: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let settings = Settings::resolve(&cli.global)?;
    match cli.command {
        Command::Demo(args) => demo::run_demo(&settings, args.keep).await,
        Command::Prompt(args) => prompt(&settings, args).await,
        Command::Sessions(args) => sessions(&settings, args.workspace.as_deref()),
        Command::Usage(args) => usage(&settings, &args.session),
        Command::Saw(args) => saw(&settings, &args),
        Command::Audit(args) => audit(&settings, &args),
        Command::Fork(args) => fork(&settings, &args),
        Command::Mock(args) => mock(&args).await,
    }
}

async fn prompt(settings: &Settings, args: PromptArgs) -> anyhow::Result<ExitCode> {
    let provider = settings.provider()?;
    let session = match &args.session {
        Some(id) => {
            let path = settings.session_path(id)?;
            run::open(dsh_store::LiveLog::open(&path, SyncPolicy::Boundaries)?)?
        }
        None => run::create(&settings.home, &workspace_dir(args.workspace.as_deref())?)?,
    };
    eprintln!(
        "session {} (workspace {})",
        session.handle.session_id(),
        session.workspace.display()
    );
    let (approvals, approver) = run::approvals(args.yes);
    let mut config = AgentConfig::new(&settings.model);
    if settings.model_explicit {
        config.overrides =
            CallOverrides { model: Some(settings.model.clone()), ..CallOverrides::default() };
    }
    config.max_steps = args.max_steps;
    config.check_invariants |= args.check_invariants;
    config.approvals = approvals;
    let agent = run::agent(provider, &session, config, approver)?;
    let (_, outcome) = run::run_turn_printing(&session, agent, args.text.join(" ")).await?;
    Ok(match outcome.stop_reason {
        StopReason::Completed | StopReason::MaxSteps => ExitCode::SUCCESS,
        StopReason::Cancelled => ExitCode::from(130),
        StopReason::Error => ExitCode::FAILURE,
    })
}

fn print_json(value: &serde_json::Value) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

fn sessions(settings: &Settings, workspace: Option<&Path>) -> anyhow::Result<ExitCode> {
    let dir = workspace_dir(workspace)?;
    let listing = settings.home.workspace(&dir)?.list_sessions()?;
    for (path, error) in &listing.errors {
        eprintln!("dsh: skipping {}: {error}", path.display());
    }
    if settings.json {
        let sessions: Vec<_> = listing.sessions.iter().map(views::summary_json).collect();
        print_json(&serde_json::json!({ "sessions": sessions }))?;
    } else {
        print!("{}", views::sessions_text(&listing.sessions));
    }
    Ok(ExitCode::SUCCESS)
}

fn read_session(settings: &Settings, id: &str) -> anyhow::Result<Vec<dsh_session::Event>> {
    let path = settings.session_path(id)?;
    Ok(read_log(&path)?.events)
}

fn usage(settings: &Settings, id: &str) -> anyhow::Result<ExitCode> {
    let events = read_session(settings, id)?;
    if settings.json {
        print_json(&views::usage_json(&events))?;
    } else {
        print!("{}", views::usage_text(&events));
    }
    Ok(ExitCode::SUCCESS)
}

fn saw(settings: &Settings, args: &SawArgs) -> anyhow::Result<ExitCode> {
    let events = read_session(settings, &args.session)?;
    let rebuilt = reconstruct_step(&events, args.step)?;
    if args.wire {
        use std::io::Write;
        let body = dsh_provider::wire_body(&rebuilt.request);
        std::io::stdout().write_all(&body).context("writing the wire body")?;
        return Ok(ExitCode::SUCCESS);
    }
    if args.diff {
        if args.step < 2 {
            anyhow::bail!("step 1 has no previous step to diff against");
        }
        let previous = reconstruct_step(&events, args.step - 1)?;
        if settings.json {
            print_json(&serde_json::json!({
                "previous": views::saw_json(&previous),
                "current": views::saw_json(&rebuilt),
                "diff": views::diff_text(&previous, &rebuilt),
            }))?;
        } else {
            print!("{}", views::diff_text(&previous, &rebuilt));
        }
        return Ok(ExitCode::SUCCESS);
    }
    if settings.json {
        print_json(&views::saw_json(&rebuilt))?;
    } else {
        print!("{}", views::saw_text(&rebuilt, false));
    }
    Ok(ExitCode::SUCCESS)
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
        print_json(&audit.to_json())?;
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

fn fork(settings: &Settings, args: &ForkArgs) -> anyhow::Result<ExitCode> {
    let parent = settings.session_path(&args.session)?;
    let id = SessionId::generate(now_ms(), &mut fastrand::Rng::new());
    let forked = fork_log(&parent, args.at, &id, now_ms(), SyncPolicy::Boundaries)?;
    let events = forked.session().events().len();
    let path = forked.path().to_path_buf();
    forked.close()?;
    if settings.json {
        print_json(
            &serde_json::json!({ "sessionId": id.as_str(), "path": path, "events": events }),
        )?;
    } else {
        println!("forked {} into {id} ({events} events)", args.session);
    }
    Ok(ExitCode::SUCCESS)
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
