"""The verbs end to end, against a real daemon and the mock provider: create, prompt, events,
inject, cancel, fork, "what the model saw", usage, approvals, list, status and audit.

Each test scripts the mock's replies for its own prompts (`match.last_user_contains` on a token
of the test), so the scripts of one test never answer another's requests.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

import dsh_client
from dsh_client.protocol import (
    ApprovalChoice,
    ApprovalDecisionEvent,
    ApprovalRequestEvent,
    AssistantChunkEvent,
    AssistantMessageEvent,
    ChunkDeltaText,
    ContextMessageEvent,
    ErrorCodes,
    MessageUser,
    PrefixCauseFirstRequest,
    RequestSentEvent,
    SessionConfig,
    SessionEvent,
    SessionMetaEvent,
    SessionPromptResult,
    SteeringMessageEvent,
    StepStart,
    StepStartEvent,
    ToolCallEvent,
    ToolResultEvent,
    TurnEndEvent,
)

from conftest import World


def replies(token: str, *steps: dict[str, Any]) -> list[dict[str, Any]]:
    """Mock scripts answering, in order, the requests whose last user message holds `token`."""
    return [{"match": {"last_user_contains": token}, **step} for step in steps]


def tool(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


async def until(stream: dsh_client.EventStream, wanted: type, timeout: float = 20) -> list[SessionEvent]:
    """The stream's events up to the first of class `wanted`, included."""
    seen: list[SessionEvent] = []

    async def read() -> None:
        async for event in stream:
            seen.append(event)
            if isinstance(event, wanted):
                return
        raise AssertionError(f"the stream ended before a {wanted.__name__}")

    await asyncio.wait_for(read(), timeout)
    return seen


async def three_step_session(client: dsh_client.Client, world: World, token: str) -> str:
    """A session whose one turn ran three steps: list_dir, read_file, then an answer."""
    (Path(world.ws) / "notes.txt").write_text("remember the milk\n")
    world.mock.script(
        *replies(
            token,
            tool("list_dir", path="."),
            tool("read_file", path="notes.txt"),
            {"content": "The notes say to remember the milk."},
        )
    )
    session = await client.create(world.ws)
    result = await client.prompt(session, f"what do my notes say? {token}")
    assert (result.stop_reason, result.steps) == ("completed", 3)
    return session


async def test_a_prompt_runs_a_scripted_tool_call_turn_and_returns_its_typed_result(
    client: dsh_client.Client, world: World
) -> None:
    session = await three_step_session(client, world, "tok-prompt")
    events = await client.stored_events(session)

    meta = events[0]
    assert isinstance(meta, SessionMetaEvent) and meta.data.pin is not None
    assert meta.data.pin.profile == f"deepseek@{world.mock.url}"
    assert [e.data.name for e in events if isinstance(e, ToolCallEvent)] == ["list_dir", "read_file"]
    read = [e.data for e in events if isinstance(e, ToolResultEvent)][1]
    assert read.name == "read_file" and "remember the milk" in read.content and not read.is_error
    answer = [e.data.message for e in events if isinstance(e, AssistantMessageEvent)][-1]
    assert answer.content == "The notes say to remember the milk."
    streamed = "".join(
        e.data.delta.text for e in events if isinstance(e, AssistantChunkEvent) and isinstance(e.data.delta, ChunkDeltaText)
    )
    assert streamed == answer.content
    end = events[-1]
    assert isinstance(end, TurnEndEvent) and (end.data.turn, end.data.reason) == (1, "completed")


async def test_events_arrive_stored_then_live_in_order_with_no_gap(client: dsh_client.Client, world: World) -> None:
    world.mock.script(*replies("tok-order", tool("list_dir", path="."), {"content": "listed"}))
    session = await client.create(world.ws)
    async with client.events(session) as live:
        prompt = asyncio.create_task(client.prompt(session, "list it tok-order"))
        first_turn = await until(live, TurnEndEvent)
        result = await prompt
    assert isinstance(result, SessionPromptResult) and result.steps == 2
    stored = await client.stored_events(session)
    assert [e.seq for e in first_turn] == list(range(len(stored)))
    assert [e.to_json() for e in first_turn] == [e.to_json() for e in stored]
    match first_turn[4]:
        case StepStartEvent(data=StepStart(step=1), joined=joined):
            # The date's context message joined the first request.
            assert joined and all(0 < seq < first_turn[4].seq for seq in joined)
        case other:
            raise AssertionError(f"not the first step/start: {other}")

    # From the middle of the log: the stored tail, then the next turn live, with no seam.
    middle = len(stored) // 2
    world.mock.script(*replies("tok-order-2", {"content": "again"}))
    async with client.events(session, from_seq=middle) as tail:
        prompt = asyncio.create_task(client.prompt(session, "once more tok-order-2"))
        second_turn = await until(tail, TurnEndEvent)
        await prompt
        assert isinstance(second_turn[-1], TurnEndEvent) and second_turn[-1].data.turn == 1
        second_turn += await until(tail, TurnEndEvent)
    everything = await client.stored_events(session)
    assert [e.seq for e in second_turn] == list(range(middle, len(everything)))
    assert [e.to_json() for e in second_turn] == [e.to_json() for e in everything[middle:]]


