//! The `dsh` command: argument parsing, the commands — each a client of the daemon through the
//! typed client of `dsh-daemon` — the terminal printer and text views, and the offline demo.
//!
//! One daemon per user holds the sessions and runs the loops (`dsh serve`, the `dsh-daemon`
//! library); every session command is a client of it (`commands.rs`) and starts it on demand.
//! `demo` runs a private daemon in this process (the library's in-process runner) against the
//! built-in mock, and `mock` serves the mock alone. This crate never reaches a session except
//! through the protocol. Output goes to stdout; diagnostics (`tracing`, filtered by `DSH_LOG`)
//! go to stderr (for a daemon started by a client: `$DSH_HOME/daemon.log`).
#![allow(clippy::print_stdout, clippy::print_stderr)] // a CLI prints its results

mod args;
mod commands;
mod config_command;
mod demo;
mod doctor;
mod lines;
mod printer;
mod settings;
mod text;

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use dsh_daemon::serve::{ServeOptions, run as serve, run_in_process};

use crate::args::{AuditArgs, Cli, Command, MockArgs, ServeArgs, StdioArgs};
use crate::settings::{Settings, workspace_dir};

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::SandboxExec(args) = &cli.command {
        // The command launcher: no tracing, no runtime, no thread — a user namespace can only
        // be entered by a single-threaded process.
        let plan = args.plan.as_deref();
        std::process::exit(dsh_sandbox::sandbox_exec(args.stage, plan, &args.command));
    }
    if let Command::Serve(args) = &cli.command
        && args.detach
    {
        return start_detached();
    }
    if let Some(handover) = key_leaves_the_environment(&cli.command) {
        return reexec_without_key(handover);
    }
    if matches!(cli.command, Command::Serve(_)) {
        give_back_freed_memory();
    }
    let mut filter = tracing_subscriber::EnvFilter::try_from_env("DSH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_log_level(&cli.command)));
    // jsonrpsee and the ACP SDK trace messages with their params; params can hold secrets (an
    // MCP server's `env` and `headers` in `session/mcpServers` and ACP's `mcpServers`), so their
    // tracing stays at `info` whatever `DSH_LOG` says.
    let quiet = [
        "jsonrpsee_core",
        "jsonrpsee-core",
        "jsonrpsee-server",
        "jsonrpsee-client",
        "agent_client_protocol",
    ];
    for target in quiet {
        if let Ok(directive) = format!("{target}=info").parse() {
            filter = filter.add_directive(directive);
        }
    }
    // rmcp logs its transport errors whole, and an HTTP error quotes the server's URL (a token
    // in its path or query); dsh logs every server failure itself, scrubbed.
    if let Ok(directive) = "rmcp=off".parse() {
        filter = filter.add_directive(directive);
    }
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // No color codes in a file (a daemon started by a client logs to `daemon.log`).
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
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

/// Whether this process must `exec` itself again without the API key in its environment
/// before it runs a daemon — `Some(true)` when the key is to be handed over on standard input
/// (`dsh serve` started by hand with `DEEPSEEK_API_KEY` set), `Some(false)` when the key is not
/// needed at all (`dsh demo`, which talks to its own mock). `/proc/PID/environ` shows a
/// process's environment as it was exec'd, so only a new image forgets the key.
///
/// `dsh stdio --in-process` cannot do this (its standard input is the editor's channel): there
/// the key stays in the process's initial environment, and what keeps commands from it is that
/// they never inherit an environment and that the sandbox's PID namespace and fresh `/proc` hide
/// the daemon's process (Landlock also refuses `/proc/PID/environ` of a process outside the
/// sandbox, for a user other than root). An unconfined run can read it.
fn key_leaves_the_environment(command: &Command) -> Option<bool> {
    let key_set = !keys_to_hand_over().is_empty();
    match command {
        Command::Serve(args) if key_set && !args.api_key_stdin => Some(true),
        Command::Demo(_) if key_set => Some(false),
        _ => None,
    }
}

/// The provider keys this process's environment holds, by the variables the configuration
/// names ([`dsh_daemon::startup::key_variables`]).
fn keys_to_hand_over() -> Vec<(String, String)> {
    let user_config = dsh_config::user_file(dsh_daemon::startup::config_dir().as_deref());
    let variables = dsh_daemon::startup::key_variables(user_config.as_deref());
    dsh_daemon::startup::keys_in_environment(&variables)
}

/// `exec`s this binary again with the same arguments and without the provider keys in its
/// environment; with `handover`, the keys wait on a pipe as standard input
/// (`--api-key-stdin`). Returns only on failure.
fn reexec_without_key(handover: bool) -> ExitCode {
    use std::io::Write as _;
    use std::os::unix::process::CommandExt as _;
    let keys = keys_to_hand_over();
    let error = (|| -> std::io::Result<std::io::Error> {
        let mut args = std::env::args_os();
        let mut command = std::process::Command::new(settings::SANDBOX_HELPER);
        if let Some(arg0) = args.next() {
            command.arg0(arg0);
        }
        command.args(args);
        for (variable, _) in &keys {
            command.env_remove(variable);
        }
        if handover {
            // `dsh serve`: the malloc settings too, so the daemon is not exec'd a second time.
            command.envs(EAGER_PURGE);
            let (reader, mut writer) = std::io::pipe()?;
            // Keys are far smaller than a pipe's buffer: this never blocks.
            writer.write_all(dsh_daemon::startup::handover_text(&keys).as_bytes())?;
            drop(writer);
            command.arg("--api-key-stdin").stdin(reader);
        }
        Ok(command.exec())
    })();
    match error {
        Ok(error) | Err(error) => {
            eprintln!("dsh: starting again without the provider keys in the environment: {error}");
        }
    }
    ExitCode::FAILURE
}

/// `dsh serve --detach`, the middle process of a client's daemon start: starts `dsh serve` with
/// the same arguments but `--detach`, out of this process's session, and prints its pid
/// (`dsh_daemon::client::start_detached`). No runtime, no tracing: it exits at once.
fn start_detached() -> ExitCode {
    let daemon_args: Vec<_> = std::env::args_os()
        .skip(1)
        .filter(|arg| arg.as_os_str() != dsh_daemon::client::DETACH_FLAG)
        .collect();
    let started = std::env::current_exe()
        .and_then(|exe| dsh_daemon::client::start_detached(&exe, daemon_args));
    match started {
        Ok(pid) => {
            println!("{pid}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("dsh: starting the daemon detached: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The images in `paths` as attachments, each checked as the daemon checks it (its magic
/// bytes, its size).
fn read_images(paths: &[std::path::PathBuf]) -> anyhow::Result<Vec<dsh_protocol::Attachment>> {
    use base64::Engine as _;
    paths
        .iter()
        .map(|path| {
            let shown = path.display().to_string();
            let size = std::fs::metadata(path).with_context(|| format!("reading {shown}"))?.len();
            if size > dsh_session::MAX_IMAGE_BYTES {
                let limit = dsh_session::MAX_IMAGE_BYTES;
                anyhow::bail!(
                    "{shown} is {size} bytes, over the limit of {limit} bytes for an image"
                );
            }
            let bytes = std::fs::read(path).with_context(|| format!("reading {shown}"))?;
            dsh_session::check_image(&shown, &bytes)?;
            let name = path.file_name().map(|name| name.to_string_lossy().into_owned());
            let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
            Ok(dsh_protocol::Attachment { name, data })
        })
        .collect()
}

/// `attachments`, when they fit with `text` in one API request line (the daemon reads lines of
/// at most `MAX_LINE_BYTES`, 4 MiB; a longer line is refused unread): one image of the largest
/// size does, two do not.
fn fits_one_line(
    attachments: Vec<dsh_protocol::Attachment>,
    text: &str,
) -> anyhow::Result<Vec<dsh_protocol::Attachment>> {
    // The envelope, the ids and the names: well under this.
    const ENVELOPE: usize = 64 * 1024;
    let limit = dsh_daemon::connection::MAX_LINE_BYTES;
    let encoded: usize = attachments.iter().map(|attachment| attachment.data.len()).sum();
    let text = serde_json::to_string(text).map_or(text.len(), |quoted| quoted.len());
    if encoded + text + ENVELOPE > limit {
        anyhow::bail!(
            "the images of one prompt and its text take {} bytes as base64 and JSON, more than \
             one API request line holds ({limit} bytes): give them over several prompts",
            encoded + text
        );
    }
    Ok(attachments)
}

/// The JSON Schema in `path`, checked as the daemon checks it.
fn read_output_schema(path: &std::path::Path) -> anyhow::Result<serde_json::Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let schema: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    dsh_daemon::OutputSchema::new(schema.clone())
        .map_err(|problem| anyhow::anyhow!("{}: {problem}", path.display()))?;
    Ok(schema)
}

fn default_log_level(command: &Command) -> &'static str {
    match command {
        Command::Serve(_) => "info",
        // The ACP SDK warns about every error answer it sends (an unknown method, say): the
        // editor shows our stderr, and those answers are the protocol working.
        Command::Acp => "warn,agent_client_protocol=error",
        // tower-lsp-server logs every request it cannot answer; the editor shows our stderr.
        Command::Lsp => "warn,tower_lsp_server=error",
        _ => "warn",
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let settings = Settings::resolve(&cli.global)?;
    match cli.command {
        Command::Demo(args) => demo::run_demo(args.keep, &settings).await,
        Command::Prompt(args) => {
            let limits = args.limits();
            // A schema that cannot be used is refused before anything is created or logged.
            let output_schema = match args.output_schema.as_deref().map(read_output_schema) {
                None => None,
                Some(Ok(schema)) => Some(schema),
                Some(Err(error)) => {
                    eprintln!("dsh: --output-schema: {error:#}");
                    return Ok(ExitCode::from(2));
                }
            };
            // An image that cannot be read or is no image is refused before anything is
            // created or logged.
            let text = args.text.join(" ");
            let attachments = match read_images(&args.images)
                .and_then(|attachments| fits_one_line(attachments, &text))
            {
                Ok(attachments) => attachments,
                Err(error) => {
                    eprintln!("dsh: --image: {error:#}");
                    return Ok(ExitCode::from(2));
                }
            };
            let options = commands::PromptOptions {
                workspace: workspace_dir(args.workspace.as_deref())?,
                session: args.session,
                yes: args.yes,
                limits,
                output_schema,
                attachments,
                text,
            };
            commands::prompt(&settings, options).await
        }
        Command::Inject(args) => {
            commands::inject(&settings, &args.session, args.text.join(" ")).await
        }
        Command::Cancel(args) => commands::cancel(&settings, &args.session).await,
        Command::Sessions(args) => {
            commands::sessions(&settings, &workspace_dir(args.workspace.as_deref())?).await
        }
        Command::Usage(args) => commands::usage(&settings, &args.session).await,
        Command::Saw(args) => {
            commands::saw(&settings, &args.session, args.step, args.wire, args.diff).await
        }
        Command::Audit(args) => audit(&settings, &args).await,
        Command::Fork(args) => commands::fork(&settings, &args.session, args.at, args.step).await,
        Command::Rewind(args) => {
            let options = commands::RewindOptions {
                session: args.session,
                step: args.step,
                checkpoint: args.checkpoint,
                files_only: args.files,
                conversation_only: args.conversation,
                force: args.force,
                dry_run: args.dry_run,
            };
            commands::rewind(&settings, options).await
        }
        Command::Checkpoints(args) => commands::checkpoints(&settings, &args.session).await,
        Command::Compact(args) => commands::compact(&settings, &args.session).await,
        Command::Serve(args) => serve_command(settings, &args).await,
        Command::Stdio(args) => stdio(settings, &args).await,
        Command::Acp => commands::acp(&settings).await,
        Command::Lsp => commands::lsp(&settings).await,
        Command::Web(args) => {
            commands::web(&settings, args.workspace.as_deref(), args.no_open).await
        }
        Command::Status => commands::status(&settings).await,
        Command::Mcp(args) => {
            let workspace = workspace_dir(args.workspace.as_deref())?;
            commands::mcp(&settings, &workspace, args.start).await
        }
        Command::Shutdown => commands::shutdown(&settings).await,
        Command::Mock(args) => mock(&args).await,
        Command::Doctor => doctor::doctor(&settings).await,
        Command::Config(args) => {
            config_command::show(&settings, &workspace_dir(args.workspace.as_deref())?)
        }
        Command::AllowWorkspace(args) => {
            config_command::allow_workspace(&settings, &workspace_dir(args.dir.as_deref())?)
        }
        Command::SandboxExec(_) => anyhow::bail!("dsh sandbox-exec runs before the runtime"),
    }
}

async fn serve_command(settings: Settings, args: &ServeArgs) -> anyhow::Result<ExitCode> {
    let options = ServeOptions {
        listen: args.listen,
        allow_origins: args.allow_origin.clone(),
        idle_exit: args.idle_exit.map(|minutes| Duration::from_secs_f64((minutes * 60.0).max(0.0))),
        max_connections: args.max_connections,
    };
    let mut config = settings.daemon_config();
    config.approval_timeout = Duration::from_secs(args.approval_timeout);
    config.check_invariants = args.check_invariants;
    config.unload_after = Duration::from_secs_f64(args.unload_after * 60.0);
    config.loaded_budget_bytes = args.loaded_budget.saturating_mul(1024 * 1024);
    if args.api_key_stdin {
        config = config.with_keys(read_keys_from_stdin()?)?;
    }
    serve(config, options).await?;
    Ok(ExitCode::SUCCESS)
}

/// The API key a client (or this binary, `exec`ing itself) handed over on standard input.
fn read_keys_from_stdin() -> anyhow::Result<Vec<(String, String)>> {
    use std::io::Read as _;
    let mut text = String::new();
    std::io::stdin()
        .take(64 * 1024)
        .read_to_string(&mut text)
        .context("reading the API keys from standard input")?;
    let keys = dsh_daemon::startup::parse_handover(&text)?;
    if keys.is_empty() {
        anyhow::bail!("--api-key-stdin: standard input held no API key");
    }
    Ok(keys)
}

async fn stdio(settings: Settings, args: &StdioArgs) -> anyhow::Result<ExitCode> {
    if args.in_process {
        let mut config = settings.daemon_config();
        config.approval_timeout = Duration::from_secs(args.approval_timeout);
        run_in_process(config).await?;
        return Ok(ExitCode::SUCCESS);
    }
    commands::stdio_bridge(&settings).await
}

/// `dsh audit SESSION|FILE`: a session through the daemon, a log file directly (a file may be
/// a copy no daemon holds).
async fn audit(settings: &Settings, args: &AuditArgs) -> anyhow::Result<ExitCode> {
    let audit = if Path::new(&args.target).is_file() {
        dsh_daemon::views::audit_file(Path::new(&args.target))?
    } else {
        commands::audit(settings, &args.target).await?
    };
    if settings.json {
        println!("{}", serde_json::to_string_pretty(&audit)?);
    } else {
        print!("{}", text::audit_text(&audit));
    }
    Ok(if audit.ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
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

/// The glibc malloc settings `dsh serve` runs with: every allocation of 128 KiB or more is a
/// mapping of its own, returned to the system when freed (by default the threshold rises as
/// large buffers are freed, and they stay in the heap); two arenas, not two per core, so the
/// memory a session's events occupy is not scattered; and the heap is trimmed past 128 KiB
/// free at its top.
const EAGER_PURGE: [(&str, &str); 1] = [(
    "GLIBC_TUNABLES",
    "glibc.malloc.mmap_threshold=131072:glibc.malloc.arena_max=2:glibc.malloc.trim_threshold=131072",
)];

/// A daemon builds large answers (pages of events, rebuilt requests) and loads sessions it later
/// unloads; the memory must go back to the system, not stay resident for the daemon's life.
/// glibc reads its tunables only when the process starts, so `dsh serve` re-executes itself
/// once with them set (same pid, same arguments); another libc ignores the variable. Measured
/// (`cargo bench -p dsh --bench sessions`, `tests/api/hardening.rs`): 100 sessions touched under
/// a 64 MiB budget leave 186 MB resident instead of 465 MB, and a client that never read 150
/// pages of 5 MB leaves the daemon where it started.
fn give_back_freed_memory() {
    use std::os::unix::process::CommandExt as _;
    if EAGER_PURGE.iter().all(|(name, value)| std::env::var(name).is_ok_and(|set| set == *value)) {
        return;
    }
    let Ok(exe) = std::env::current_exe() else { return };
    let error =
        std::process::Command::new(exe).args(std::env::args_os().skip(1)).envs(EAGER_PURGE).exec();
    // Only reached when the exec failed: serve anyway, with the default allocator settings.
    eprintln!("dsh: re-executing with the malloc settings failed ({error}); serving without them");
}
