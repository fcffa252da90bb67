"""The daemon dying under a call: the call fails with `ConnectionClosed`, promptly, and so do the
open event stream and every later call — nothing hangs. The log it leaves still passes the audit.

It runs its own daemon (in a home of its own), since it kills it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import tempfile

import pytest

import dsh_client
from dsh_client.protocol import RequestSentEvent

from conftest import AUDITED, World


async def test_the_daemon_dying_mid_call_fails_the_call_and_the_stream_without_hanging(world: World) -> None:
    # Short: a Unix socket's path has a length limit.
    home = tempfile.mkdtemp(prefix="dsh-py-death.")
    try:
        world.mock.script({"match": {"last_user_contains": "tok-death"}, "content": "never sent", "delay_ms": 60000})
        async with world.connect(home=home) as client:
            session = await client.create(world.ws)
            pid = (await client.status()).pid
            stream = client.events(session)
            await stream.open()
            prompt = asyncio.create_task(client.prompt(session, "wait for me tok-death"))
            async for event in stream:
                if isinstance(event, RequestSentEvent):
                    break
            os.kill(pid, signal.SIGKILL)

            with pytest.raises(dsh_client.ConnectionClosed) as closed:
                await asyncio.wait_for(prompt, 20)
            assert "session/prompt" in str(closed.value)
            assert "the connection to the dsh daemon closed" in str(closed.value)
            with pytest.raises(dsh_client.ConnectionClosed):
                await asyncio.wait_for(stream.__anext__(), 5)
            with pytest.raises(dsh_client.ConnectionClosed):
                await asyncio.wait_for(client.status(), 5)
            assert client.connection.closed is not None

        # A new daemon takes the log over; the turn the dead one left open is closed, and every
        # step it logged rebuilds to what was sent.
        audit = world.dsh("audit", "--json", session, home=home, check=False)
        assert audit.returncode == 0, audit.stderr
        report = json.loads(audit.stdout)
        assert report["ok"] and report["matched"] == report["steps"] == 1, report
        AUDITED.append(session)
    finally:
        world.dsh("shutdown", home=home, check=False)
        shutil.rmtree(home, ignore_errors=True)
