"""The tests' world: `dsh mock` (the DeepSeek-compatible mock provider) on a free port, a private
dsh home and workspace, and a client that spawns `dsh stdio` there (starting the daemon).

Every session a test creates is audited when the test ends (`session/audit`: every step's
request rebuilt from the log equals what was sent), and every one of its events is checked to
decode into the generated types and encode back to the very JSON the daemon sent.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import urllib.request
from dataclasses import dataclass
from typing import Any, AsyncIterator, Iterator

import pytest
import pytest_asyncio

import dsh_client
from dsh_client.protocol import decode_session_event

DSH = os.environ["DSH_BIN"]


class Mock:
    """`dsh mock --port 0` and its control endpoints (docs/mock.md)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([DSH, "mock", "--port", "0"], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        self.url = line[line.index("http://") :].split()[0].rstrip(".,")

    def script(self, *replies: dict[str, Any]) -> None:
        """Queues scripted replies, taken in order by the requests that match them."""
        self._post("/_fake/script", list(replies))

    def requests(self) -> list[dict[str, Any]]:
        """Every request the mock received, with its exact body."""
        with urllib.request.urlopen(self.url + "/_fake/requests") as answer:
            recorded: list[dict[str, Any]] = json.load(answer)
            return recorded

    def _post(self, path: str, body: Any) -> None:
        request = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
        )
        with urllib.request.urlopen(request) as answer:
            answer.read()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait()


@dataclass
class World:
    mock: Mock
    root: str
    home: str
    ws: str
    env: dict[str, str]

    def connect(self, **options: Any) -> Any:
        """`dsh_client.connect` to this world's daemon, sessions going to the mock."""
        settings: dict[str, Any] = {"dsh": DSH, "home": self.home, "env": self.env, "base_url": self.mock.url}
        settings.update(options)
        return dsh_client.connect(**settings)

    def dsh(self, *args: str, home: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Runs the `dsh` CLI on this world's home (or `home`)."""
        argv = [DSH, "--home", home or self.home, *args]
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, check=check)


@pytest.fixture(scope="session")
def world() -> Iterator[World]:
    mock = Mock()
    root = tempfile.mkdtemp(prefix="dsh-python.")
    home = os.path.join(root, "home")
    ws = os.path.realpath(os.path.join(root, "ws"))
    os.makedirs(ws)
    env = dict(os.environ, DEEPSEEK_API_KEY="sk-test", DSH_CONFIG=os.path.join(root, "config.toml"))
    env.pop("DSH_HOME", None)
    world = World(mock, root, home, ws, env)
    yield world
    world.dsh("shutdown", check=False)
    mock.stop()
    shutil.rmtree(root, ignore_errors=True)


AUDITED: list[str] = []
"""The sessions whose audit passed, for the summary."""
ROUND_TRIPS = [0]
"""How many events were decoded and encoded back unchanged."""


def pytest_terminal_summary(terminalreporter: Any) -> None:
    terminalreporter.write_line(
        f"session/audit passed on all {len(AUDITED)} sessions the tests created; "
        f"{ROUND_TRIPS[0]} of their events decoded into the generated types and encoded back unchanged"
    )


async def check_sessions(client: dsh_client.Client, session_ids: set[str]) -> None:
    """Each session passes the audit, and each of its events round-trips through the types."""
    for session_id in sorted(session_ids):
        audit = await client.audit(session_id)
        assert audit.ok and audit.matched == audit.steps, (session_id, audit)
        AUDITED.append(session_id)
        from_seq = 0
        while True:
            page = await client.connection.call("session/events", {"sessionId": session_id, "fromSeq": from_seq, "limit": 1000})
            for raw in page["events"]:
                assert decode_session_event(raw).to_json() == raw, raw
                ROUND_TRIPS[0] += 1
            if page["end"]:
                break
            from_seq = page["nextSeq"]


@pytest_asyncio.fixture
async def client(world: World) -> AsyncIterator[dsh_client.Client]:
    """A client of the world's daemon; the sessions the test creates are checked at its end."""
    async with world.connect() as client:
        before = {summary.session_id for summary in await client.list()}
        yield client
        created = {summary.session_id for summary in await client.list()} - before
        await check_sessions(client, created)
