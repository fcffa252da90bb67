"""JSON-RPC 2.0 over newline-delimited JSON — one message per line, the framing of the daemon's
Unix socket and of ``dsh stdio`` — on a pair of asyncio streams.

One task reads: it resolves each answer's waiting call and hands each notification to the
handlers of its method, in the order the lines arrive. When the stream ends (or the client
closes it), every call still waiting fails with :class:`~dsh_client.errors.ConnectionClosed` and
so does every later call: nothing waits on a connection that is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any, Awaitable, Callable

from .errors import ConnectionClosed, ProtocolError, RpcError

#: The longest line read: an answer can be large ("what the model saw" of a long conversation is
#: a hundred megabytes of JSON; the daemon caps answers over HTTP at 256 MiB).
MAX_LINE = 512 * 1024 * 1024

NotificationHandler = Callable[[Any], None]


class Connection:
    """A JSON-RPC client on `reader` and `writer`. :meth:`start` starts reading; `closing` (when
    given) is awaited once the stream ends, and returns the words that say why."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        closing: Callable[[], Awaitable[str]] | None = None,
        trace: Callable[[str], None] | None = None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._closing = closing
        self._trace = trace
        self._next_id = 1
        self._pending: dict[int, tuple[str, asyncio.Future[Any]]] = {}
        self._handlers: dict[str, list[NotificationHandler]] = {}
        self._close_handlers: list[Callable[[ConnectionClosed], None]] = []
        self._closed: ConnectionClosed | None = None
        self._last_error: str | None = None
        self._write_lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Starts the reading task."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._read(), name="dsh-client reader")

    @property
    def closed(self) -> ConnectionClosed | None:
        """Why the connection is closed, once it is."""
        return self._closed

    def on_notification(self, method: str, handler: NotificationHandler) -> Callable[[], None]:
        """Calls `handler` with the params of every notification named `method`, on the reading
        task (it must not block); returns what removes it."""
        handlers = self._handlers.setdefault(method, [])
        handlers.append(handler)

        def remove() -> None:
            if handler in handlers:
                handlers.remove(handler)

        return remove

    def on_close(self, handler: Callable[[ConnectionClosed], None]) -> None:
        """Calls `handler` once when the connection closes (at once if it is closed)."""
        if self._closed is not None:
            handler(self._closed)
        else:
            self._close_handlers.append(handler)

    async def call(self, method: str, params: Any = None) -> Any:
        """Sends a request (without ``params`` when `params` is ``None``) and returns its result;
        raises :class:`RpcError` for an error answer, :class:`ConnectionClosed` when the
        connection ends first."""
        if self._closed is not None:
            raise ConnectionClosed(f"{method}: {self._closed}")
        request_id = self._next_id
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = (method, future)
        try:
            try:
                await self._send(message)
            except ConnectionClosed as error:
                # The reading task sees the end too and says better why (the bridge's exit
                # status and stderr): it fails this call with that. Should it see no end, the
                # write's error stands.
                try:
                    return await asyncio.wait_for(asyncio.shield(future), 5)
                except asyncio.TimeoutError:
                    self._fail(error)
            return await future
        finally:
            self._pending.pop(request_id, None)

    async def close(self, reason: str = "the client closed the connection") -> None:
        """Closes the connection: waiting calls fail with :class:`ConnectionClosed`. Idempotent."""
        self._fail(ConnectionClosed(reason))
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        with contextlib.suppress(Exception):
            self._writer.close()
            await asyncio.wait_for(self._writer.wait_closed(), 2)

    async def _send(self, message: dict[str, Any]) -> None:
        line = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
        if self._trace:
            self._trace(f"--> {line}")
        async with self._write_lock:
            try:
                self._writer.write(line.encode() + b"\n")
                await self._writer.drain()
            except (ConnectionError, OSError, RuntimeError) as error:
                # The reading task sees the end too and says why; this call fails with it.
                raise ConnectionClosed(f"writing to the daemon failed: {error}") from None

    async def _read(self) -> None:
        reason = "the daemon closed the connection"
        try:
            while True:
                try:
                    line = await self._reader.readuntil(b"\n")
                except asyncio.IncompleteReadError as end:
                    if end.partial.strip():
                        self._dispatch(end.partial)
                    break
                except asyncio.LimitOverrunError:
                    reason = f"the daemon sent a line longer than {MAX_LINE} bytes"
                    break
                self._dispatch(line)
        except (ConnectionError, OSError) as error:
            reason = f"reading from the daemon failed: {error}"
        if self._closed is None:
            if self._closing is not None:
                with contextlib.suppress(Exception):
                    reason = await self._closing()
            if self._last_error:
                reason = f"{reason} (its last word: {self._last_error})"
            self._fail(ConnectionClosed(reason))

    def _dispatch(self, raw: bytes) -> None:
        text = raw.decode("utf-8", errors="replace").strip()
        if not text:
            return
        if self._trace:
            self._trace(f"<-- {text if len(text) <= 2000 else text[:2000] + '…'}")
        try:
            message = json.loads(text)
        except ValueError:
            # The daemon writes only JSON; a line cut by a connection the daemon dropped is all
            # this can be, and the end of the stream follows.
            return
        if not isinstance(message, dict):
            return
        method = message.get("method")
        if isinstance(method, str):
            if message.get("id") is not None:
                # The daemon sends no requests; answer as the protocol requires all the same.
                answer = {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": f"method not found: {method}"}}
                asyncio.get_running_loop().create_task(self._send_quietly(answer))
                return
            for handler in list(self._handlers.get(method, [])):
                handler(message.get("params"))
            return
        request_id = message.get("id")
        error = message.get("error")
        if request_id is None:
            # An error about no request in particular: the daemon is about to disconnect us (too
            # far behind, overloaded) and says why here.
            if isinstance(error, dict):
                self._last_error = str(error.get("message"))
            return
        pending = self._pending.get(request_id) if isinstance(request_id, int) else None
        if pending is None:
            return
        name, future = pending
        if future.done():
            return
        if isinstance(error, dict):
            code = error.get("code")
            future.set_exception(
                RpcError(code if isinstance(code, int) else 0, str(error.get("message", "")), error.get("data"), name)
            )
        elif "result" in message:
            future.set_result(message["result"])
        else:
            future.set_exception(ProtocolError(f"{name}: an answer with neither result nor error"))

    async def _send_quietly(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(Exception):
            await self._send(message)

    def _fail(self, closed: ConnectionClosed) -> None:
        if self._closed is not None:
            return
        self._closed = closed
        for method, future in list(self._pending.values()):
            if not future.done():
                future.set_exception(ConnectionClosed(f"{method}: {closed}"))
        for handler in self._close_handlers:
            handler(closed)
        self._close_handlers.clear()
