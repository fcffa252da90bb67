"""The ACP front driven by the Python ACP SDK (PyPI `agent-client-protocol`): `dsh acp` spawned
against the mock provider, every frame it sends validated against the ACP v1 JSON Schema.

    python3 tests/acp/client.py DSH_BIN SCHEMA_JSON [NODE_CLIENT_MJS]

With NODE_CLIENT_MJS, the TypeScript SDK's scenarios (client.mjs) run too, and their frames are
validated with these.

Scenarios: a prompt whose tool call asks permission (allowed), streamed thoughts and text,
end_turn; bad input (relative cwd, unknown methods and notifications, a malformed frame, an
unknown session, a second prompt while one runs); cancel mid-stream; steering mid-turn and when
idle; list; fork at a step; what the model saw; load after the front exited replays what was
streamed live; one live session, two fronts (`dsh sessions`, and a second client subscribed
through `dsh stdio`, sees every event once); MCP servers from the editor (npm server-everything
and the PyPI fixture of tests/mcp, installed by tests/mcp/install.sh): a turn calls a tool,
`session/load` with the same servers resumes byte-identical, one server fewer is one logged tools
delta, SSE and names dsh cannot map are refused; and what acpx found: a client's front killed
with its process group and tree (as acpx closes agents) while another client's turn runs, which
completes; `--model` reaches the request body and the model selector; a prompt is not echoed to
its sender; permission requests carry the call's kind, raw input and locations; flags the running
daemon cannot honour fail `initialize`; `_dsh/rewind`: a dry run lists the files, a file the user
changed refuses the rewind (dsh's code, the file in the error's data) until `force`, the files
are restored, and the fork it answers is opened with `session/load` (the conversation before the
step) and takes the next prompt; refused while a turn runs.
"""

import asyncio
import base64
import json
import os
import subprocess
import sys
import time

import acp
from acp import image_block, text_block
from acp.schema import AllowedOutcome, DeniedOutcome, RequestPermissionResponse

from acp_harness import Env, Recorder, descendants, kill_like_acpx, spawn_acp, validate_frames, wait_until_async

PASSED = []


def check(condition, message):
    if not condition:
        raise AssertionError(message)


class Client:
    """An ACP client that records updates per session and answers permission requests."""

    def __init__(self):
        self.updates = {}
        self.permissions = []
        self.answer = "allow_once"

    async def request_permission(self, session_id, tool_call, options, **kwargs):
        self.permissions.append((session_id, tool_call, [o.option_id for o in options]))
        if self.answer == "hold":
            # Nobody answers here: the front withdraws the request when the turn ends.
            await asyncio.sleep(3)
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        if self.answer is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=self.answer))

    async def session_update(self, session_id, update, **kwargs):
        self.updates.setdefault(session_id, []).append(update.model_dump(mode="json", by_alias=True, exclude_none=True))

    async def write_text_file(self, *args, **kwargs):
        raise acp.RequestError.method_not_found("fs/write_text_file")

    async def read_text_file(self, *args, **kwargs):
        raise acp.RequestError.method_not_found("fs/read_text_file")


async def connect(env, recorder, client, flags=(), new_session=False):
    proc, to_agent, from_agent = await spawn_acp(env, recorder, flags, new_session)
    conn = acp.connect_to_agent(client, to_agent, from_agent)
    init = await conn.initialize(protocol_version=1)
    return proc, conn, init


async def close(proc, conn):
    await conn.close()
    try:
        proc.stdin.close()
    except Exception:
        pass
    await asyncio.wait_for(proc.wait(), 10)
    for pump in proc.pumps:
        pump.cancel()


async def expect_error(awaitable, code=None, contains=None):
    try:
        await awaitable
    except acp.RequestError as error:
        if code is not None:
            check(error.code == code, f"error code {error.code}, expected {code}: {error}")
        if contains is not None:
            check(contains in str(error) or contains in json.dumps(getattr(error, "data", None) or ""), f"{error} lacks {contains!r}")
        return error
    raise AssertionError("expected an error")


def kinds(updates):
    return [u["sessionUpdate"] for u in updates]


def text_of(updates, kind):
    return "".join(u["content"]["text"] for u in updates if u["sessionUpdate"] == kind)


async def main(dsh, schema, node_client):
    env = Env(dsh)
    recorders = []
    try:
        await scenarios(env, recorders)
    finally:
        env.stop()
    env = Env(dsh)
    try:
        await mcp_scenarios(env, recorders)
    finally:
        env.stop()
    env = Env(dsh)
    try:
        await acpx_scenarios(env, recorders)
    finally:
        env.stop()
    env = Env(dsh)
    try:
        await rewind_scenarios(env, recorders)
    finally:
        env.stop()
    env = Env(dsh)
    try:
        await command_scenarios(env, recorders)
    finally:
        env.stop()
    env = Env(dsh)
    try:
        await image_scenarios(env, recorders)
    finally:
        env.stop()
    print(f"python ACP SDK: {len(PASSED)} scenarios passed: {', '.join(PASSED)}")
    if node_client:
        recorders.append(run_node_client(dsh, node_client))
    checked = validate_frames(schema, recorders)
    print(f"ok: {checked} frames the front sent, in both SDKs' runs, validate against {schema}")


def run_node_client(dsh, script):
    """Runs the TypeScript SDK's scenarios (client.mjs) in an environment of their own and
    returns what they recorded."""
    env = Env(dsh)
    frames = os.path.join(env.root, "frames.jsonl")
    try:
        subprocess.run(["node", script, dsh, env.mock.url, env.home, env.ws, frames], env=env.env, check=True)
    finally:
        env.stop()
    recorder = Recorder()
    with open(frames) as f:
        for line in f:
            entry = json.loads(line)
            (recorder.sent if entry["dir"] == "sent" else recorder.received).append(entry["frame"])
    check(len(recorder.sent) > 20, f"the node client recorded {len(recorder.sent)} frames")
    return recorder


