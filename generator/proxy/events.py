"""The events of a backend's stream, cut out of its chunks and checked the same way on every
path the proxy relays a stream by (nixl's plain relay, lmcache-pd's converter, a decoder asked
alone): an event is ``data: <JSON object>`` or ``data: [DONE]``, as vLLM writes them.

Anything else (an HTML page from a gateway, data that is not JSON, an event past 4 MiB, a
stream that ends inside an event) is not a completion event: ValueError, and the relay answers
an error instead (sse.py). A client of the proxy never gets an event it cannot parse.
"""

from __future__ import annotations

from typing import Any, Protocol

from generator.proxy import fastjson

__all__ = ["EventBuffer", "EventChecker", "EventRelay", "completion_event"]

_END = b"\n\n"
_DATA = b"data: "
_DONE = b"[DONE]"
_MAX_EVENT_BYTES = 4 * 2**20  # a token's event is ~200 bytes: more is a broken decoder


class EventRelay(Protocol):
    """What the relay passes a stream's chunks through (sse.py)."""

    def feed(self, data: bytes) -> bytes:
        """What goes to the client for ``data``; ValueError for a chunk that completes an
        event that is not a completion event."""
        ...

    def end(self) -> None:
        """The stream ended; ValueError if it ended inside an event."""
        ...


class EventBuffer:
    """Whole events out of a stream's chunks: a partial one waits for the rest (up to 4 MiB)."""

    __slots__ = ("_rest",)

    def __init__(self) -> None:
        self._rest = b""

    @property
    def waiting(self) -> bool:
        """Part of an event waits for its end."""
        return bool(self._rest)

    def cut(self, data: bytes) -> list[bytes]:
        """The events ``data`` ends, each without its blank line (nor the rest of a longer
        one); blank ones left out."""
        *events, self._rest = (self._rest + data if self._rest else data).split(_END)
        if len(self._rest) > _MAX_EVENT_BYTES:
            raise ValueError(f"over {_MAX_EVENT_BYTES} bytes without an event end")
        return [event.lstrip(b"\r\n") for event in events if event.strip()]

    def end(self) -> None:
        if self._rest.strip():
            raise ValueError("the stream ended inside an event")


def completion_event(raw: bytes) -> dict[str, Any] | None:
    """The JSON object an event carries, None for [DONE]; ValueError for anything else."""
    if not raw.startswith(_DATA):
        raise ValueError("an event without data")
    payload = raw[len(_DATA) :].strip()
    if payload == _DONE:
        return None
    event = fastjson.loads(payload)  # not JSON: a ValueError too (orjson's or json's)
    if not isinstance(event, dict):
        raise ValueError("an event that is not a JSON object")
    return event


class EventChecker:
    """A stream passed on as it came, each event once it is whole and checked."""

    __slots__ = ("_events",)

    def __init__(self) -> None:
        self._events = EventBuffer()

    def feed(self, data: bytes) -> bytes:
        waited = self._events.waiting
        events = self._events.cut(data)
        for event in events:
            completion_event(event)
        if not waited and not self._events.waiting:
            return data  # whole events, as a decoder sends them: passed on without a copy
        return b"".join(event + _END for event in events)

    def end(self) -> None:
        self._events.end()
