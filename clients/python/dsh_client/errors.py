"""The exceptions of the client: every one is a :class:`DshError`.

- :class:`RpcError` — the daemon answered a call with an error (``code``, ``message``, ``data``);
  the codes are :class:`~dsh_client.protocol.ErrorCodes` and the JSON-RPC ones below.
- :class:`ProtocolVersionRefused` — ``initialize`` refused this client's protocol version.
- :class:`ConnectionClosed` — the connection ended (the daemon or the bridge died, or the client
  was closed): every call waiting for an answer fails with it, and so does every later call.
- :class:`DshNotFound` — the ``dsh`` binary to spawn does not exist or cannot be run.
- :class:`DaemonNotRunning` — nothing listens on the Unix socket to connect to.
- :class:`StartError` — the bridge started but did not get as far as an ``initialize`` answer.
- :class:`ProtocolError` — the daemon sent something this client cannot decode.
"""

from __future__ import annotations

from typing import Any, Final

from .protocol import ErrorCodes

PARSE_ERROR: Final = -32700
"""JSON-RPC: the line was not JSON."""
INVALID_REQUEST: Final = -32600
"""JSON-RPC: not a request (a batch, a notification, a line over 4 MiB)."""
METHOD_NOT_FOUND: Final = -32601
"""JSON-RPC: no such method."""
INVALID_PARAMS: Final = -32602
"""JSON-RPC: the params do not fit the method (the message names the field)."""
INTERNAL_ERROR: Final = -32603
"""JSON-RPC: the daemon failed."""


def code_name(code: int) -> str | None:
    """The name of an error code (``SESSION_NOT_FOUND``, ``INVALID_PARAMS``), if it has one."""
    for name, value in vars(ErrorCodes).items():
        if value == code and name.isupper():
            return name
    for name in ("PARSE_ERROR", "INVALID_REQUEST", "METHOD_NOT_FOUND", "INVALID_PARAMS", "INTERNAL_ERROR"):
        if globals()[name] == code:
            return name
    return None


class DshError(Exception):
    """Anything this client raises on its own account."""


class RpcError(DshError):
    """An error answer: the daemon's ``code``, ``message`` (for people) and ``data``, and the
    method that got it."""

    def __init__(self, code: int, message: str, data: Any = None, method: str | None = None) -> None:
        self.code = code
        self.message = message
        self.data = data
        self.method = method
        name = code_name(code)
        where = f"{method}: " if method else ""
        super().__init__(f"{where}{message} ({name or 'code'} {code})")

    @property
    def name(self) -> str | None:
        """The code's name (``SESSION_BUSY``...), if it has one."""
        return code_name(self.code)


class ProtocolVersionRefused(RpcError):
    """``initialize`` was refused: the daemon speaks another protocol version (its message says
    which). Upgrade the client or the daemon so that both speak the same one."""


class ConnectionClosed(DshError):
    """The connection to the daemon ended: calls waiting for an answer fail with it, never hang.
    The message says why when it is known (the bridge's exit status and last words on stderr)."""


class DshNotFound(DshError):
    """The ``dsh`` binary to spawn was not found or cannot be run."""


class DaemonNotRunning(DshError):
    """No daemon listens on the Unix socket: start one (``dsh serve``), or spawn ``dsh stdio``,
    which starts one when none runs."""


class StartError(DshError):
    """``dsh stdio`` started but the connection did not get as far as the ``initialize`` answer:
    it exited, or said nothing in time. The message quotes its stderr."""


class ProtocolError(DshError):
    """The daemon sent something that does not decode as the protocol says (a bug on one side, or
    a daemon far newer than this client)."""
