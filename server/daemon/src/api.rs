//! The API: the method table. Every method is one named handler in `handlers.rs`, registered
//! here by its typed descriptor ([`dsh_protocol::method::Method`]), so the params a handler
//! gets and the result it returns are the protocol's own types. The module is served unchanged
//! over the Unix socket, stdio, and (when enabled) WebSocket/HTTP. `protocol/README.md`
//! documents each method with an example exchange.
//!
//! How a handler runs is part of its registration: `inline` for the cheap and non-blocking,
//! `blocking` for those that read files (on tokio's blocking pool), `spawned` for those that
//! wait on a session (a turn, its owner task).

use std::future::Future;
use std::sync::Arc;

use dsh_protocol::method::{self, Method};
use jsonrpsee::RpcModule;
use jsonrpsee::types::Params;

use crate::daemon::Daemon;
use crate::error::{ApiError, ApiResult};
use crate::handlers as h;

/// Builds the module with every method.
pub fn module(daemon: Arc<Daemon>) -> anyhow::Result<RpcModule<Daemon>> {
    let mut module = RpcModule::from_arc(daemon);
    let m = &mut module;
    inline::<method::Initialize>(m, h::initialize)?;
    blocking::<method::SessionCreate>(m, h::session_create)?;
    blocking::<method::SessionList>(m, h::session_list)?;
    // `session/subscribe` and its `session/unsubscribe`, delivering `session/event`.
    m.register_subscription(
        method::SESSION_SUBSCRIBE,
        method::SESSION_EVENT,
        method::SESSION_UNSUBSCRIBE,
        |params, pending, daemon, _| h::session_subscribe(params, pending, daemon),
    )?;
    spawned::<method::SessionPrompt, _>(m, h::session_prompt)?;
    spawned::<method::SessionInject, _>(m, h::session_inject)?;
    spawned::<method::SessionCancel, _>(m, h::session_cancel)?;
    blocking::<method::SessionFork>(m, h::session_fork)?;
    spawned::<method::SessionRequest, _>(m, h::session_request)?;
    spawned::<method::SessionObject, _>(m, crate::images::session_object)?;
    spawned::<method::SessionUsage, _>(m, h::session_usage)?;
    spawned::<method::SessionPlan, _>(m, h::session_plan)?;
    spawned::<method::SessionCommands, _>(m, h::session_commands)?;
    spawned::<method::SessionEvents, _>(m, h::session_events)?;
    spawned::<method::SessionCompact, _>(m, h::session_compact)?;
    blocking::<method::SessionAudit>(m, h::session_audit)?;
    spawned::<method::SessionCheckpoints, _>(m, crate::rewind::session_checkpoints)?;
    spawned::<method::SessionRewind, _>(m, crate::rewind::session_rewind)?;
    blocking::<method::WorkspaceProvenance>(m, crate::provenance::workspace_provenance)?;
    spawned::<method::ApprovalRespond, _>(m, h::approval_respond)?;
    spawned::<method::McpList, _>(m, h::mcp_list)?;
    spawned::<method::SessionMcpServers, _>(m, h::session_mcp_servers)?;
    inline::<method::DaemonStatus>(m, h::daemon_status)?;
    inline::<method::DaemonShutdown>(m, h::daemon_shutdown)?;
    inline::<method::DaemonKeys>(m, h::daemon_keys)?;
    spawned::<method::DaemonWeb, _>(m, crate::web::daemon_web)?;
    // `daemon/subscribe` and its `daemon/unsubscribe`, delivering `daemon/notice`.
    m.register_subscription(
        method::DAEMON_SUBSCRIBE,
        method::DAEMON_NOTICE,
        method::DAEMON_UNSUBSCRIBE,
        |_params, pending, daemon, _| h::daemon_subscribe(pending, daemon),
    )?;
    Ok(module)
}

/// A handler that answers at once, on the connection's task.
type Inline<M> = fn(&Daemon, <M as Method>::Params) -> ApiResult<<M as Method>::Result>;

fn inline<M: Method>(module: &mut RpcModule<Daemon>, handler: Inline<M>) -> anyhow::Result<()> {
    module
        .register_method(M::NAME, move |params, daemon, _| handler(daemon, parse::<M>(&params)?))?;
    Ok(())
}

/// A handler that may block on file I/O: it runs on the blocking pool, at most
/// [`crate::daemon::READERS`] at once across the daemon (each may hold a whole log and its
/// answer in memory: many clients asking at once must not multiply that without bound).
type Blocking<M> = fn(&Arc<Daemon>, <M as Method>::Params) -> ApiResult<<M as Method>::Result>;

fn blocking<M: Method>(module: &mut RpcModule<Daemon>, handler: Blocking<M>) -> anyhow::Result<()>
where
    M::Result: Sync,
{
    module.register_async_method(M::NAME, move |params, daemon, _| async move {
        let params = parse::<M>(&params)?;
        let _reading = daemon.readers.acquire().await.map_err(|_| ApiError::shutting_down())?;
        let reader = Arc::clone(&daemon);
        tokio::task::spawn_blocking(move || handler(&reader, params))
            .await
            .map_err(|_| ApiError::store(format!("the {} handler panicked", M::NAME)))?
    })?;
    Ok(())
}

/// A handler that waits on sessions: a future of its own.
fn spawned<M, F>(
    module: &mut RpcModule<Daemon>,
    handler: fn(Arc<Daemon>, M::Params) -> F,
) -> anyhow::Result<()>
where
    M: Method,
    M::Result: Sync,
    F: Future<Output = ApiResult<M::Result>> + Send + 'static,
{
    module.register_async_method(M::NAME, move |params, daemon, _| async move {
        handler(daemon, parse::<M>(&params)?).await
    })?;
    Ok(())
}

/// The params of `M`; absent params read as `{}` (enough for methods whose params are all
/// optional).
pub(crate) fn parse<M: Method>(params: &Params<'_>) -> ApiResult<M::Params> {
    let text = params.as_str().unwrap_or("{}");
    serde_json::from_str(text).map_err(|error| {
        ApiError::invalid_params(format!("invalid params for {}: {error}", M::NAME))
    })
}

#[cfg(test)]
mod tests;
