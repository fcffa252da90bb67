//! Reaching the daemon: finding or starting it, greeting it, handing it this command's provider
//! keys, and refusing one that cannot honour this command's sandbox.

use super::*;

/// Connects to (or starts) the daemon and says hello; refuses a daemon that cannot honour
/// these settings ([`refusal`]).
pub async fn connect(settings: &Settings) -> anyhow::Result<(Arc<Client>, Inbox)> {
    let (client, inbox) = join(settings).await?;
    if let Some(refusal) = refusal(&client, settings).await? {
        anyhow::bail!(refusal);
    }
    Ok((client, inbox))
}

/// Connects to (or starts) the daemon and says hello. A daemon that closes the connection
/// before it answers was dying as we connected (killed, or shutting down with its listener not
/// yet closed): once, after a moment, the next one is found or started.
pub(super) async fn join(settings: &Settings) -> anyhow::Result<(Arc<Client>, Inbox)> {
    let mut attempt = 0;
    loop {
        let stream = connect_or_start(settings.home.root(), &spawn_options(settings)).await?;
        let (reader, writer) = stream.into_split();
        let (client, inbox) = Client::new(reader, writer);
        match client.initialize("dsh-cli").await {
            Ok(_) => {
                hand_keys(&client, settings).await?;
                return Ok((Arc::new(client), inbox));
            }
            Err(dsh_daemon::client::ClientError::Closed) if attempt == 0 => {
                attempt += 1;
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            Err(error) => return Err(anyhow::Error::new(error).context("greeting the daemon")),
        }
    }
}

/// Hands the provider keys of this command's environment to the daemon, for the variables it
/// has none for: a daemon another command started without a key (the user set it since) serves
/// this one without a restart. A key the daemon has is kept.
async fn hand_keys(client: &Client, settings: &Settings) -> anyhow::Result<()> {
    let variables = dsh_daemon::startup::key_variables(settings.user_config.as_deref());
    let keys = dsh_daemon::startup::keys_in_environment(&variables);
    if keys.is_empty() {
        return Ok(());
    }
    let params = dsh_protocol::DaemonKeysParams { keys: keys.into_iter().collect() };
    match client.call::<method::DaemonKeys>(params).await {
        // A daemon of an older build: it has the keys it was started with.
        Err(dsh_daemon::client::ClientError::Rpc(error))
            if error.code == dsh_protocol::jsonrpc::METHOD_NOT_FOUND =>
        {
            Ok(())
        }
        answer => answer.map(drop).context("handing the provider keys over"),
    }
}

/// Why the running daemon cannot honour these settings, if it cannot. A running daemon keeps
/// the sandbox it was started with: never let commands meant for one sandbox policy run under
/// another. (A base URL is not the daemon's: this client's sessions get it — an ad-hoc profile,
/// `SessionConfig::base_url` — so any daemon honours it.)
pub(super) async fn refusal(
    client: &Client,
    settings: &Settings,
) -> anyhow::Result<Option<String>> {
    if !settings.sandbox_explicit {
        return Ok(None);
    }
    let status = client.call::<method::DaemonStatus>(NoParams {}).await?;
    let difference = settings
        .sandbox_explicit
        .then(|| sandbox_difference(&settings.sandbox, &status.sandbox))
        .flatten();
    if let Some(difference) = difference {
        return Ok(Some(format!(
            "the dsh daemon for {} (pid {}) runs commands with another sandbox ({difference}): run `dsh shutdown` first to start one with these settings",
            settings.home.root().display(),
            status.pid
        )));
    }
    Ok(None)
}

/// What a client passes to a daemon it starts.
pub fn spawn_options(settings: &Settings) -> SpawnOptions {
    // No provider flag: the profile, model and base URL are this command's choice for its
    // sessions (passed with each `session/create`), not defaults for every client of the daemon.
    let global_args = if settings.sandbox_explicit { settings.sandbox_args() } else { Vec::new() };
    let key_variables = dsh_daemon::startup::key_variables(settings.user_config.as_deref());
    SpawnOptions { global_args, key_variables }
}

/// How a running daemon's sandbox differs from the one these settings ask for, if it does.
fn sandbox_difference(
    wanted: &dsh_daemon::startup::SandboxConfig,
    running: &dsh_protocol::SandboxStatus,
) -> Option<String> {
    if running.policy != wanted.policy.name() {
        return Some(format!("policy {}, not {}", running.policy, wanted.policy));
    }
    if running.network != wanted.network {
        let state = |on: bool| if on { "on" } else { "off" };
        return Some(format!("network {}, not {}", state(running.network), state(wanted.network)));
    }
    for feature in &running.features {
        let off = wanted.without.iter().any(|w| w.name() == feature.name);
        if feature.turned_off != off {
            let state = |off: bool| if off { "off" } else { "on" };
            return Some(format!(
                "{} turned {}, not {}",
                feature.name,
                state(feature.turned_off),
                state(off)
            ));
        }
    }
    None
}
