"""A typed asyncio client of the dsh daemon's JSON-RPC protocol, standard library only.

>>> async with dsh_client.connect() as client:          # spawns `dsh stdio`, starting the daemon
...     session = await client.create(".")
...     result = await client.prompt(session, "explain src/main.rs", on_approval=lambda e: "allow")

The protocol's types (``dsh_client.protocol``) are generated from its JSON Schema; the events are
one class per kind (``StepStartEvent``, ``ToolCallEvent``...), all under ``SessionEvent``.
"""

__version__ = "0.1.0"

from .client import (
    ApprovalCallback,
    Client,
    EventCallback,
    EventStream,
    connect,
    default_socket,
    resolve_home,
)
from .errors import (
    ConnectionClosed,
    DaemonNotRunning,
    DshError,
    DshNotFound,
    ProtocolError,
    ProtocolVersionRefused,
    RpcError,
    StartError,
)
from .protocol import PROTOCOL_VERSION, ErrorCodes, Methods, SessionConfig, SessionEvent

__all__ = [
    "PROTOCOL_VERSION",
    "ApprovalCallback",
    "Client",
    "ConnectionClosed",
    "DaemonNotRunning",
    "DshError",
    "DshNotFound",
    "ErrorCodes",
    "EventCallback",
    "EventStream",
    "Methods",
    "ProtocolError",
    "ProtocolVersionRefused",
    "RpcError",
    "SessionConfig",
    "SessionEvent",
    "StartError",
    "__version__",
    "connect",
    "default_socket",
    "resolve_home",
]