async def scenarios(env, recorders):
    recorder = Recorder()
    recorders.append(recorder)
    client = Client()
    proc, conn, init = await connect(env, recorder, client)
    caps = init.agent_capabilities
    check(caps.load_session, "loadSession advertised")
    meta = caps.field_meta or {}
    check(meta["steering"]["method"] == "_session/steering", meta)
    check("_dsh/fork" in meta["dsh"]["methods"], meta)
    check(caps.mcp_capabilities.http and not caps.mcp_capabilities.sse, caps.mcp_capabilities)
    # DeepSeek's models read no images: not advertised.
    check(not caps.prompt_capabilities.image, caps.prompt_capabilities)
    PASSED.append("initialize")

    # Bad input: the front answers each, and stays up.
    await expect_error(conn.new_session(cwd="relative/dir", mcp_servers=[]), code=-32602, contains="absolute")
    await expect_error(conn._conn.send_request("_dsh/nope", {}), code=-32601)
    await expect_error(conn._conn.send_request("session/nope", {}), code=-32601)
    await conn._conn.send_notification("_dsh/unknown", {"x": 1})
    await expect_error(conn.prompt(session_id="no-such-session", prompt=[text_block("hi")]), code=-32002)
    await expect_error(conn.load_session(cwd=env.ws, session_id="no-such-session", mcp_servers=[]), code=-32002)
    proc.stdin.write(b"{this is not json\n")
    await proc.stdin.drain()
    PASSED.append("bad input")

    # A prompt with a tool call that needs permission; thoughts and text stream.
    session = await conn.new_session(cwd=env.ws, mcp_servers=[])
    sid = session.session_id
    env.mock.script(
        [
            {
                "reasoning": "I should write the file.",
                "content": "Writing it now.",
                "tool_calls": [{"name": "write_file", "arguments": {"path": "hello.txt", "content": "hello from acp\n"}}],
            },
            {"reasoning": "Done, say so.", "content": "The file is written."},
        ]
    )
    result = await conn.prompt(session_id=sid, prompt=[text_block("write hello.txt")])
    check(result.stop_reason == "end_turn", result)
    updates = client.updates[sid]
    check(client.permissions and client.permissions[0][2] == ["allow_once", "allow_always", "reject_once"], client.permissions)
    # The permission request describes the call as its tool_call does: kind, raw input, where.
    asked = client.permissions[0][1]
    check(asked.kind == "edit", asked)
    check(asked.raw_input == {"path": "hello.txt", "content": "hello from acp\n"}, asked)
    check([l.path for l in asked.locations] == [os.path.join(env.ws, "hello.txt")], asked)
    # The client's own prompt is not echoed back (user_message_chunk is for replays and for
    # other clients' prompts).
    check(text_of(updates, "user_message_chunk") == "", [u for u in updates if u["sessionUpdate"] == "user_message_chunk"])
    check(text_of(updates, "agent_thought_chunk") == "I should write the file.Done, say so.", text_of(updates, "agent_thought_chunk"))
    check(text_of(updates, "agent_message_chunk") == "Writing it now.The file is written.", text_of(updates, "agent_message_chunk"))
    calls = [u for u in updates if u["sessionUpdate"] == "tool_call"]
    check(len(calls) == 1 and calls[0]["kind"] == "edit" and calls[0].get("status", "pending") == "pending", calls)
    call_id = calls[0]["toolCallId"]
    statuses = [u.get("status") for u in updates if u["sessionUpdate"] == "tool_call_update" and u["toolCallId"] == call_id]
    check([s for s in statuses if s] == ["in_progress", "completed"], statuses)
    final = [u for u in updates if u["sessionUpdate"] == "tool_call_update" and u.get("status") == "completed"][0]
    diff = [c for c in final["content"] if c["type"] == "diff"][0]
    check(diff["path"] == os.path.join(env.ws, "hello.txt") and diff["newText"] == "hello from acp\n", diff)
    check(open(os.path.join(env.ws, "hello.txt")).read() == "hello from acp\n", "the file was written")
    usage = [u for u in updates if u["sessionUpdate"] == "usage_update"]
    check(len(usage) == 2, usage)
    step_usage = usage[0]["_meta"]["dsh/usage"]
    check(step_usage["step"] == 1 and step_usage["inputTokens"] > 0 and "cachedReadTokens" in step_usage, usage)
    check(usage[0]["size"] >= usage[0]["used"] > 0, usage)
    # Prices are known for the default model: each step's cost, and the session's so far.
    first, second = usage[0], usage[1]
    check(first["cost"]["amount"] > 0 and first["cost"]["currency"], first)
    step_cost = second["_meta"]["dsh/usage"]["cost"]["amount"]
    check(abs(second["cost"]["amount"] - first["cost"]["amount"] - step_cost) < 1e-9, (first, second))
    PASSED.append("prompt with permission, thoughts, text, diff, usage")

    # A rejected tool call fails the call, the turn goes on.
    client.answer = "reject_once"
    env.mock.script(
        [
            {"content": "", "tool_calls": [{"name": "run_command", "arguments": {"command": "echo hi"}}]},
            {"content": "Not allowed, fine."},
        ]
    )
    result = await conn.prompt(session_id=sid, prompt=[text_block("run echo")])
    check(result.stop_reason == "end_turn", result)
    failed = [u for u in client.updates[sid] if u["sessionUpdate"] == "tool_call_update" and u.get("status") == "failed"]
    check(len(failed) == 1, failed)
    calls = [u for u in client.updates[sid] if u["sessionUpdate"] == "tool_call"]
    check(calls[-1]["kind"] == "execute", calls)
    check(client.permissions[-1][1].kind == "execute" and client.permissions[-1][1].raw_input == {"command": "echo hi"}, client.permissions[-1][1])
    check(client.permissions[-1][2] == ["allow_once", "allow_unconfined", "allow_always", "reject_once"], client.permissions[-1])
    check("(sandbox: " in client.permissions[-1][1].title, client.permissions[-1][1])
    client.answer = "allow_once"
    PASSED.append("reject")

    # Cancel mid-stream; a second prompt while one runs is refused.
    sent = len(env.mock.requests())
    env.mock.script([{"content": "This takes a long time.", "delay_ms": 4000}])
    running = asyncio.create_task(conn.prompt(session_id=sid, prompt=[text_block("take your time")]))
    await wait_until_async(lambda: len(env.mock.requests()) > sent, what="the request to reach the mock")
    await expect_error(conn.prompt(session_id=sid, prompt=[text_block("me too")]), code=1002)
    await conn.cancel(session_id=sid)
    result = await asyncio.wait_for(running, 15)
    check(result.stop_reason == "cancelled", result)
    PASSED.append("cancel, busy")

    # A permission request left unanswered is withdrawn ($/cancel_request) when the turn is
    # cancelled by another front.
    client.answer = "hold"
    asked = len(client.permissions)
    env.mock.script([{"content": "", "tool_calls": [{"name": "run_command", "arguments": {"command": "echo held"}}]}])
    running = asyncio.create_task(conn.prompt(session_id=sid, prompt=[text_block("run it, held")]))
    await wait_until_async(lambda: len(client.permissions) > asked, what="the permission request")
    await asyncio.to_thread(env.run, "cancel", sid)
    result = await asyncio.wait_for(running, 15)
    check(result.stop_reason == "cancelled", result)
    asks = [f for f in recorder.sent if f.get("method") == "session/request_permission"]
    withdrawn = [f for f in recorder.sent if f.get("method") == "$/cancel_request"]
    check(withdrawn and withdrawn[-1]["params"]["requestId"] == asks[-1]["id"], withdrawn)
    client.answer = "allow_once"
    PASSED.append("unanswered permission withdrawn when the turn is cancelled elsewhere")

    # Steering: idle, it asks for a prompt; mid-turn it is injected into the next request.
    idle = await conn._conn.send_request("_session/steering", {"sessionId": sid, "prompt": [{"type": "text", "text": "x"}]})
    check(idle == {"outcome": "promptRequired", "reason": "noRunningTurn"}, idle)
    sent = len(env.mock.requests())
    env.mock.script(
        [
            {"content": "Looking around first.", "tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}], "delay_ms": 1500},
            {"content": "Steered."},
        ]
    )
    running = asyncio.create_task(conn.prompt(session_id=sid, prompt=[text_block("look around")]))
    await wait_until_async(lambda: len(env.mock.requests()) > sent, what="the first request of the turn")
    steer_text = "use the other API please"
    steered = await conn._conn.send_request(
        "_session/steering",
        {"sessionId": sid, "prompt": [{"type": "text", "text": steer_text}], "_meta": {"steering": {"idleBehavior": "promptRequired"}}},
    )
    check(steered["outcome"] == "injected", steered)
    result = await asyncio.wait_for(running, 20)
    check(result.stop_reason == "end_turn", result)
    bodies = [r["body"] for r in env.mock.requests()[sent:]]
    check(len(bodies) == 2, len(bodies))
    check(steer_text not in bodies[0] and steer_text in bodies[1], "the steering text joins the next request, not the current one")
    steering = [u for u in client.updates[sid] if u["sessionUpdate"] == "user_message_chunk" and (u.get("_meta") or {}).get("dsh/steering")]
    check(steering and steering[0]["content"]["text"] == steer_text, steering)
    PASSED.append("steering")

    # What the model saw: step N's wire body equals the mock's recorded body.
    last_step = max(u["_meta"]["dsh/usage"]["step"] for u in client.updates[sid] if u["sessionUpdate"] == "usage_update")
    saw = await conn._conn.send_request("_dsh/request", {"sessionId": sid, "step": last_step})
    check(saw["wire"]["body"] == env.mock.requests()[-1]["body"], "what the model saw equals the recorded body")
    check(saw["sent"]["sha256"] == saw["wire"]["sha256"], saw["sent"])
    PASSED.append("what the model saw")

    # List, with the cwd filter.
    listed = await conn.list_sessions(cwd=env.ws)
    check([s.session_id for s in listed.sessions] == [sid], listed)
    check(listed.sessions[0].title == "write hello.txt", listed.sessions[0])
    other = await conn.list_sessions(cwd="/nonexistent-dir")
    check(other.sessions == [], other)
    PASSED.append("list")

    # One live session, two fronts: `dsh sessions` shows it, and a second client subscribed
    # through `dsh stdio` sees the next turn's events once each, in order, none missing.
    shown = env.run("sessions", "--workspace", env.ws, "--json")
    check(sid in shown.stdout, shown.stdout)
    second = subprocess.Popen(env.argv("stdio"), env=env.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    second.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"clientInfo": {"name": "second"}, "protocolVersion": 1}}) + "\n")
    second.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "session/subscribe", "params": {"sessionId": sid, "fromSeq": 0}}) + "\n")
    second.stdin.flush()
    env.mock.script([{"content": "Seen by both fronts."}])
    result = await conn.prompt(session_id=sid, prompt=[text_block("two fronts")])
    check(result.stop_reason == "end_turn", result)
    length = None
    seqs = []
    second.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 3, "method": "session/events", "params": {"sessionId": sid, "fromSeq": 0, "limit": 0}}) + "\n")
    second.stdin.flush()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        message = json.loads(second.stdout.readline())
        if message.get("id") == 3:
            length = message["result"]["length"]
        elif message.get("method") == "session/event":
            seqs.append(message["params"]["result"]["seq"])
        if length is not None and seqs and seqs[-1] == length - 1:
            break
    second.stdin.close()
    second.wait()
    check(seqs == list(range(length)), f"the second front saw {len(seqs)} events for a log of {length}")
    PASSED.append("two fronts")

    # Fork before the last step; the fork is a session of its own.
    forked = await conn._conn.send_request("_dsh/fork", {"sessionId": sid, "step": last_step})
    fork_id = forked["sessionId"]
    check(fork_id != sid, forked)
    listed = await conn.list_sessions(cwd=env.ws)
    check(fork_id in [s.session_id for s in listed.sessions], listed)
    PASSED.append("fork")

    # Plans: update_plan twice (the second with a step completed) between a call refused for
    # two steps in progress; each valid call is one `plan` update with every entry, the refused
    # one a failed tool call the model reads. The plan asks no permission.
    asked = len(client.permissions)
    plan_call = lambda plan, **more: {"content": "", "tool_calls": [{"name": "update_plan", "arguments": {"plan": plan, **more}}]}
    env.mock.script(
        [
            plan_call([{"step": "Look", "status": "in_progress"}, {"step": "Answer", "status": "pending"}], explanation="Two steps."),
            plan_call([{"step": "Look", "status": "in_progress"}, {"step": "Answer", "status": "in_progress"}]),
            plan_call([{"step": "Look", "status": "completed"}, {"step": "Answer", "status": "in_progress"}]),
            {"content": "Planned and done."},
        ]
    )
    result = await conn.prompt(session_id=sid, prompt=[text_block("plan it")])
    check(result.stop_reason == "end_turn", result)
    check(len(client.permissions) == asked, client.permissions[asked:])
    plans = [u for u in client.updates[sid] if u["sessionUpdate"] == "plan"]
    entries = [[(e["content"], e["status"]) for e in p["entries"]] for p in plans]
    check(entries == [[("Look", "in_progress"), ("Answer", "pending")], [("Look", "completed"), ("Answer", "in_progress")]], entries)
    check(plans[0]["_meta"]["dsh/plan"]["explanation"] == "Two steps." and "explanation" not in plans[1]["_meta"]["dsh/plan"], plans)
    plan_calls = [u for u in client.updates[sid] if u["sessionUpdate"] == "tool_call" and u["title"] == "update_plan"]
    check(len(plan_calls) == 3 and all(u["kind"] == "think" for u in plan_calls), plan_calls)
    refused = [u for u in client.updates[sid] if u["sessionUpdate"] == "tool_call_update" and u["toolCallId"] == plan_calls[1]["toolCallId"] and u.get("status") == "failed"]
    check(refused and "at most one step may be in_progress" in refused[0]["rawOutput"]["content"], refused)
    check("at most one step may be in_progress" in env.mock.requests()[-2]["body"], "the model saw the refusal")
    PASSED.append("plan updates live")

    # A sub-agent (docs/subagents.md): a `task` call is a `think` tool call; the moment its
    # child session exists an update names it in `_meta`, and the call completes with the
    # child's answer and the line on its spend.
    env.mock.script(
        [
            {"match": {"last_user_contains": "delegate it"}, "content": "", "tool_calls": [{"name": "task", "arguments": {"description": "look around", "prompt": "CHILD: say hi", "context": "fresh"}}]},
            {"match": {"last_user_contains": "CHILD: say hi"}, "content": "", "tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]},
            # The answer waits: the first step's progress reaches the client while the child runs.
            {"match": {"last_user_contains": "CHILD: say hi"}, "content": "hi from the child", "delay_ms": 1500},
            {"match": {"last_user_contains": "delegate it"}, "content": "Delegated."},
        ]
    )
    result = await conn.prompt(session_id=sid, prompt=[text_block("delegate it")])
    check(result.stop_reason == "end_turn", result)
    task_calls = [u for u in client.updates[sid] if u["sessionUpdate"] == "tool_call" and u["title"] == "task"]
    check(len(task_calls) == 1 and task_calls[0]["kind"] == "think", task_calls)
    task_id = task_calls[0]["toolCallId"]
    of_task = [u for u in client.updates[sid] if u["sessionUpdate"] == "tool_call_update" and u["toolCallId"] == task_id]
    spawned = [u for u in of_task if "dsh/task" in (u.get("_meta") or {})]
    check(len(spawned) == 1 and spawned[0]["_meta"]["dsh/task"]["context"] == "fresh", spawned)
    child = spawned[0]["_meta"]["dsh/task"]["sessionId"]
    done = [u for u in of_task if u.get("status") == "completed"]
    check(done and "hi from the child" in json.dumps(done[0]) and f"[sub-agent {child} (fresh)" in json.dumps(done[0]), done)
    # The child's progress: a line per step it ended, naming its session, before the result.
    progress = [u for u in of_task if "dsh/taskProgress" in (u.get("_meta") or {})]
    check(progress and all(u["_meta"]["dsh/taskProgress"]["sessionId"] == child for u in progress), of_task)
    check(of_task.index(progress[0]) < of_task.index(done[0]), of_task)
    first = json.dumps(progress[0]["content"])
    check("sub-agent step 1: list_dir" in first and " tokens" in first, progress[0])
    PASSED.append("a task call: its child's steps as progress updates before the result")
    PASSED.append("a task call: a think call naming its child session, live and on load")

    # A child's progress is live only (a replay shows each call's result).
    live = [u for u in client.updates[sid] if "dsh/taskProgress" not in (u.get("_meta") or {})]
    await close(proc, conn)

    # Load after the front exited: the replay equals what was streamed live.
    recorder = Recorder()
    recorders.append(recorder)
    client = Client()
    proc, conn, _ = await connect(env, recorder, client)
    await conn.load_session(cwd=env.ws, session_id=sid, mcp_servers=[])
    replayed = client.updates.get(sid, [])
    # The replay is the live stream with the prompts (which their sender was not sent back).
    prompts = [u for u in replayed if u["sessionUpdate"] == "user_message_chunk" and not (u.get("_meta") or {}).get("dsh/steering")]
    check(prompts[0]["content"]["text"] == "write hello.txt", prompts)
    rest = [u for u in replayed if u not in prompts]
    check(kinds(rest) == kinds(live), f"{len(rest)} replayed vs {len(live)} live updates")
    check(rest == live, "replayed updates equal the live ones, prompts aside")
    check([u for u in replayed if u["sessionUpdate"] == "plan"] == plans, "the plan updates replay on load")
    # The fork replays its parent's conversation up to the fork point.
    await conn.load_session(cwd=env.ws, session_id=fork_id, mcp_servers=[])
    fork_updates = client.updates[fork_id]
    check(text_of(fork_updates, "user_message_chunk").startswith("write hello.txt"), "the fork starts with the parent's prompts")
    check("Seen by both fronts." not in text_of(fork_updates, "agent_message_chunk"), "the fork ends before the cut")
    # The loaded session takes prompts again.
    env.mock.script([{"content": "Back again."}])
    result = await conn.prompt(session_id=sid, prompt=[text_block("again")])
    check(result.stop_reason == "end_turn", result)
    PASSED.append("load replays live (plans too); fork loads")

    # Closing stdin ends the front, never the turn: a turn started by a closed front finishes.
    env.mock.script([{"content": "Finished without the front.", "delay_ms": 1000}])
    sent = len(env.mock.requests())
    running = asyncio.create_task(conn.prompt(session_id=sid, prompt=[text_block("finish alone")]))
    await wait_until_async(lambda: len(env.mock.requests()) > sent, what="the request to reach the mock")
    running.cancel()
    await close(proc, conn)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        listed = json.loads(env.run("sessions", "--workspace", env.ws, "--json").stdout)
        entry = [s for s in listed["sessions"] if s["sessionId"] == sid][0] if isinstance(listed, dict) else [s for s in listed if s["sessionId"] == sid][0]
        if not entry["running"]:
            break
        await asyncio.sleep(0.1)
    events = env.run("usage", sid, "--json")
    check(events.returncode == 0, events)
    recorder = Recorder()
    recorders.append(recorder)
    client = Client()
    proc, conn, _ = await connect(env, recorder, client)
    await conn.load_session(cwd=env.ws, session_id=sid, mcp_servers=[])
    check("Finished without the front." in text_of(client.updates[sid], "agent_message_chunk"), "the turn finished after its front left")
    await close(proc, conn)
    PASSED.append("stdin's end ends the front, not the turn")


async def image_scenarios(env, recorders):
    """Images: advertised (`promptCapabilities.image`) when the profile's model reads them, an
    image block reaches the model as an `image_url` data URL after the text, the log names it by
    hash, and a prompt whose image is no image is refused before anything is logged."""
    config = os.path.join(env.root, "config.toml")
    with open(config, "w") as file:
        file.write(
            'profile = "vision"\n\n[providers.vision]\nkind = "openai-compatible"\n'
            f'base_url = "{env.mock.url}"\napi_key_env = "DEEPSEEK_API_KEY"\nmodel = "mock-vision"\n\n'
            "[providers.vision.models.mock-vision]\nthinking = false\nimages = true\n"
        )
    env.env["DSH_CONFIG"] = config
    recorder = Recorder()
    recorders.append(recorder)
    client = Client()
    proc, conn, init = await connect(env, recorder, client)
    check(init.agent_capabilities.prompt_capabilities.image, init.agent_capabilities.prompt_capabilities)
    sid = (await conn.new_session(cwd=env.ws, mcp_servers=[])).session_id
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4).decode()
    result = await conn.prompt(
        session_id=sid,
        prompt=[text_block("what is on this screenshot?"), image_block(png, "image/png", uri="file:///tmp/shot.png")],
    )
    check(result.stop_reason == "end_turn", result)
    body = json.loads(env.mock.requests()[-1]["body"])
    parts = body["messages"][-1]["content"]
    check(parts[0] == {"type": "text", "text": "what is on this screenshot?"}, parts)
    check(parts[1]["image_url"]["url"] == "data:image/png;base64," + png, parts[1]["image_url"]["url"][:80])
    prompts = [e["data"] for e in log_events(env, sid) if e["type"] == "user/message"]
    check(len(prompts) == 1 and prompts[0]["images"][0]["name"] == "shot.png", prompts)
    check(png[:40] not in json.dumps(log_events(env, sid)), "the log holds the hash, not the bytes")
    sent = len(env.mock.requests())
    svg = base64.b64encode(b"<svg/>").decode()
    await expect_error(
        conn.prompt(session_id=sid, prompt=[text_block("and this?"), image_block(svg, "image/png")]),
        code=-32602,
        contains="is not an image",
    )
    check(len(env.mock.requests()) == sent, "nothing was sent")
    check(len([e for e in log_events(env, sid) if e["type"] == "user/message"]) == 1, "nothing was logged")
    await close(proc, conn)
    PASSED.append("images")


