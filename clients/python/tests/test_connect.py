"""Connecting: spawning `dsh stdio`, the Unix socket, the handshake, and the typed errors of a
connection that cannot be made."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

import dsh_client
from dsh_client.errors import INVALID_PARAMS, METHOD_NOT_FOUND
from dsh_client.protocol import EVENT_KINDS, PROTOCOL_VERSION, Api, ErrorCodes, Methods, SessionCreateParams

from conftest import World


async def test_connect_spawns_dsh_stdio_which_starts_the_daemon_and_initializes(client: dsh_client.Client, world: World) -> None:
    assert client.info.server_info.name == "dsh"
    assert client.info.protocol_version == PROTOCOL_VERSION
    assert list(client.info.capabilities.event_kinds) == list(EVENT_KINDS)
    status = await client.status()
    assert status.home == world.home
    assert status.protocol_version == PROTOCOL_VERSION


async def test_every_method_the_daemon_serves_has_a_typed_coroutine(client: dsh_client.Client) -> None:
    served = set(client.info.capabilities.methods)
    notifications = {Methods.SESSION_EVENT, Methods.DAEMON_NOTICE, Methods.WORKSPACE_CHANGED, Methods.WORKSPACE_TURN_STARTED}
    typed = {name for key, name in vars(Methods).items() if key.isupper()} - notifications
    assert typed <= served
    for method in typed:
        assert callable(getattr(Api, re.sub("[A-Z/]", lambda c: "_" + c[0].lower().strip("/"), method))), method
    # The schema leaves this one out (it is not in the Rust method table the schema is made
    # from), so the generated types cannot have it.
    assert served - typed == {"daemon/unsubscribe"}


def test_the_home_and_the_socket_are_found_as_the_cli_finds_them() -> None:
    home = dsh_client.resolve_home
    assert home({"DSH_HOME": "/h", "XDG_STATE_HOME": "/x", "HOME": "/u"}) == Path("/h")
    assert home({"DSH_HOME": "", "XDG_STATE_HOME": "/x", "HOME": "/u"}) == Path("/x/dsh")
    assert home({"XDG_STATE_HOME": "relative", "HOME": "/u"}) == Path("/u/.local/state/dsh")
    assert home({"HOME": "/u"}) == Path("/u/.local/state/dsh")
    with pytest.raises(dsh_client.DshError, match="DSH_HOME"):
        home({})
    assert dsh_client.default_socket(env={"DSH_HOME": "/h"}) == Path("/h/dsh.sock")
    assert dsh_client.default_socket("/other") == Path("/other/dsh.sock")


async def test_the_unix_socket_reaches_the_running_daemon(client: dsh_client.Client, world: World) -> None:
    socket = dsh_client.default_socket(env={"DSH_HOME": world.home})
    async with dsh_client.connect(socket=socket) as direct:
        assert (await direct.status()).pid == (await client.status()).pid
        assert direct.info.protocol_version == PROTOCOL_VERSION


async def test_a_socket_nobody_listens_on_is_daemon_not_running(tmp_path: Path) -> None:
    with pytest.raises(dsh_client.DaemonNotRunning, match="dsh serve"):
        await dsh_client.connect(socket=tmp_path / "dsh.sock")


async def test_a_missing_binary_is_dsh_not_found(tmp_path: Path, world: World) -> None:
    with pytest.raises(dsh_client.DshNotFound, match="not found"):
        await dsh_client.connect(dsh=tmp_path / "dsh", env=world.env)
    with pytest.raises(dsh_client.DshNotFound, match="no `dsh` on PATH"):
        await dsh_client.connect(env={"PATH": str(tmp_path)})


async def test_a_binary_that_dies_at_once_is_a_start_error_quoting_its_stderr(tmp_path: Path) -> None:
    fake = tmp_path / "dsh"
    fake.write_text("#!/bin/sh\necho 'cannot start: the disk is on fire' >&2\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(dsh_client.StartError, match="exited with code 3: cannot start: the disk is on fire"):
        await dsh_client.connect(dsh=fake)


async def test_a_bridge_that_never_answers_is_a_start_error_after_the_timeout(tmp_path: Path) -> None:
    fake = tmp_path / "dsh"
    fake.write_text("#!/bin/sh\necho 'waiting for a lock' >&2\nexec sleep 30\n")
    fake.chmod(0o755)
    with pytest.raises(dsh_client.StartError, match=r"did not answer `initialize` within 0.5 s; .* is still running: waiting for a lock"):
        await dsh_client.connect(dsh=fake, timeout=0.5)


async def test_a_refused_protocol_version_is_a_typed_error(world: World) -> None:
    with pytest.raises(dsh_client.ProtocolVersionRefused) as refused:
        await world.connect(protocol_version=PROTOCOL_VERSION + 1)
    assert refused.value.code == ErrorCodes.UNSUPPORTED_PROTOCOL
    assert refused.value.name == "UNSUPPORTED_PROTOCOL"
    assert f"protocol version {PROTOCOL_VERSION + 1} is not supported" in refused.value.message
    assert isinstance(refused.value, dsh_client.RpcError)


async def test_error_answers_are_rpc_errors_with_the_protocols_codes(client: dsh_client.Client, world: World) -> None:
    with pytest.raises(dsh_client.RpcError) as missing:
        await client.prompt("no-such-session", "hi")
    assert (missing.value.code, missing.value.name) == (ErrorCodes.SESSION_NOT_FOUND, "SESSION_NOT_FOUND")
    assert missing.value.method == "session/prompt"
    assert "no session no-such-session" in str(missing.value)

    with pytest.raises(dsh_client.RpcError) as relative:
        await client.session_create(SessionCreateParams(workspace="relative/path"))
    assert relative.value.code == ErrorCodes.INVALID_WORKSPACE

    with pytest.raises(dsh_client.RpcError) as unknown:
        await client.connection.call("session/nope", {})
    assert unknown.value.code == METHOD_NOT_FOUND

    with pytest.raises(dsh_client.RpcError) as bad:
        await client.connection.call(Methods.SESSION_PROMPT, {"sessionId": 3})
    assert bad.value.code == INVALID_PARAMS

    # The connection is still good after errors.
    assert os.path.samefile((await client.status()).home, world.home)
