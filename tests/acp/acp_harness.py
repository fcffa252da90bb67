"""Shared pieces of the ACP tests: the mock provider, a private dsh home, `dsh acp` spawned with
every frame it sends recorded, and the ACP JSON Schema check of those frames."""

import asyncio
import json
import os
import subprocess
import tempfile
import time
import urllib.request


class Mock:
    """`dsh mock --port 0`: the DeepSeek-compatible mock, with its control endpoints."""

    def __init__(self, dsh):
        self.proc = subprocess.Popen([dsh, "mock", "--port", "0"], stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        start = line.index("http://")
        self.url = line[start:].split()[0].rstrip(".,")

    def script(self, replies):
        self._post("/_fake/script", replies)

    def requests(self):
        with urllib.request.urlopen(self.url + "/_fake/requests") as answer:
            return json.load(answer)

    def _post(self, path, body):
        request = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
        )
        with urllib.request.urlopen(request) as answer:
            answer.read()

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


class Env:
    """A private dsh home and workspace, with the mock as provider."""

    def __init__(self, dsh):
        self.dsh = dsh
        self.mock = Mock(dsh)
        self.root = tempfile.mkdtemp(prefix="dsh-acp.")
        self.home = os.path.join(self.root, "home")
        self.ws = os.path.realpath(os.path.join(self.root, "ws"))
        os.makedirs(self.ws)
        self.env = dict(os.environ, DSH_HOME=self.home, DEEPSEEK_API_KEY="sk-test")

    def argv(self, *args):
        return [self.dsh, "--base-url", self.mock.url, *args]

    def run(self, *args):
        return subprocess.run(self.argv(*args), env=self.env, capture_output=True, text=True, check=True)

    def stop(self):
        subprocess.run(self.argv("shutdown"), env=self.env, capture_output=True)
        self.mock.stop()


class Recorder:
    """Both directions of one `dsh acp` process, line by line."""

    def __init__(self):
        self.sent = []  # frames the front sent (dicts), in order
        self.received = []  # frames the front was sent
        self.raw_out = []


async def spawn_acp(env, recorder, flags=(), new_session=False):
    """Starts `dsh FLAGS… acp` and returns (process, writer to it, reader from it) as asyncio
    streams for an SDK's client connection, with every line recorded on the way. With
    `new_session`, the front leads a session and process group of its own, as acpx spawns agents
    (node's `detached: true`)."""
    proc = await asyncio.create_subprocess_exec(
        *env.argv(*flags, "acp"),
        env=env.env,
        start_new_session=new_session,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        limit=16 * 1024 * 1024,
    )
    loop = asyncio.get_running_loop()
    from_agent = asyncio.StreamReader(limit=16 * 1024 * 1024, loop=loop)

    async def pump_out():
        while True:
            line = await proc.stdout.readline()
            if not line:
                from_agent.feed_eof()
                return
            recorder.raw_out.append(line)
            recorder.sent.append(json.loads(line))
            from_agent.feed_data(line)

    # The client writes into a pipe of ours; a task records each line and forwards it.
    read_fd, write_fd = os.pipe()
    transport, protocol = await loop.connect_write_pipe(
        lambda: asyncio.streams.FlowControlMixin(loop=loop), os.fdopen(write_fd, "wb")
    )
    to_agent = asyncio.StreamWriter(transport, protocol, None, loop)
    tap = asyncio.StreamReader(limit=16 * 1024 * 1024, loop=loop)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(tap, loop=loop), os.fdopen(read_fd, "rb"))

    async def pump_in():
        while True:
            line = await tap.readline()
            if not line:
                proc.stdin.close()
                return
            try:
                recorder.received.append(json.loads(line))
            except ValueError:
                recorder.received.append(None)
            proc.stdin.write(line)
            await proc.stdin.drain()

    proc.pumps = [asyncio.create_task(pump_out()), asyncio.create_task(pump_in())]
    return proc, to_agent, from_agent


# The response type of each ACP method whose result the schema describes.
RESPONSES = {
    "initialize": "InitializeResponse",
    "session/new": "NewSessionResponse",
    "session/load": "LoadSessionResponse",
    "session/resume": "ResumeSessionResponse",
    "session/list": "ListSessionsResponse",
    "session/prompt": "PromptResponse",
    "session/set_config_option": "SetSessionConfigOptionResponse",
}


# The params type of each method the front sends.
PARAMS = {
    "session/update": "SessionNotification",
    "session/request_permission": "RequestPermissionRequest",
    "$/cancel_request": "CancelRequestNotification",
}


def validate_frames(schema_path, recorders):
    """Every frame the front sent validates against the ACP v1 JSON Schema: requests and
    notifications by their method's params type, each response against the response type
    of the request it answers, errors as `Error`. Extension results (methods starting with `_`)
    are checked to be objects. Returns the number of frames checked."""
    import jsonschema
    from referencing import Registry, Resource

    with open(schema_path) as f:
        schema = json.load(f)
    resource = Resource.from_contents(schema)
    registry = Registry().with_resource("urn:acp", resource)

    def check(frame, definition):
        validator = jsonschema.Draft202012Validator({"$ref": "urn:acp#/$defs/" + definition}, registry=registry)
        errors = sorted(validator.iter_errors(frame), key=lambda e: e.path)
        if errors:
            raise AssertionError(f"frame does not validate as {definition}: {json.dumps(frame)[:600]}\n{errors[0].message[:600]}")

    envelope = jsonschema.Draft202012Validator(schema, registry=registry)
    checked = 0
    for recorder in recorders:
        asked = {}
        for frame in recorder.received:
            if isinstance(frame, dict) and "method" in frame and "id" in frame:
                asked[json.dumps(frame["id"])] = frame["method"]
        for frame in recorder.sent:
            assert frame.get("jsonrpc") == "2.0", frame
            errors = list(envelope.iter_errors(frame))
            assert not errors, f"not an ACP message: {json.dumps(frame)[:600]}: {errors[0].message[:400]}"
            if "method" in frame:
                # The schema's envelope accepts any params (extension messages), so each
                # method's params are checked against their own type.
                assert frame["method"] in PARAMS, f"the front sent an unexpected method: {frame['method']}"
                check(frame["params"], PARAMS[frame["method"]])
            elif "error" in frame:
                check(frame["error"], "Error")
            else:
                method = asked.get(json.dumps(frame["id"]))
                assert method is not None, f"a response to nothing asked: {frame}"
                if method in RESPONSES:
                    check(frame["result"], RESPONSES[method])
                else:
                    assert method.startswith("_"), method
                    assert isinstance(frame["result"], dict), frame
            checked += 1
    return checked


def wait_until(predicate, timeout=20.0, what="a condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def wait_until_async(predicate, timeout=20.0, what="a condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def descendants(pid):
    """The processes descended from `pid`, found by their parents in /proc."""
    parents = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        parents[int(name)] = int(stat[stat.rindex(")") + 1 :].split()[1])
    found = [pid]
    for parent in found:
        found.extend(child for child, p in parents.items() if p == parent)
    return found[1:]


def kill_like_acpx(pid):
    """What acpx does when it closes an agent: SIGTERM to the agent's process group and to
    every process descended from it."""
    import signal

    tree = descendants(pid)
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    for process in [pid, *tree]:
        try:
            os.kill(process, signal.SIGTERM)
        except ProcessLookupError:
            pass
    return tree