async def rewind_scenarios(env, recorders):
    """`_dsh/rewind`, then continuing in the fork it answers."""
    recorder = Recorder()
    recorders.append(recorder)
    client = Client()
    proc, conn, init = await connect(env, recorder, client)
    check("_dsh/rewind" in init.agent_capabilities.field_meta["dsh"]["methods"], init.agent_capabilities.field_meta)
    notes, extra = os.path.join(env.ws, "notes.txt"), os.path.join(env.ws, "extra.txt")
    with open(notes, "w") as f:
        f.write("by hand\n")
    sid = (await conn.new_session(cwd=env.ws, mcp_servers=[])).session_id
    env.mock.script(
        [
            {"content": "Rewriting the notes.", "tool_calls": [{"name": "write_file", "arguments": {"path": "notes.txt", "content": "by the agent\n"}}]},
            {"content": "", "tool_calls": [{"name": "write_file", "arguments": {"path": "extra.txt", "content": "new\n"}}]},
            {"content": "Done."},
        ]
    )
    result = await conn.prompt(session_id=sid, prompt=[text_block("rewrite the notes")])
    check(result.stop_reason == "end_turn", result)
    check(open(notes).read() == "by the agent\n" and os.path.exists(extra), "the turn wrote both files")

    def rewind(**params):
        return conn._conn.send_request("_dsh/rewind", {"sessionId": sid, "step": 1, **params})

    plan = await rewind(dryRun=True)
    check((plan["restored"], plan["created"], plan["deleted"], plan["conflicts"]) == (["notes.txt"], [], ["extra.txt"], []), plan)
    check(plan["dryRun"] and plan["sessionId"] == sid, plan)
    check(open(notes).read() == "by the agent\n", "a dry run changes nothing")
    PASSED.append("rewind: dry run")

    # The user edits notes.txt by hand: refused, naming it, until force.
    with open(notes, "w") as f:
        f.write("edited by hand\n")
    refused = await expect_error(rewind(), code=1015)
    check(refused.data == {"conflicts": ["notes.txt"]}, refused.data)
    check(open(notes).read() == "edited by hand\n", "a refused rewind changes nothing")
    done = await rewind(force=True)
    check(open(notes).read() == "by hand\n" and not os.path.exists(extra), "the files are back as before step 1")
    check(done["conflicts"] == ["notes.txt"] and not done["dryRun"], done)
    fork = done["sessionId"]
    check(fork != sid, done)
    PASSED.append("rewind: conflict, force, files restored")

    # The fork continues: session/load replays the conversation before step 1, then a prompt.
    await conn.load_session(cwd=env.ws, session_id=fork, mcp_servers=[])
    replay = client.updates.get(fork, [])
    check(text_of(replay, "user_message_chunk") == "rewrite the notes", replay)
    check("Rewriting the notes." not in text_of(replay, "agent_message_chunk"), "the fork ends before step 1")
    env.mock.script([{"content": "Starting over."}])
    result = await conn.prompt(session_id=fork, prompt=[text_block("only the notes, then")])
    check(result.stop_reason == "end_turn", result)
    check(text_of(client.updates[fork], "agent_message_chunk").endswith("Starting over."), client.updates[fork])
    body = env.mock.requests()[-1]["body"]
    check("rewrite the notes" in body and "only the notes, then" in body and "by the agent" not in body, body)
    # The rewound session is history, unchanged: its conversation still has step 1.
    check("Rewriting the notes." in text_of(client.updates[sid], "agent_message_chunk"), "the original keeps its steps")
    PASSED.append("rewind: the fork loads and continues")

    # Bad input, and a turn running.
    await expect_error(conn._conn.send_request("_dsh/rewind", {"sessionId": sid}), code=-32602)
    await expect_error(rewind(step=99), code=1003)
    await expect_error(rewind(bogus=True), code=-32602, contains="bogus")
    env.mock.script([{"content": "Slowly.", "delay_ms": 3000}])
    sent = len(env.mock.requests())
    running = asyncio.create_task(conn.prompt(session_id=fork, prompt=[text_block("take your time")]))
    await wait_until_async(lambda: len(env.mock.requests()) > sent, what="the request to reach the mock")
    busy = await expect_error(conn._conn.send_request("_dsh/rewind", {"sessionId": fork, "step": 1}), code=1002)
    check("cancel" in str(busy), busy)
    await conn.cancel(session_id=fork)
    check((await asyncio.wait_for(running, 15)).stop_reason == "cancelled", "cancelled")
    await close(proc, conn)
    PASSED.append("rewind: bad input, refused while a turn runs")


