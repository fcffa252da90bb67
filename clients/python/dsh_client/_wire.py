"""Decoding and encoding the wire's JSON for the generated types (`protocol.py`): the check each
decoder makes of a value, the helpers for fields that may be absent, and the two things every
generated class shares. Nothing here knows a method or a type of the protocol.

A decoder checks the shape the schema gives a value (a string, an integer, an object...) and
raises :class:`DecodeError` naming the path to a value that does not have it; it skips object
fields it does not know, as the protocol asks of clients.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

_T = TypeVar("_T")


class DecodeError(ValueError):
    """A value that does not have the shape the protocol's schema gives it; the message names
    where it is (``SessionUsageResult.rows: [0]: UsageEntry.causes: ...``)."""


def _fail(expected: str, value: Any) -> DecodeError:
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return DecodeError(f"expected {expected}, got {shown}")


# Scalars. `bool` is an `int` to Python, never to JSON.


def any_value(value: Any) -> Any:
    """Any JSON value (a tool's parameter schema, an unknown event's payload), as is."""
    return value


def string(value: Any) -> str:
    if isinstance(value, str):
        return value
    raise _fail("a string", value)


def integer(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise _fail("an integer", value)


def number(value: Any) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise _fail("a number", value)


def boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    raise _fail("a boolean", value)


def null(value: Any) -> None:
    if value is None:
        return None
    raise _fail("null", value)


def instance(value: Any, types: tuple[type, ...]) -> Any:
    """A value of one of `types` (``str | int``: a subscription id)."""
    if isinstance(value, types) and not isinstance(value, bool):
        return value
    raise _fail(" or ".join(t.__name__ for t in types), value)


# Containers.


def dictionary(value: Any) -> dict[str, Any]:
    """A JSON object, its values as they are."""
    if isinstance(value, dict):
        return value
    raise _fail("an object", value)


def obj(value: Any, owner: str) -> dict[str, Any]:
    """The JSON object a class `owner` is decoded from."""
    if isinstance(value, dict):
        return value
    raise DecodeError(f"{owner}: {_fail('an object', value)}")


def array(value: Any, item: Callable[[Any], _T]) -> list[_T]:
    """A JSON array, each element decoded by `item`."""
    if not isinstance(value, list):
        raise _fail("an array", value)
    out = []
    for index, element in enumerate(value):
        try:
            out.append(item(element))
        except DecodeError as error:
            raise DecodeError(f"[{index}]: {error}") from None
    return out


def mapping(value: Any, item: Callable[[Any], _T]) -> dict[str, _T]:
    """A JSON object used as a map, each value decoded by `item`."""
    out = {}
    for key, element in dictionary(value).items():
        try:
            out[key] = item(element)
        except DecodeError as error:
            raise DecodeError(f"[{key!r}]: {error}") from None
    return out


def nullable(value: Any, item: Callable[[Any], _T]) -> _T | None:
    """Null, or a value `item` decodes."""
    return None if value is None else item(value)


# Fields.


def required(o: dict[str, Any], key: str, decode: Callable[[Any], _T], owner: str) -> _T:
    """Field `key` of `o`, which must be there."""
    if key not in o:
        raise DecodeError(f"{owner}: missing `{key}`")
    try:
        return decode(o[key])
    except DecodeError as error:
        raise DecodeError(f"{owner}.{key}: {error}") from None


def optional(o: dict[str, Any], key: str, decode: Callable[[Any], _T], owner: str) -> _T | None:
    """Field `key` of `o`; ``None`` when absent or null."""
    if o.get(key) is None:
        return None
    return required(o, key, decode, owner)


def defaulted(o: dict[str, Any], key: str, decode: Callable[[Any], _T], owner: str, default: _T) -> _T:
    """Field `key` of `o`; `default` (the schema's) when absent."""
    if key not in o:
        return default
    return required(o, key, decode, owner)


# What the generated classes share.


class WireObject:
    """A generated class: it encodes itself as the wire carries it."""

    def to_json(self) -> dict[str, Any]:
        """The object as the wire carries it: camelCase keys, absent optional fields left out."""
        raise NotImplementedError


def encode(value: Any) -> Any:
    """A value as JSON: generated objects by their ``to_json``, lists and maps element by element."""
    if isinstance(value, WireObject):
        return value.to_json()
    if isinstance(value, list):
        return [encode(element) for element in value]
    if isinstance(value, dict):
        return {key: encode(element) for key, element in value.items()}
    return value


@dataclass(frozen=True, kw_only=True)
class Unknown(WireObject):
    """A variant of a tagged union that this client does not know (a newer daemon's addition):
    its tag and the object as received. Clients ignore what they do not know."""

    tag: str
    """The variant's tag (the value of its ``kind``, ``role`` or ``type``)."""
    value: dict[str, Any]
    """The object as received."""

    def to_json(self) -> dict[str, Any]:
        return self.value


def tagged(value: Any, owner: str, key: str, variants: dict[str, Callable[[Any], _T]]) -> _T | Unknown:
    """A tagged union's value: the variant its `key` names, or :class:`Unknown`."""
    o = obj(value, owner)
    tag = o.get(key)
    if not isinstance(tag, str):
        raise DecodeError(f"{owner}: `{key}` is not a string")
    decode = variants.get(tag)
    return Unknown(tag=tag, value=o) if decode is None else decode(o)


def fields_of(value: Any) -> dict[str, Any]:
    """A dataclass's fields by name, as they are (the envelope an event class takes over)."""
    return {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}
