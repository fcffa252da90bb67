//! The daemon's own methods — the handshake, status, keys, shutdown, its notices — and the MCP
//! servers' (a workspace's list, a session's own servers).

use super::*;

/// `initialize`: the protocol version must match; answers with what this daemon offers.
pub fn initialize(_: &Daemon, params: InitializeParams) -> ApiResult<InitializeResult> {
    if params.protocol_version != PROTOCOL_VERSION {
        return Err(ApiError::new(
            dsh_protocol::code::UNSUPPORTED_PROTOCOL,
            format!(
                "protocol version {} is not supported; this daemon speaks version {PROTOCOL_VERSION}",
                params.protocol_version
            ),
        ));
    }
    Ok(InitializeResult {
        server_info: ServerInfo {
            name: "dsh".to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
        },
        protocol_version: PROTOCOL_VERSION,
        capabilities: Capabilities {
            methods: method::ALL.iter().map(|m| (*m).to_owned()).collect(),
            event_kinds: EVENT_KINDS.iter().map(|k| (*k).to_owned()).collect(),
        },
    })
}

/// `daemon/status`.
pub fn daemon_status(daemon: &Daemon, _: NoParams) -> ApiResult<DaemonStatusResult> {
    let base = daemon.settings().base_config().ok();
    Ok(DaemonStatusResult {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        pid: std::process::id(),
        protocol_version: PROTOCOL_VERSION,
        home: daemon.home().root().display().to_string(),
        base_url: daemon.settings().default_base_url().map_or_else(
            || {
                base.as_ref()
                    .and_then(|c| c.profiles.get(&c.profile.value))
                    .map_or_else(String::new, |p| p.base_url.value.clone())
            },
            str::to_owned,
        ),
        profiles: base.as_ref().map(views::profile_statuses).unwrap_or_default(),
        config_files: daemon.settings().files().iter().map(|f| f.display().to_string()).collect(),
        config_errors: daemon.settings().errors(),
        sessions: daemon
            .loaded()
            .iter()
            .map(|s| LoadedSession {
                session_id: s.id.clone(),
                running: s.is_running(),
                failed: s.failed(),
            })
            .collect(),
        clients: daemon.clients.load(Ordering::SeqCst),
        uptime_ms: daemon.started.elapsed().as_millis() as u64,
        warnings: daemon.warnings(),
        sandbox: sandbox_status(daemon.sandbox.status()),
        mcp_servers: daemon.mcp.report().iter().map(crate::mcp::status).collect(),
        checkpoints: daemon.checkpoints.status(),
    })
}

/// `mcp/list`: the servers started so far and, for a workspace, every server its configuration
/// names (started first when asked).
pub async fn mcp_list(daemon: Arc<Daemon>, params: McpListParams) -> ApiResult<McpListResult> {
    use dsh_agent::ExternalTools;
    let Some(workspace) = &params.workspace else {
        let servers = daemon.mcp.report().iter().map(crate::mcp::status).collect();
        return Ok(McpListResult { servers });
    };
    let root = std::fs::canonicalize(workspace)
        .map_err(|error| ApiError::invalid_workspace(format!("workspace {workspace}: {error}")))?;
    let config = daemon
        .settings()
        .config(&root)
        .map_err(|error| ApiError::invalid_params(error.to_string()))?;
    // A handle of our own keeps the servers up while they are listed; dropping it stops them
    // again unless a loaded session of the workspace uses them.
    let reports = if params.start {
        let tools = daemon.mcp.tools_for(&root, Arc::clone(&daemon.settings), None);
        let (waits, _) = tokio::sync::mpsc::unbounded_channel();
        let _ = tools.tools(waits).await;
        let reports = daemon.mcp.report();
        drop(tools);
        reports
    } else {
        daemon.mcp.report()
    };
    let mut servers = Vec::new();
    for (name, server) in &config.mcp {
        let report = reports.iter().find(|report| {
            report.workspace == root && report.session.is_none() && &report.name == name
        });
        servers.push(match report {
            Some(report) if server.enabled.value => crate::mcp::status(report),
            _ => crate::mcp::not_started(&root, name, server),
        });
    }
    // Then the sessions' own servers of the workspace, each with its session.
    servers.extend(
        reports
            .iter()
            .filter(|report| report.workspace == root && report.session.is_some())
            .map(crate::mcp::status),
    );
    Ok(McpListResult { servers })
}