async def acpx_scenarios(env, recorders):
    """What acpx found: two clients of one daemon, the one that started it closed the way acpx
    closes agents (SIGTERM to the front's process group and every process descended from it)
    while the other's turn runs; `--model` and `--provider` reach the sessions a front creates;
    flags the running daemon cannot honour fail `initialize`."""
    # Client A starts `dsh acp` (and so the daemon) as acpx does: a session of its own.
    recorder = Recorder()
    recorders.append(recorder)
    first = Client()
    proc_a, conn_a, _ = await connect(env, recorder, first, new_session=True)
    session_a = (await conn_a.new_session(cwd=env.ws, mcp_servers=[])).session_id
    daemon = int(open(os.path.join(env.home, "daemon.lock")).read())
    check(daemon not in descendants(proc_a.pid), "the daemon descends from the front that started it")

    # Client B, on another model, runs a slow turn.
    recorder = Recorder()
    recorders.append(recorder)
    second = Client()
    proc_b, conn_b, _ = await connect(env, recorder, second, flags=("--model", "deepseek-v4-pro"))
    session = await conn_b.new_session(cwd=env.ws, mcp_servers=[])
    sid = session.session_id
    (model,) = [o for o in session.config_options if o.category == "model"]
    check(model.current_value == "deepseek-v4-pro", model)
    same = await conn_b._conn.send_request("session/set_config_option", {"sessionId": sid, "configId": "model", "value": "deepseek-v4-pro"})
    check(same["configOptions"][0]["currentValue"] == "deepseek-v4-pro", same)
    await expect_error(
        conn_b._conn.send_request("session/set_config_option", {"sessionId": sid, "configId": "model", "value": "deepseek-v4-flash"}),
        code=-32602,
        contains="dsh acp --model",
    )
    sent = len(env.mock.requests())
    env.mock.script([{"content": "Done, whatever happened to the other client.", "delay_ms": 1500}])
    running = asyncio.create_task(conn_b.prompt(session_id=sid, prompt=[text_block("keep going")]))
    await wait_until_async(lambda: len(env.mock.requests()) > sent, what="B's request to reach the mock")
    killed = kill_like_acpx(proc_a.pid)
    check(daemon not in killed, "the kill reached the daemon")
    await asyncio.wait_for(proc_a.wait(), 10)
    await conn_a.close()
    for pump in proc_a.pumps:
        pump.cancel()
    result = await asyncio.wait_for(running, 20)
    check(result.stop_reason == "end_turn", result)
    check("whatever happened" in text_of(second.updates[sid], "agent_message_chunk"), second.updates[sid])
    check(text_of(second.updates[sid], "user_message_chunk") == "", "B's own prompt was echoed to B")
    body = json.loads(env.mock.requests()[-1]["body"])
    check(body["model"] == "deepseek-v4-pro", body["model"])
    check(os.path.exists(f"/proc/{daemon}"), "the daemon died with client A's front")
    PASSED.append("a client closed like acpx closes agents kills nothing of another client's turn")
    PASSED.append("--model reaches the request body and the session's model selector")

    # A's session is B's to load: its replay holds nothing A did not do.
    await conn_b.load_session(cwd=env.ws, session_id=session_a, mcp_servers=[])

    # Flags the running daemon cannot honour: said at `initialize`, not dropped.
    recorder = Recorder()
    recorders.append(recorder)
    proc_c, to_agent, from_agent = await spawn_acp(env, recorder, ("--sandbox", "read-only"))
    conn_c = acp.connect_to_agent(Client(), to_agent, from_agent)
    await expect_error(conn_c.initialize(protocol_version=1), contains="another sandbox")
    await close(proc_c, conn_c)
    # A profile the configuration does not know: refused at session/new, naming the flag.
    recorder = Recorder()
    recorders.append(recorder)
    proc_d, conn_d, _ = await connect(env, recorder, Client(), flags=("--provider", "nope"))
    await expect_error(conn_d.new_session(cwd=env.ws, mcp_servers=[]), contains="--provider nope")
    await close(proc_d, conn_d)
    await close(proc_b, conn_b)
    PASSED.append("flags the daemon cannot honour fail initialize or session/new")