async def test_a_stream_ends_cleanly_when_closed_or_when_its_client_closes(client: dsh_client.Client, world: World) -> None:
    world.mock.script(*replies("tok-close", {"content": "short"}))
    session = await client.create(world.ws)
    await client.prompt(session, "short turn tok-close")
    length = len(await client.stored_events(session))

    stream = client.events(session)
    seen = [event async for event in _take(stream, length)]
    await stream.close()
    assert [event async for event in stream] == []
    assert [e.seq for e in seen] == list(range(length))

    async with world.connect() as other:
        stream = other.events(session, from_seq=length - 1)
        assert [e.seq async for e in _take(stream, 1)] == [length - 1]
        reader = asyncio.create_task(_drain(stream))
        await asyncio.sleep(0.1)
    assert await asyncio.wait_for(reader, 5) == []


async def _take(stream: dsh_client.EventStream, count: int) -> Any:
    async for event in stream:
        yield event
        count -= 1
        if count == 0:
            return


async def _drain(stream: dsh_client.EventStream) -> list[SessionEvent]:
    return [event async for event in stream]


async def test_inject_steers_the_running_turn_and_lands_in_the_next_step_as_joined(
    client: dsh_client.Client, world: World
) -> None:
    # Step 1 is slow to answer: the steering arrives while its request is in flight. After the
    # steering, the last user message is the steering text, so it carries the token too.
    world.mock.script(*replies("tok-steer", {**tool("list_dir", path="."), "delay_ms": 3000}, {"content": "Tabs it is."}))
    session = await client.create(world.ws)
    async with client.events(session) as events:
        prompt = asyncio.create_task(client.prompt(session, "tidy up tok-steer"))
        before = await until(events, RequestSentEvent)
        seq = await client.inject(session, "use tabs, not spaces (tok-steer)")
        result = await prompt
        after = await until(events, TurnEndEvent)
    assert result.steps == 2
    steering = [e for e in after if isinstance(e, SteeringMessageEvent)]
    assert [(e.seq, e.data.text) for e in steering] == [(seq, "use tabs, not spaces (tok-steer)")]
    starts = [e for e in before + after if isinstance(e, StepStartEvent)]
    assert [e.data.step for e in starts] == [1, 2]
    assert seq not in starts[0].joined and starts[1].joined == [seq]
    # And the model saw it in step 2's request, not in step 1's.
    step1, step2 = await client.request(session, 1), await client.request(session, 2)
    texts = lambda saw: [m.message.content for m in saw.messages if isinstance(m.message, MessageUser)]  # noqa: E731
    assert "use tabs, not spaces (tok-steer)" not in texts(step1)
    assert any("use tabs, not spaces (tok-steer)" in text for text in texts(step2))


async def test_cancel_stops_a_running_turn(client: dsh_client.Client, world: World) -> None:
    world.mock.script(*replies("tok-cancel", {"content": "too late", "delay_ms": 30000}))
    session = await client.create(world.ws)
    async with client.events(session) as events:
        prompt = asyncio.create_task(client.prompt(session, "take your time tok-cancel"))
        await until(events, RequestSentEvent)
        assert await client.cancel(session) is True
        result = await asyncio.wait_for(prompt, 20)
    assert result.stop_reason == "cancelled"
    assert await client.cancel(session) is False