/// `session/mcpServers`: the session's own MCP servers, replacing the ones it had; refused as a
/// whole (nothing changes) when one of them cannot be used.
pub async fn session_mcp_servers(
    daemon: Arc<Daemon>,
    params: SessionMcpServersParams,
) -> ApiResult<SessionMcpServersResult> {
    let servers = own_servers(params.servers)?;
    let live = load(&daemon, &params.session_id).await?;
    live.mcp_tools.set_own_servers(servers).map_err(ApiError::invalid_params)?;
    Ok(SessionMcpServersResult { servers: live.mcp_tools.own_status() })
}

/// A client's MCP server specs, each checked (`INVALID_PARAMS` naming the first bad one).
pub(super) fn own_servers(
    specs: Vec<dsh_protocol::McpServerSpec>,
) -> ApiResult<Vec<crate::mcp::OwnServer>> {
    specs
        .into_iter()
        .map(crate::mcp::own_server)
        .collect::<Result<_, _>>()
        .map_err(ApiError::invalid_params)
}

/// `daemon/subscribe`: the daemon's notices, `workspace/changed` and `workspace/turnStarted`,
/// from now on, until unsubscribed (a subscriber that falls behind by more than the channel
/// holds misses the oldest; notices are repeated in `daemon/status` while they hold).
pub async fn daemon_subscribe(pending: PendingSubscriptionSink, daemon: Arc<Daemon>) {
    let mut notices = daemon.settings().subscribe();
    let mut changes = daemon.watch.subscribe();
    let mut turns = daemon.turns.subscribe();
    let Ok(sink) = pending.accept().await else { return };
    let id = sink.subscription_id();
    loop {
        // Cancel-safety: `recv` and `closed` are cancel-safe.
        let received = tokio::select! {
            notice = notices.recv() => as_message(
                notice.map(|n| DaemonNotice { kind: n.kind.to_owned(), message: n.message }),
                method::DAEMON_NOTICE,
                &id,
            ),
            changed = changes.recv() => as_message(changed, method::WORKSPACE_CHANGED, &id),
            turn = turns.recv() => as_message(turn, method::WORKSPACE_TURN_STARTED, &id),
            () = sink.closed() => return,
        };
        let message = match received {
            // A subscriber that fell behind a channel misses what it lagged over.
            Err(broadcast::error::RecvError::Lagged(_)) => continue,
            Err(broadcast::error::RecvError::Closed) => return,
            Ok(Err(_)) => return,
            Ok(Ok(message)) => message,
        };
        if sink.send(message).await.is_err() {
            return;
        }
    }
}

/// One broadcast's next item as a daemon subscription's notification `method`.
fn as_message<T: serde::Serialize>(
    received: Result<T, broadcast::error::RecvError>,
    method: &'static str,
    id: &jsonrpsee::types::SubscriptionId<'static>,
) -> Result<Result<SubscriptionMessage, serde_json::Error>, broadcast::error::RecvError> {
    received.map(|item| SubscriptionMessage::new(method, id.clone(), &item))
}

/// The sandbox's status in the API's terms.
pub fn sandbox_status(status: &dsh_sandbox::SandboxStatus) -> SandboxStatus {
    SandboxStatus {
        policy: status.policy.clone(),
        network: status.network,
        features: status
            .features
            .iter()
            .map(|feature| SandboxFeature {
                name: feature.name.clone(),
                available: feature.available,
                used: feature.used,
                turned_off: feature.turned_off,
                detail: feature.detail.clone(),
            })
            .collect(),
        in_force: status.in_force.clone(),
        limits: status.limits.clone(),
        approval_required: status.approval_required,
        warnings: status.warnings.clone(),
    }
}

/// `daemon/keys`: provider keys from a client's environment, for the variables this daemon has
/// none for — so a daemon another client started without a key serves this one without a
/// restart. Values never reach a log or an answer.
pub fn daemon_keys(daemon: &Daemon, params: DaemonKeysParams) -> ApiResult<DaemonKeysResult> {
    let (taken, kept) = daemon.settings.hand_keys(params.keys).map_err(ApiError::invalid_params)?;
    if !taken.is_empty() {
        tracing::info!(variables = ?taken, "provider keys handed over by a client");
    }
    Ok(DaemonKeysResult { taken, kept })
}

/// `daemon/shutdown`: answered, then the daemon stops (see `serve.rs`).
pub fn daemon_shutdown(daemon: &Daemon, _: NoParams) -> ApiResult<DaemonShutdownResult> {
    tracing::info!("shutdown requested by a client");
    daemon.request_shutdown();
    Ok(DaemonShutdownResult { stopping: true })
}