MCP_DIR = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mcp"))
SECRET = "acp-env-secret-7d41b2"


def log_events(env, sid):
    """The session's log, read from its file."""
    import glob

    (path,) = glob.glob(os.path.join(env.home, "workspaces", "*", "sessions", sid + ".jsonl"))
    with open(path) as f:
        return [json.loads(line) for line in f]


async def mcp_scenarios(env, recorders):
    from acp.schema import EnvVariable, McpServerStdio, SseMcpServer

    everything = McpServerStdio(
        name="every thing",  # not a dsh name: mapped to `every-thing`
        command=os.path.join(MCP_DIR, "node_modules", ".bin", "mcp-server-everything"),
        args=["stdio"],
        env=[EnvVariable(name="EVERY_TOKEN", value=SECRET)],
    )
    fixture = McpServerStdio(
        name="fx",
        command="python3",
        args=[os.path.join(MCP_DIR, "fixture.py"), "tools"],
        env=[
            EnvVariable(name="PYTHONPATH", value=os.path.join(MCP_DIR, ".deps", "py")),
            # Slow to start, so the first step surely waits for it (it starts when given).
            EnvVariable(name="FIXTURE_START_DELAY", value="3"),
        ],
    )
    recorder = Recorder()
    recorders.append(recorder)
    client = Client()
    proc, conn, _ = await connect(env, recorder, client)

    # What dsh cannot take is refused before anything is created.
    sse = SseMcpServer(type="sse", name="old", url="http://127.0.0.1:1/sse", headers=[])
    await expect_error(conn.new_session(cwd=env.ws, mcp_servers=[sse]), code=-32602, contains="SSE transport is not supported")
    nameless = McpServerStdio(name="!!!", command="python3", args=[], env=[])
    await expect_error(conn.new_session(cwd=env.ws, mcp_servers=[nameless]), code=-32602, contains="no ASCII letter or digit")
    twins = McpServerStdio(name="every_thing", command="python3", args=[], env=[])
    await expect_error(conn.new_session(cwd=env.ws, mcp_servers=[everything, twins]), code=-32602, contains="both become `every-thing`")
    listed = await conn.list_sessions(cwd=env.ws)
    check(listed.sessions == [], "a refused session/new created nothing")
    PASSED.append("MCP servers dsh cannot take are refused")

    # A new session with the editor's servers: a turn calls one of their tools through dsh.
    session = await conn.new_session(cwd=env.ws, mcp_servers=[everything, fixture])
    sid = session.session_id
    env.mock.script(
        [
            {"reasoning": "Echo through MCP.", "tool_calls": [{"name": "every-thing__echo", "arguments": {"message": "through acp"}}]},
            {"content": "Echoed."},
        ]
    )
    result = await conn.prompt(session_id=sid, prompt=[text_block("echo through MCP")])
    check(result.stop_reason == "end_turn", result)
    updates = client.updates[sid]
    calls = [u for u in updates if u["sessionUpdate"] == "tool_call"]
    check(len(calls) == 1 and "every-thing__echo" in json.dumps(calls[0]), calls)
    check(client.permissions and client.permissions[-1][0] == sid, "an MCP tool asks for permission")
    done = [u for u in updates if u["sessionUpdate"] == "tool_call_update" and u.get("status") == "completed"]
    check(len(done) == 1 and "through acp" in json.dumps(done[0]), done)
    first = env.mock.requests()[0]
    names = [t["function"]["name"] for t in json.loads(first["body"])["tools"]]
    check("every-thing__echo" in names and "fx__echo" in names, names)
    waits = [e for e in log_events(env, sid) if e["type"] == "mcp/wait"]
    # Once, for the servers still starting: the slow one surely, server-everything if not up yet.
    check(len(waits) == 1 and waits[0]["data"]["reason"] == "starting", waits)
    check(waits[0]["data"]["servers"] in (["every-thing", "fx"], ["fx"]), waits)
    step = max(u["_meta"]["dsh/usage"]["step"] for u in updates if u["sessionUpdate"] == "usage_update")
    before = await conn._conn.send_request("_dsh/request", {"sessionId": sid, "step": step})
    await close(proc, conn)
    PASSED.append("session/new with MCP servers: a turn calls their tool")

    # A new front loads the session with the same servers: the next request's header is the
    # same, and nothing of it is logged anew as a change.
    recorder = Recorder()
    recorders.append(recorder)
    client = Client()
    proc, conn, _ = await connect(env, recorder, client)
    await conn.load_session(cwd=env.ws, session_id=sid, mcp_servers=[everything, fixture])
    env.mock.script([{"content": "Same tools."}])
    result = await conn.prompt(session_id=sid, prompt=[text_block("again")])
    check(result.stop_reason == "end_turn", result)
    after = await conn._conn.send_request("_dsh/request", {"sessionId": sid, "step": step + 1})
    check(after["header"] == before["header"], "the header after the load equals the one before")
    bodies = [json.loads(r["body"]) for r in env.mock.requests()]
    check(json.dumps(bodies[-1]["tools"]) == json.dumps(bodies[-2]["tools"]), "the same tool bytes")
    events = log_events(env, sid)
    kinds_after = [e["type"] for e in events if e["seq"] >= before["boundarySeq"] + 1]
    check("request/header-delta" not in kinds_after, kinds_after)
    check(check_saw(env, after), "what the model saw is what the mock received")

    # One server fewer: exactly one logged tools delta, naming its tools.
    await conn.load_session(cwd=env.ws, session_id=sid, mcp_servers=[everything])
    env.mock.script([{"content": "Fewer tools."}])
    result = await conn.prompt(session_id=sid, prompt=[text_block("fewer")])
    check(result.stop_reason == "end_turn", result)
    fewer = await conn._conn.send_request("_dsh/request", {"sessionId": sid, "step": step + 2})
    check(len(fewer["headerEvents"]) == 1, fewer["headerEvents"])
    (delta,) = [e for e in log_events(env, sid) if e["seq"] in fewer["headerEvents"]]
    check(delta["type"] == "request/header-delta", delta)
    text = json.dumps(delta["data"])
    check("fx__echo" in text and "every-thing__" not in text, text)
    names = [t["name"] for t in fewer["header"]["tools"]]
    check("every-thing__echo" in names and not any(n.startswith("fx__") for n in names), names)
    await close(proc, conn)

    # The environment's values are secrets: in no log, not in the daemon's.
    import glob

    for path in glob.glob(os.path.join(env.home, "**", "*"), recursive=True):
        if os.path.isfile(path) and not os.path.islink(path) and not path.endswith(".sock"):
            with open(path, "rb") as f:
                check(SECRET.encode() not in f.read(), f"the env value leaked into {path}")
    PASSED.append("session/load with the same servers resumes byte-identical; one fewer is one delta")