async def test_fork_at_a_step_keeps_the_conversation_as_that_steps_request_saw_it(
    client: dsh_client.Client, world: World
) -> None:
    parent = await three_step_session(client, world, "tok-fork")
    saw = await client.request(parent, 2)
    fork = await client.fork(parent, at_step=2)
    assert fork != parent
    events = await client.stored_events(fork)
    meta = events[0]
    assert isinstance(meta, SessionMetaEvent) and meta.data.forked_from is not None
    assert (meta.data.forked_from.session_id, meta.data.forked_from.seq) == (parent, saw.boundary_seq)
    assert [e.data.step for e in events if isinstance(e, StepStartEvent)] == [1]
    (summary,) = [s for s in await client.list(world.ws) if s.session_id == fork]
    assert summary.forked_from == meta.data.forked_from

    # The fork goes on from there, and its first request reuses the parent's cached prefix.
    world.mock.script(*replies("tok-fork-on", {"content": "forked"}))
    result = await client.prompt(fork, "go another way tok-fork-on")
    assert (result.stop_reason, result.steps) == ("completed", 1)
    fork_saw = await client.request(fork, 2)
    assert [m.to_json() for m in fork_saw.messages[: len(saw.messages)]] == [m.to_json() for m in saw.messages]
    row = (await client.usage(fork)).rows[-1]
    assert row.step == 2 and row.hit_percent > 0

    with pytest.raises(dsh_client.RpcError) as beyond:
        await client.fork(parent, at_step=99)
    assert beyond.value.code == ErrorCodes.OUT_OF_RANGE


async def test_usage_has_a_row_per_step_with_its_cache_hits_and_cost(client: dsh_client.Client, world: World) -> None:
    session = await three_step_session(client, world, "tok-usage")
    usage = await client.usage(session)
    assert [row.step for row in usage.rows] == [1, 2, 3]
    assert isinstance(usage.rows[0].causes[0], PrefixCauseFirstRequest)
    assert usage.rows[0].explanation == "first request"
    assert all(row.hit_percent > 0 for row in usage.rows[1:])
    costs = [row.cost for row in usage.rows]
    assert all(cost is not None and cost.amount > 0 and cost.currency == "USD" for cost in costs)
    assert usage.cost is not None
    assert usage.cost.amount == pytest.approx(sum(cost.amount for cost in costs if cost is not None))
    assert usage.totals.prompt_tokens == sum(row.usage.prompt_tokens for row in usage.rows if row.usage is not None)
    assert [(p.profile, p.model) for p in usage.prices] == [(f"deepseek@{world.mock.url}", usage.model)]
    assert usage.context_window > 0


async def test_request_is_what_the_model_saw_byte_for_byte(client: dsh_client.Client, world: World) -> None:
    session = await three_step_session(client, world, "tok-saw")
    saw = await client.request(session, 1)
    assert saw.step == 1 and saw.turn == 1 and saw.sent is not None
    body = saw.wire.body.encode()
    assert saw.wire.sha256 == saw.sent.sha256 == hashlib.sha256(body).hexdigest()
    assert saw.wire.bytes == saw.sent.bytes == len(body)
    # The very bytes the provider (the mock) received.
    assert saw.wire.body in [request["body"] for request in world.mock.requests()]
    prompts = [m.message.content for m in saw.messages if isinstance(m.message, MessageUser)]
    assert "what do my notes say? tok-saw" in prompts
    assert saw.header.system and saw.header.tools

    diff = await client.request(session, 2, diff=True)
    assert diff.diff is not None and "+" in diff.diff
    with pytest.raises(dsh_client.RpcError) as beyond:
        await client.request(session, 9)
    assert beyond.value.code == ErrorCodes.OUT_OF_RANGE


async def test_approval_requests_are_answered_by_the_callback(client: dsh_client.Client, world: World) -> None:
    world.mock.script(
        *replies(
            "tok-approve",
            tool("write_file", path="approved.txt", content="yes\n"),
            tool("write_file", path="refused.txt", content="no\n"),
            {"content": "One written, one refused."},
        )
    )
    asked: list[ApprovalRequestEvent] = []

    async def decide(event: ApprovalRequestEvent) -> ApprovalChoice:
        asked.append(event)
        await asyncio.sleep(0)
        return "allow" if "approved.txt" in event.data.summary else "deny"

    session = await client.create(world.ws)
    seen: list[SessionEvent] = []
    result = await client.prompt(session, "write two files tok-approve", on_approval=decide, on_event=seen.append)
    assert (result.stop_reason, result.steps) == ("completed", 3)
    assert [(e.data.tool, e.session_id) for e in asked] == [("write_file", session)] * 2
    assert (Path(world.ws) / "approved.txt").read_text() == "yes\n"
    assert not (Path(world.ws) / "refused.txt").exists()
    decisions = [e.data.decision for e in seen if isinstance(e, ApprovalDecisionEvent)]
    assert decisions == ["allow", "deny"]
    refused = [e.data for e in seen if isinstance(e, ToolResultEvent)][1]
    assert refused.is_error
    # `on_event` got the whole turn, in order, up to its end.
    assert isinstance(seen[-1], TurnEndEvent)
    assert [e.seq for e in seen] == list(range(seen[0].seq, seen[-1].seq + 1))


