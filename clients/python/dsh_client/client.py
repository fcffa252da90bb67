"""The client: a connection to the daemon — by spawning ``dsh stdio`` (the default: it starts the
daemon when none runs) or on the daemon's Unix socket — the handshake, a method per verb, events
as an async iterator, and approvals answered by a callback.

Every method of the protocol is also there as :class:`~dsh_client.protocol.Api` has it
(``client.session_compact(SessionParams(session_id=...))``): the verbs here are the common ones
with keyword arguments.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import inspect
import os
import shutil
from pathlib import Path
from typing import Any, Awaitable, Callable, Generator, Mapping, TypeVar, Union

from . import __version__
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
from .protocol import (
    PROTOCOL_VERSION,
    Api,
    ApprovalChoice,
    ApprovalRequestEvent,
    ApprovalRespondParams,
    ClientInfo,
    DaemonStatusResult,
    DecodeError,
    ErrorCodes,
    InitializeParams,
    InitializeResult,
    McpServerSpec,
    Methods,
    SessionAuditResult,
    SessionConfig,
    SessionCreateParams,
    SessionEvent,
    SessionEventsParams,
    SessionForkParams,
    SessionInjectParams,
    SessionListParams,
    SessionParams,
    SessionPromptParams,
    SessionPromptResult,
    SessionRequestParams,
    SessionRequestResult,
    SessionSubscribeParams,
    SessionSummary,
    SessionUsageResult,
    TurnEndEvent,
    TurnLimits,
    WhenBusy,
    decode_session_event,
)
from .rpc import MAX_LINE, Connection

_T = TypeVar("_T")

ApprovalCallback = Callable[[ApprovalRequestEvent], Union[ApprovalChoice, Awaitable[ApprovalChoice]]]
"""Answers an ``approval/request`` event: ``"allow"``, ``"deny"``, ``"allowAlways"`` or
``"allowUnconfined"`` (a coroutine function is awaited)."""

EventCallback = Callable[[SessionEvent], Union[None, Awaitable[None]]]
"""Called with each event of a turn, in order."""

#: How long :meth:`Client.prompt` reads events after the answer for the turn's ``turn/end``.
TURN_END_GRACE = 10.0
#: The part of the bridge's stderr kept for error messages.
STDERR_KEEP = 16 * 1024


def resolve_home(env: Mapping[str, str] | None = None) -> Path:
    """The daemon's state directory as the CLI resolves it: ``DSH_HOME``, else
    ``$XDG_STATE_HOME/dsh`` (an absolute one), else ``~/.local/state/dsh``; empty variables count
    as unset."""
    env = os.environ if env is None else env
    if env.get("DSH_HOME"):
        return Path(env["DSH_HOME"])
    state = env.get("XDG_STATE_HOME")
    if state and os.path.isabs(state):
        return Path(state) / "dsh"
    if env.get("HOME"):
        return Path(env["HOME"]) / ".local" / "state" / "dsh"
    raise DshError("cannot locate the dsh state directory: set DSH_HOME, XDG_STATE_HOME or HOME")


def default_socket(home: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Path:
    """The daemon's Unix socket: ``dsh.sock`` in `home`, else in :func:`resolve_home`'s."""
    return Path(home if home is not None else resolve_home(env)) / "dsh.sock"


def connect(
    *,
    socket: str | os.PathLike[str] | None = None,
    dsh: str | os.PathLike[str] = "dsh",
    home: str | os.PathLike[str] | None = None,
    in_process: bool = False,
    base_url: str | None = None,
    env: Mapping[str, str] | None = None,
    client_name: str = "dsh-python",
    protocol_version: int = PROTOCOL_VERSION,
    timeout: float = 30.0,
    trace: Callable[[str], None] | None = None,
) -> _Connecting:
    """Connects to the daemon and runs ``initialize``; ``await`` it, or ``async with`` it (which
    closes the client at the end).

    By default it spawns ``dsh [--home HOME] stdio`` (the binary `dsh`, looked up on the
    ``PATH`` of `env`), which starts the daemon when none runs, so a script needs nothing
    running; with `in_process`, ``dsh stdio --in-process``: a private daemon inside the bridge.
    With `socket` (a path; :func:`default_socket` gives the daemon's), it connects to that Unix
    socket instead and starts nothing.

    `base_url` goes with every session :meth:`Client.create` makes (``config.baseUrl``: the
    session's own profile, since a shared daemon serves other clients too); for an in-process
    daemon it is the ``--base-url`` flag. `env` is the bridge's environment (default: this
    process's; the daemon it starts takes the provider keys from it). `protocol_version` is what
    ``initialize`` says (a different one is refused: :class:`ProtocolVersionRefused`). `timeout`
    bounds the start, in seconds. `trace` gets every line sent and received.

    Raises :class:`DshNotFound` (no such binary), :class:`DaemonNotRunning` (nothing on the
    socket), :class:`ProtocolVersionRefused`, :class:`StartError` (the bridge died or said
    nothing in time; the message quotes its stderr).
    """
    options = _Options(
        socket=socket,
        dsh=os.fspath(dsh),
        home=os.fspath(home) if home is not None else None,
        in_process=in_process,
        base_url=base_url,
        env=dict(os.environ if env is None else env),
        client_name=client_name,
        protocol_version=protocol_version,
        timeout=timeout,
        trace=trace,
    )
    return _Connecting(options)


@dataclasses.dataclass(frozen=True)
class _Options:
    socket: str | os.PathLike[str] | None
    dsh: str
    home: str | None
    in_process: bool
    base_url: str | None
    env: dict[str, str]
    client_name: str
    protocol_version: int
    timeout: float
    trace: Callable[[str], None] | None

    def argv(self, executable: str) -> list[str]:
        argv = [executable]
        if self.home is not None:
            argv += ["--home", self.home]
        if self.in_process and self.base_url:
            argv += ["--base-url", self.base_url]
        argv.append("stdio")
        if self.in_process:
            argv.append("--in-process")
        return argv


class _Connecting:
    """What :func:`connect` returns: awaitable (the client) and an async context manager."""

    def __init__(self, options: _Options) -> None:
        self._options = options
        self._client: Client | None = None

    def __await__(self) -> Generator[Any, None, Client]:
        return Client._start(self._options).__await__()

    async def __aenter__(self) -> Client:
        self._client = await Client._start(self._options)
        return self._client

    async def __aexit__(self, *exc: object) -> None:
        if self._client is not None:
            await self._client.close()


class _Bridge:
    """The spawned ``dsh stdio``: the process and the tail of its stderr."""

    def __init__(self, process: asyncio.subprocess.Process, argv: list[str]) -> None:
        self.process = process
        self.argv = argv
        self.stderr = ""
        assert process.stderr is not None
        self._stderr_task = asyncio.get_running_loop().create_task(self._drain(process.stderr))

    async def _drain(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(4096):
            self.stderr = (self.stderr + chunk.decode("utf-8", errors="replace"))[-STDERR_KEEP:]

    def describe(self) -> str:
        """``dsh stdio`` and how it ended, with its stderr's last lines."""
        code = self.process.returncode
        command = " ".join(self.argv[1:])
        if code is None:
            how = f"`dsh {command}` is still running"
        elif code < 0:
            how = f"`dsh {command}` was killed by signal {-code}"
        else:
            how = f"`dsh {command}` exited with code {code}"
        tail = self.stderr.strip()
        if len(tail) > 2000:
            tail = "…" + tail[-2000:]
        return f"{how}: {tail}" if tail else f"{how} and printed nothing on stderr"

    async def ended(self) -> str:
        """Waits a little for the process to end (its stdout just did) and says how it ended."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.process.wait(), 3)
        with contextlib.suppress(asyncio.TimeoutError, Exception):
            await asyncio.wait_for(asyncio.shield(self._stderr_task), 1)
        return f"the connection to the dsh daemon closed; {self.describe()}"

    async def stop(self) -> None:
        """Waits for the process to leave (its stdin is closed), then ends it."""
        for signal in (None, "terminate", "kill"):
            if signal == "terminate":
                with contextlib.suppress(ProcessLookupError):
                    self.process.terminate()
            elif signal == "kill":
                with contextlib.suppress(ProcessLookupError):
                    self.process.kill()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.process.wait(), 3)
                break
        with contextlib.suppress(asyncio.TimeoutError, Exception):
            await asyncio.wait_for(self._stderr_task, 1)


class Client(Api):
    """A connection to the dsh daemon, initialized. Make one with :func:`connect`."""

    info: InitializeResult
    """The daemon's ``initialize`` answer: its version, protocol version, methods and event kinds."""

    def __init__(self, connection: Connection, bridge: _Bridge | None, options: _Options) -> None:
        self.connection = connection
        """The JSON-RPC connection (``await client.connection.call(method, params)`` for raw JSON)."""
        self._bridge = bridge
        self._options = options
        self._streams: dict[str, EventStream] = {}
        self._early: dict[str, builtins.list[Any]] = {}
        self._subscribing = 0
        self._closing = False
        connection.on_notification(Methods.SESSION_EVENT, self._on_event)
        connection.on_close(self._on_close)

    @classmethod
    async def _start(cls, options: _Options) -> Client:
        bridge = None
        if options.socket is not None:
            connection = await _open_socket(options)
        else:
            connection, bridge = await _spawn(options)
        client = cls(connection, bridge, options)
        connection.start()
        try:
            client.info = await asyncio.wait_for(
                client.initialize(
                    InitializeParams(
                        client_info=ClientInfo(name=options.client_name, version=__version__),
                        protocol_version=options.protocol_version,
                    )
                ),
                options.timeout,
            )
        except RpcError as error:
            await client.close()
            if error.code == ErrorCodes.UNSUPPORTED_PROTOCOL:
                raise ProtocolVersionRefused(error.code, error.message, error.data, error.method) from None
            raise
        except ConnectionClosed as error:
            await client.close()
            raise StartError(f"the dsh daemon did not start: {error}") from None
        except asyncio.TimeoutError:
            said = f"; {bridge.describe()}" if bridge is not None else ""
            await client.close()
            raise StartError(f"the dsh daemon did not answer `initialize` within {options.timeout:g} s{said}") from None
        return client

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes the connection (a spawned bridge exits; the daemon and its turns go on). Open
        event streams end; calls still waiting fail with :class:`ConnectionClosed`."""
        self._closing = True
        await self.connection.close()
        if self._bridge is not None:
            await self._bridge.stop()

    @property
    def stderr(self) -> str:
        """The spawned bridge's stderr (its last 16 KiB); empty on a socket."""
        return self._bridge.stderr if self._bridge is not None else ""

    async def _call(self, method: str, params: Any, decode: Callable[[Any], _T]) -> _T:
        result = await self.connection.call(method, params)
        try:
            return decode(result)
        except DecodeError as error:
            raise ProtocolError(f"{method}: the answer does not decode: {error}") from None

    # ---- the verbs ---------------------------------------------------------------------

    async def create(
        self,
        workspace: str | os.PathLike[str],
        *,
        model: str | None = None,
        config: SessionConfig | None = None,
        mcp_servers: builtins.list[McpServerSpec] | None = None,
    ) -> str:
        """Creates a session in `workspace` (made absolute) and returns its id. The session is
        pinned to ``config.profile`` and `model` (else the configuration's defaults); the
        client's `base_url` goes in ``config.baseUrl`` unless `config` names one."""
        base_url = self._options.base_url
        if base_url and not self._options.in_process and (config is None or config.base_url is None):
            config = dataclasses.replace(config or SessionConfig(), base_url=base_url)
        params = SessionCreateParams(workspace=os.path.abspath(workspace), model=model, config=config, mcp_servers=mcp_servers)
        return (await self.session_create(params)).session_id

    async def prompt(
        self,
        session_id: str,
        text: str,
        *,
        when_busy: WhenBusy | None = None,
        limits: TurnLimits | None = None,
        output_schema: Any | None = None,
        on_approval: ApprovalCallback | None = None,
        on_event: EventCallback | None = None,
    ) -> SessionPromptResult:
        """Runs a turn and returns its result when it ends (``stop_reason``: ``completed``,
        ``cancelled``, ``error``, ``maxSteps``, ``limit`` — a budget of `limits` was reached,
        named by the result's ``limit`` —, ``outputInvalid``).

        `output_schema` (a JSON Schema, as a JSON-compatible value) holds the final answer to
        a shape: the result's ``output`` is the validated value; an answer still invalid after
        the one correction ends the turn ``outputInvalid``, the problems in ``output_errors``.
        A schema that is not valid is refused (``INVALID_PARAMS``) before anything is logged.

        `on_approval` answers each ``approval/request`` of the turn (its decision is sent with
        ``approval/respond``; when it raises, the call is denied and the exception raised once
        the turn is over). Without it, approvals wait for another client, or are denied at the
        daemon's timeout. `on_event` is called with each event logged from the call on, in order,
        up to the turn's ``turn/end`` (with `when_busy="queue"`, which waits for a running turn
        instead of failing with ``SESSION_BUSY``, the running turn's events come first)."""
        params = SessionPromptParams(
            session_id=session_id, text=text, when_busy=when_busy, limits=limits, output_schema=output_schema
        )
        if on_approval is None and on_event is None:
            return await self.session_prompt(params)
        # From the log's current end: whatever the turn logs (its approval requests first of
        # all) comes after, stored or live.
        length = (await self.session_events(SessionEventsParams(session_id=session_id, from_seq=0, limit=0))).length
        stream = self.events(session_id, from_seq=length)
        await stream.open()
        watcher = _TurnWatcher(self, stream, on_approval, on_event)
        task = asyncio.get_running_loop().create_task(watcher.run())
        try:
            result = await self.session_prompt(params)
            # The answer can overtake the turn's last events: read up to its `turn/end`.
            watcher.turn = result.turn
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(watcher.wait_turn_end(result.turn), TURN_END_GRACE)
        finally:
            await stream.close()
            with contextlib.suppress(ConnectionClosed, asyncio.CancelledError):
                await task
        if watcher.error is not None:
            raise watcher.error
        return result

    def events(self, session_id: str, *, from_seq: int = 0) -> EventStream:
        """The session's events from `from_seq`: the stored ones, then live ones as they are
        logged, in order, with no gap and no duplicate (``session/subscribe``). Iterate it with
        ``async for``; it ends when closed (``await stream.close()``, or leaving ``async with``)
        or when the client is closed, and raises :class:`ConnectionClosed` when the connection
        is lost."""
        return EventStream(self, session_id, from_seq)

    async def stored_events(self, session_id: str, *, from_seq: int = 0) -> builtins.list[SessionEvent]:
        """The events logged so far from `from_seq`, read page by page (``session/events``)."""
        events: builtins.list[SessionEvent] = []
        while True:
            page = await self.session_events(SessionEventsParams(session_id=session_id, from_seq=from_seq, limit=1000))
            events.extend(page.events)
            if page.end or not page.events:
                return events
            from_seq = page.next_seq

    async def inject(self, session_id: str, text: str) -> int:
        """Steers: `text` joins the session's next model request (of the running turn, or of the
        next turn); returns the seq of its ``steering/message``, which that request's
        ``step/start`` lists in ``joined``."""
        return (await self.session_inject(SessionInjectParams(session_id=session_id, text=text))).seq

    async def cancel(self, session_id: str) -> bool:
        """Cancels the running turn; whether one was running."""
        return (await self.session_cancel(SessionParams(session_id=session_id))).cancelled

    async def fork(
        self,
        session_id: str,
        *,
        at_step: int | None = None,
        at_seq: int | None = None,
        config: SessionConfig | None = None,
    ) -> str:
        """Forks the session and returns the fork's id: at step `at_step` (the conversation as
        that step's request was about to see it), at `at_seq` (the events before it), or whole.
        `config` moves the fork to another profile or model."""
        params = SessionForkParams(session_id=session_id, at_step=at_step, at_seq=at_seq, config=config)
        return (await self.session_fork(params)).session_id

    async def request(self, session_id: str, step: int, *, diff: bool = False) -> SessionRequestResult:
        """"What the model saw" at `step`: the request rebuilt from the log — header, messages,
        the exact wire body — with what was sent and the step's usage; `diff` adds a unified
        diff against the previous step's request."""
        return await self.session_request(SessionRequestParams(session_id=session_id, step=step, diff=diff or None))

    async def usage(self, session_id: str) -> SessionUsageResult:
        """Per-step usage, cache hits and why they dropped, and costs at the configured prices."""
        return await self.session_usage(SessionParams(session_id=session_id))

    async def audit(self, session_id: str) -> SessionAuditResult:
        """Rebuilds every step's request from the log and compares it with what was sent."""
        return await self.session_audit(SessionParams(session_id=session_id))

    async def list(self, workspace: str | os.PathLike[str] | None = None) -> builtins.list[SessionSummary]:
        """The sessions of `workspace` (made absolute), or of every workspace, oldest first."""
        path = os.path.abspath(workspace) if workspace is not None else None
        return (await self.session_list(SessionListParams(workspace=path))).sessions

    async def status(self) -> DaemonStatusResult:
        """The daemon's status: version, pid, home, profiles, loaded sessions, sandbox."""
        return await self.daemon_status()

    async def respond(self, session_id: str, approval_id: str, decision: ApprovalChoice) -> bool:
        """Answers an approval request; whether the answer reached a waiting tool call."""
        params = ApprovalRespondParams(session_id=session_id, approval_id=approval_id, decision=decision)
        return (await self.approval_respond(params)).accepted

    async def shutdown(self) -> bool:
        """Stops the daemon (running turns are cancelled and logged as such)."""
        return (await self.daemon_shutdown()).stopping

    # ---- subscriptions -----------------------------------------------------------------

    def _on_event(self, params: Any) -> None:
        if not isinstance(params, dict):
            return
        key = str(params.get("subscription"))
        stream = self._streams.get(key)
        if stream is not None:
            stream._push(params.get("result"))
        elif self._subscribing:
            # An event can overtake the answer to its `session/subscribe`: kept for the stream
            # that is about to claim it.
            self._early.setdefault(key, []).append(params.get("result"))

    def _on_close(self, closed: ConnectionClosed) -> None:
        for stream in list(self._streams.values()):
            stream._end(None if self._closing else closed)
        self._streams.clear()


class EventStream:
    """One session's events, stored then live, as typed :class:`~dsh_client.protocol.SessionEvent`
    classes (``StepStartEvent``, ``ToolCallEvent``...; :class:`UnknownEvent` for a kind this
    client does not know). ``async for event in stream``; ``async with`` subscribes on entry and
    unsubscribes on exit."""

    def __init__(self, client: Client, session_id: str, from_seq: int) -> None:
        self.session_id = session_id
        self.from_seq = from_seq
        self.subscription: str | int | None = None
        """The subscription id, once subscribed."""
        self._client = client
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._done = False
        self._opened = False

    async def open(self) -> None:
        """Subscribes (iterating does it when not done yet)."""
        if self._opened:
            return
        self._opened = True
        client = self._client
        client._subscribing += 1
        try:
            self.subscription = await client.session_subscribe(
                SessionSubscribeParams(session_id=self.session_id, from_seq=self.from_seq)
            )
            key = str(self.subscription)
            for early in client._early.pop(key, []):
                self._push(early)
            if self._done:
                return
            client._streams[key] = self
        finally:
            client._subscribing -= 1
            if not client._subscribing:
                client._early.clear()

    async def close(self) -> None:
        """Unsubscribes; iteration ends after the events already received."""
        if self._done:
            return
        self._end(None)
        if self.subscription is None:
            return
        self._client._streams.pop(str(self.subscription), None)
        if self._client.connection.closed is None:
            with contextlib.suppress(DshError):
                await self._client.session_unsubscribe([self.subscription])

    async def __aenter__(self) -> EventStream:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> SessionEvent:
        if not self._opened:
            await self.open()
        item = await self._queue.get()
        if isinstance(item, _End):
            # Keep ending: a second loop over a finished stream ends at once too.
            self._queue.put_nowait(item)
            if item.error is not None:
                raise item.error
            raise StopAsyncIteration
        try:
            return decode_session_event(item)
        except DecodeError as error:
            raise ProtocolError(f"{Methods.SESSION_EVENT}: an event does not decode: {error}") from None

    def _push(self, raw: Any) -> None:
        if not self._done:
            self._queue.put_nowait(raw)

    def _end(self, error: ConnectionClosed | None) -> None:
        if not self._done:
            self._done = True
            self._queue.put_nowait(_End(error))


@dataclasses.dataclass(frozen=True)
class _End:
    error: ConnectionClosed | None


class _TurnWatcher:
    """Reads a turn's events for :meth:`Client.prompt`: answers approvals by the callback and
    hands each event to `on_event`."""

    def __init__(
        self,
        client: Client,
        stream: EventStream,
        on_approval: ApprovalCallback | None,
        on_event: EventCallback | None,
    ) -> None:
        self._client = client
        self._stream = stream
        self._on_approval = on_approval
        self._on_event = on_event
        self._turns_ended: set[int] = set()
        self._turn_ended = asyncio.Event()
        self.turn: int | None = None
        """The prompt's turn, once its answer names it: reading stops at its end."""
        self.error: BaseException | None = None
        """The first exception of a callback, raised once the turn is over."""

    async def run(self) -> None:
        async for event in self._stream:
            if self._on_event is not None:
                try:
                    await _maybe_await(self._on_event(event))
                except Exception as error:  # noqa: BLE001 - raised once the turn is over
                    self.error = self.error or error
            if isinstance(event, ApprovalRequestEvent) and self._on_approval is not None:
                await self._approve(event)
            if isinstance(event, TurnEndEvent):
                self._turns_ended.add(event.data.turn)
                self._turn_ended.set()
                if self.turn is not None and event.data.turn >= self.turn:
                    return

    async def wait_turn_end(self, turn: int) -> None:
        while turn not in self._turns_ended:
            self._turn_ended.clear()
            await self._turn_ended.wait()

    async def _approve(self, event: ApprovalRequestEvent) -> None:
        assert self._on_approval is not None
        decision: ApprovalChoice = "deny"
        try:
            decision = await _maybe_await(self._on_approval(event))
        except Exception as error:  # noqa: BLE001 - raised once the turn is over
            self.error = self.error or error
        with contextlib.suppress(RpcError):
            # Refused when another client answered first, or the approval timed out.
            await self._client.respond(event.session_id, event.data.approval_id, decision)


async def _maybe_await(value: _T | Awaitable[_T]) -> _T:
    if inspect.isawaitable(value):
        return await value
    return value


async def _spawn(options: _Options) -> tuple[Connection, _Bridge]:
    executable = options.dsh
    if os.sep not in executable:
        found = shutil.which(executable, path=options.env.get("PATH", os.defpath))
        if found is None:
            raise DshNotFound(
                f"dsh binary not found: no `{executable}` on PATH; install dsh (`cargo install --path server/cli`) "
                "or pass connect(dsh=...) the path of the binary"
            )
        executable = found
    argv = options.argv(executable)
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=options.env,
            limit=MAX_LINE,
        )
    except (FileNotFoundError, PermissionError, NotADirectoryError) as error:
        raise DshNotFound(f"dsh binary not found or not runnable: {executable}: {error.strerror or error}") from None
    assert process.stdout is not None and process.stdin is not None
    bridge = _Bridge(process, argv)
    connection = Connection(process.stdout, process.stdin, closing=bridge.ended, trace=options.trace)
    return connection, bridge


async def _open_socket(options: _Options) -> Connection:
    assert options.socket is not None
    path = os.fspath(options.socket)
    try:
        reader, writer = await asyncio.open_unix_connection(path, limit=MAX_LINE)
    except (FileNotFoundError, ConnectionRefusedError) as error:
        raise DaemonNotRunning(
            f"no dsh daemon listens on {path} ({error.strerror or error}): start one with `dsh serve`, "
            "or connect() without `socket` to spawn `dsh stdio`, which starts one"
        ) from None

    async def closing() -> str:
        return f"the dsh daemon closed the connection on {path}"

    return Connection(reader, writer, closing=closing, trace=options.trace)