async def command_scenarios(env, recorders):
    """The workspace's prompt commands reach the editor as `available_commands_update` after
    `session/new`, and a `/review …` prompt is expanded by the daemon."""
    recorder = Recorder()
    recorders.append(recorder)
    client = Client()
    os.makedirs(os.path.join(env.ws, ".dsh", "commands"), exist_ok=True)
    with open(os.path.join(env.ws, ".dsh", "commands", "review.md"), "w") as f:
        f.write("---\ndescription: Reviews a file\nargument-hint: FILE\n---\nReview $ARGUMENTS with care.\n")
    proc, conn, init = await connect(env, recorder, client)
    sid = (await conn.new_session(cwd=env.ws, mcp_servers=[])).session_id

    def advertised():
        return [u for u in client.updates.get(sid, []) if u["sessionUpdate"] == "available_commands_update"]

    await wait_until_async(lambda: advertised(), what="available_commands_update")
    commands = advertised()[0]["availableCommands"]
    check(commands == [{"name": "review", "description": "Reviews a file", "input": {"hint": "FILE"}}], commands)
    PASSED.append("available_commands_update after session/new")

    env.mock.script([{"content": "Reviewed."}])
    result = await conn.prompt(session_id=sid, prompt=[text_block("/review src/a.rs")])
    check(result.stop_reason == "end_turn", result)
    body = json.loads(env.mock.requests()[-1]["body"])
    last = [m for m in body["messages"] if m["role"] == "user"][-1]
    check(last["content"] == "Review src/a.rs with care.", last)
    PASSED.append("a /command prompt is expanded")
    await close(proc, conn)


def check_saw(env, saw):
    return saw["wire"]["body"] == env.mock.requests()[-1]["body"]


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None))