async def test_a_failing_approval_callback_denies_the_call_and_raises_after_the_turn(
    client: dsh_client.Client, world: World
) -> None:
    world.mock.script(*replies("tok-raise", tool("write_file", path="never.txt", content="x"), {"content": "refused"}))

    def broken(event: ApprovalRequestEvent) -> ApprovalChoice:
        raise RuntimeError("the approval policy is broken")

    session = await client.create(world.ws)
    with pytest.raises(RuntimeError, match="the approval policy is broken"):
        await client.prompt(session, "write it tok-raise", on_approval=broken)
    assert not (Path(world.ws) / "never.txt").exists()
    decisions = [e.data.decision for e in await client.stored_events(session) if isinstance(e, ApprovalDecisionEvent)]
    assert decisions == ["deny"]


async def test_max_steps_in_config_stops_the_turn(client: dsh_client.Client, world: World) -> None:
    world.mock.script(*replies("tok-steps", tool("list_dir", path="."), tool("list_dir", path=".")))
    session = await client.create(world.ws, config=SessionConfig(max_steps=2))
    result = await client.prompt(session, "keep looking tok-steps")
    assert (result.stop_reason, result.steps) == ("maxSteps", 2)


async def test_an_output_schema_gets_a_validated_answer_after_one_logged_correction(
    client: dsh_client.Client, world: World
) -> None:
    # The token is in the schema, so in the note that tells the model the shape (the last user
    # message of the first request), and in the answer the correction quotes.
    schema = {
        "type": "object",
        "description": "tok-shape",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    }
    world.mock.script(
        *replies("tok-shape", {"content": '{"name": "Ada", "age": "tok-shape"}'}, {"content": '{"name": "Ada", "age": 36}'})
    )
    session = await client.create(world.ws)
    before = len(await client.stored_events(session))
    with pytest.raises(dsh_client.RpcError) as refused:
        await client.prompt(session, "who? tok-shape", output_schema={"type": "integr"})
    assert refused.value.code == dsh_client.errors.INVALID_PARAMS
    assert "outputSchema" in str(refused.value)
    assert len(await client.stored_events(session)) == before

    result = await client.prompt(session, "who? tok-shape", output_schema=schema)
    assert (result.stop_reason, result.steps, result.output) == ("completed", 2, {"name": "Ada", "age": 36})
    assert result.output_errors is None
    events = await client.stored_events(session)
    notes = [e.data for e in events if isinstance(e, ContextMessageEvent) and e.data.source != "date"]
    assert [note.source for note in notes] == ["outputSchema", "outputInvalid"]
    assert '/age: "tok-shape" is not of type "integer"' in notes[1].text
    # The correction is what the model saw next, byte for byte as sent, with DeepSeek's JSON mode.
    saw = await client.request(session, 2)
    assert saw.wire.body in [request["body"] for request in world.mock.requests()]
    assert json.loads(saw.wire.body)["response_format"] == {"type": "json_object"}
    assert notes[1].text in [m.message.content for m in saw.messages if isinstance(m.message, MessageUser)]
    assert (await client.audit(session)).ok


async def test_list_status_and_audit_see_the_sessions(client: dsh_client.Client, world: World) -> None:
    world.mock.script(*replies("tok-list", {"content": "listed"}))
    session = await client.create(world.ws)
    await client.prompt(session, "hello tok-list")
    (summary,) = [s for s in await client.list(world.ws) if s.session_id == session]
    assert (summary.workspace, summary.turns, summary.steps, summary.running) == (world.ws, 1, 1, False)
    assert summary.title == "hello tok-list"
    assert session in [loaded.session_id for loaded in (await client.status()).sessions]
    audit = await client.audit(session)
    assert (audit.ok, audit.steps, audit.matched, audit.mismatches, audit.errors) == (True, 1, 1, [], [])
    # The CLI's audit of the same session agrees.
    assert json.loads(world.dsh("audit", "--json", session).stdout) == audit.to_json()
