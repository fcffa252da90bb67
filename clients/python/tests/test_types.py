"""The generated types on their own (no daemon): decoding checks shapes and names the path to a
bad value, encoding leaves absent fields out, and what this client does not know — an event
kind, a union's variant, an enum's value, a field — is kept, not refused."""

from __future__ import annotations

from typing import Any

import pytest

from dsh_client.protocol import (
    EVENT_CLASSES,
    EVENT_KINDS,
    DecodeError,
    McpServerSpec,
    PrefixCauseProviderChanged,
    SessionConfig,
    SessionCreateParams,
    SessionPromptResult,
    SessionUsageResult,
    StepStart,
    StepStartEvent,
    Unknown,
    UnknownEvent,
    UsageEntry,
    decode_session_event,
)


def usage() -> dict[str, Any]:
    return {"promptTokens": 10, "cacheHitTokens": 0, "cacheMissTokens": 10, "completionTokens": 2, "reasoningTokens": 1}


def test_every_event_kind_has_its_class() -> None:
    assert list(EVENT_CLASSES) == list(EVENT_KINDS)


def test_an_event_decodes_to_the_class_of_its_kind_and_back() -> None:
    raw = {"sessionId": "s", "seq": 4, "time": 17, "type": "step/start", "data": {"step": 1, "turn": 1}, "joined": [2]}
    event = decode_session_event(raw)
    match event:
        case StepStartEvent(data=StepStart(step=1, turn=1), joined=[2]):
            pass
        case _:
            raise AssertionError(event)
    assert event.to_json() == raw
    assert "joined" not in decode_session_event({**raw, "joined": []}).to_json()


def test_an_event_kind_this_client_does_not_know_is_kept_with_its_seq() -> None:
    raw = {"sessionId": "s", "seq": 9, "time": 1, "type": "future/kind", "data": {"items": [1]}}
    event = decode_session_event(raw)
    assert isinstance(event, UnknownEvent)
    assert (event.seq, event.type, event.data) == (9, "future/kind", {"items": [1]})
    assert event.to_json() == raw


def test_a_variant_or_a_value_this_client_does_not_know_is_kept() -> None:
    row = {
        "step": 2, "turn": 1, "seq": 30, "hitPercent": 0.0, "dropped": True, "explanation": "?",
        "causes": [{"kind": "providerChanged", "seq": 29, "from": "a/x", "to": "b/y"}, {"kind": "rewound", "seq": 28}],
        "newField": "ignored",
    }
    entry = UsageEntry.from_json(row)
    assert entry.causes[0] == PrefixCauseProviderChanged(seq=29, from_="a/x", to="b/y")
    assert entry.causes[1] == Unknown(tag="rewound", value={"kind": "rewound", "seq": 28})
    assert entry.to_json() == {k: v for k, v in row.items() if k != "newField"}
    result = SessionPromptResult.from_json({"turn": 1, "stopReason": "budget", "steps": 3, "usage": usage()})
    assert result.stop_reason == "budget"


def test_a_bad_value_is_a_decode_error_naming_where_it_is() -> None:
    with pytest.raises(DecodeError, match="SessionPromptResult: missing `usage`"):
        SessionPromptResult.from_json({"turn": 1, "stopReason": "completed", "steps": 1})
    with pytest.raises(DecodeError, match=r"SessionPromptResult.steps: expected an integer, got '1'"):
        SessionPromptResult.from_json({"turn": 1, "stopReason": "completed", "steps": "1", "usage": usage()})
    with pytest.raises(DecodeError, match=r"SessionUsageResult.rows: \[0\]: UsageEntry.causes: \[0\]: PrefixCause: `kind` is not a string"):
        SessionUsageResult.from_json(
            {
                "rows": [{"step": 1, "turn": 1, "seq": 4, "hitPercent": 0, "dropped": False, "explanation": "", "causes": [{}]}],
                "totals": usage(), "contextWindow": 1, "profile": "p", "model": "m",
            }
        )
    with pytest.raises(DecodeError, match="expected a boolean"):
        decode_session_event({"sessionId": "s", "seq": 1, "time": 1, "type": "tool/result", "data": {"callId": "c", "name": "n", "content": "", "isError": "yes"}})


def test_encoding_leaves_out_what_is_absent_and_names_fields_as_the_wire_does() -> None:
    params = SessionCreateParams(
        workspace="/w",
        config=SessionConfig(base_url="http://127.0.0.1:1", max_steps=3),
        mcp_servers=[McpServerSpec(name="fx", command="python3", env={"TOKEN": "t"})],
    )
    assert params.to_json() == {
        "workspace": "/w",
        "config": {"baseUrl": "http://127.0.0.1:1", "maxSteps": 3},
        "mcpServers": [{"name": "fx", "command": "python3", "env": {"TOKEN": "t"}}],
    }
    assert SessionCreateParams.from_json(params.to_json()) == params
