"""Answers relayed to the client as they arrive: a decoder's server-sent events, each checked
(events.py) on every path, with a final error event when the decoder breaks mid-stream or sends
an event that is not a completion (the seed proxy ended such streams silently, and relayed any
bytes); and a non-streamed JSON answer the proxy adds nothing to (nixl-mp), so that its size
never becomes the proxy's memory.

A stream that moves nothing for ``idle_s`` ends: a decoder that stopped sending, or a client
that stopped reading (its socket buffer full, every write waits). Either way the decoder
request is closed, which aborts it in vLLM, and the backend's counter is released.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aiohttp
from aiohttp import web

from generator.proxy import fastjson
from generator.proxy.events import EventChecker, EventRelay
from generator.proxy.failover import lost_backend
from generator.proxy.lmcache_pd import StreamConverter
from generator.proxy.metrics import ProxyMetrics

__all__ = [
    "SSE_TYPE",
    "BrokeOff",
    "NotAnEvent",
    "NotAnObject",
    "relay_json",
    "relay_stream",
    "send_events",
]

SSE_TYPE = "text/event-stream"
_JSON_TYPE = "application/json"
_SSE_HEADERS = {"Content-Type": SSE_TYPE, "Cache-Control": "no-cache"}
_LAST_WRITE_S = 5.0  # the closing events: a client that cannot take them in 5 s is stalled
_SMALL_WRITE = 16 * 1024  # below aiohttp's 64 KiB high-water mark: never waits on its own
_LEADING_SPACE_BYTES = 64 * 1024  # before a JSON answer's "{": more is not an answer
_REASONS = {"stream_idle": "sent nothing for too long", "decode_lost": "failed its health checks"}


def _nothing() -> None:
    pass


async def send_events(
    request: web.Request, headers: dict[str, str], events: bytes
) -> web.StreamResponse:
    out = web.StreamResponse(status=200, headers=headers | _SSE_HEADERS)
    await out.prepare(request)
    await out.write(events)
    await out.write_eof()
    return out


async def relay_stream(
    request: web.Request,
    headers: dict[str, str],
    reply: aiohttp.ClientResponse,
    *,
    decoder: str,
    converter: StreamConverter | None,
    metrics: ProxyMetrics,
    idle_s: float,
    on_start: Callable[[], None] = _nothing,
) -> web.StreamResponse:
    """The decoder's stream to the client. A decoder that sends nothing for ``idle_s`` trips
    the reply's own read deadline (aiohttp's sock_read); a client that stops reading trips
    ``idle_s`` on a write, and its connection is dropped.

    A plain stream starts once the decoder sent its first whole event, checked: a decoder that
    fails before it raises BrokeOff (NotAnEvent: the event is not a completion) and the client
    has nothing yet (the request may go elsewhere). A converted one (lmcache-pd) starts at once
    with the prefiller's first token."""
    events: EventRelay = converter if converter is not None else EventChecker()
    first = b"" if converter is not None else await _first_events(reply, events)
    out = web.StreamResponse(status=200, headers=headers | _SSE_HEADERS)
    on_start()
    try:
        try:
            await out.prepare(request)
            opening = converter.opening() if converter is not None else first
            await _write(request, out, opening, idle_s)
            failure = await _copy(request, reply, out, events, idle_s)
        except asyncio.CancelledError as exc:
            if lost_backend(exc) is None:
                raise
            failure = "decode_lost"
        if failure is not None:
            metrics.of(metrics.errors, failure, decoder).inc()
        if closing := _closing(decoder, failure, converter):
            await _write(request, out, closing, _LAST_WRITE_S)
        await _write(request, out, None, _LAST_WRITE_S)
    except _Stalled:
        metrics.of(metrics.errors, "client_stalled", decoder).inc()
        if request.transport is not None:
            request.transport.abort()
    except ConnectionResetError:
        # The client went away (often right after [DONE]): stop; leaving the caller's `async
        # with` closes the decoder connection, which aborts its request if still running.
        metrics.of(metrics.errors, "client_disconnect", decoder).inc()
    return out


class BrokeOff(Exception):
    """The decoder's answer ended or broke before its first event."""


class NotAnEvent(Exception):
    """The decoder's first event is not a completion event (events.py)."""


async def _first_events(reply: aiohttp.ClientResponse, events: EventRelay) -> bytes:
    """The stream's first whole events, checked. Bounded: ``events`` holds at most 4 MiB of
    an unfinished event, and the reply's read deadlines stop a decoder that sends nothing."""
    while True:
        try:
            chunk = await reply.content.readany()
        except aiohttp.ClientPayloadError as exc:
            raise BrokeOff("broke its answer before its first event") from exc
        if not chunk:
            raise BrokeOff("ended its answer before its first event")
        try:
            opening = events.feed(chunk)
        except ValueError as exc:
            raise NotAnEvent("sent an event that is not a completion") from exc
        if opening:
            return opening


class NotAnObject(Exception):
    """A 200 "JSON" answer that does not begin as a JSON object."""


async def relay_json(
    request: web.Request,
    headers: dict[str, str],
    reply: aiohttp.ClientResponse,
    *,
    decoder: str,
    metrics: ProxyMetrics,
    idle_s: float,
    on_start: Callable[[], None] = _nothing,
) -> web.StreamResponse:
    """A decoder's non-streamed 200 answer, passed on chunk by chunk. Only its start is checked
    (a JSON object: NotAnObject before anything is sent); a decoder that breaks off later gets
    the client's connection cut, never a truncated answer that looks whole."""
    opening = await _opening(reply)
    out = web.StreamResponse(status=200, headers=headers | {"Content-Type": _JSON_TYPE})
    if reply.content_length is not None:
        out.content_length = reply.content_length
    on_start()
    try:
        await out.prepare(request)
        await _write(request, out, opening, idle_s)
        failure = await _copy(request, reply, out, None, idle_s)
        if failure is None:
            await _write(request, out, None, _LAST_WRITE_S)
            return out
        metrics.of(metrics.errors, failure, decoder).inc()
    except _Stalled:
        metrics.of(metrics.errors, "client_stalled", decoder).inc()
    except ConnectionResetError:
        metrics.of(metrics.errors, "client_disconnect", decoder).inc()
        return out
    if request.transport is not None:
        request.transport.abort()
    return out


async def _opening(reply: aiohttp.ClientResponse) -> bytes:
    """The answer's first bytes, up to and including its first non-space one, which must be
    "{"; NotAnObject otherwise."""
    seen = b""
    while len(seen) <= _LEADING_SPACE_BYTES:
        try:
            chunk = await reply.content.readany()
        except aiohttp.ClientError as exc:
            raise NotAnObject("its answer broke off before it began") from exc
        if not chunk:
            break
        seen += chunk
        start = seen.lstrip()
        if start:
            if start[:1] != b"{":
                break
            return seen
    raise NotAnObject("answered a non-object")


class _Stalled(Exception):
    """The client stopped reading: its socket buffer is full and a write waited too long."""


async def _write(
    request: web.Request, out: web.StreamResponse, data: bytes | None, limit_s: float
) -> None:
    """Writes ``data`` (None: the end of the answer). Only a write that may wait for the client
    (its buffer already holds data, or the chunk is large) gets a deadline: a timer per chunk
    would cost more than the rest of the relay."""
    transport = request.transport
    behind = transport is not None and transport.get_write_buffer_size() > 0
    if not behind and (data is None or len(data) < _SMALL_WRITE):
        await (out.write_eof() if data is None else out.write(data))
        return
    try:
        async with asyncio.timeout(limit_s):
            await (out.write_eof() if data is None else out.write(data))
    except TimeoutError as exc:
        raise _Stalled from exc


async def _copy(
    request: web.Request,
    reply: aiohttp.ClientResponse,
    out: web.StreamResponse,
    events: EventRelay | None,
    idle_s: float,
) -> str | None:
    """Copies the answer (a stream through ``events``, which checks or converts it); the stage
    that failed ("decode_stream", "stream_idle"), or None."""
    transport = request.transport
    try:
        async for chunk in reply.content.iter_any():
            data = events.feed(chunk) if events is not None else chunk
            if transport is None or transport.get_write_buffer_size() or len(data) >= _SMALL_WRITE:
                await _write(request, out, data, idle_s)  # may wait for the client: a deadline
            else:
                await out.write(data)  # the hot path: one call per chunk, no timer
        if events is not None:
            events.end()  # a stream that ends inside an event broke off
    except ConnectionResetError:
        raise  # the client's side (aiohttp's own ClientConnectionResetError is both)
    except TimeoutError:  # the reply's sock_read deadline: the decoder went quiet
        return "stream_idle"
    except aiohttp.ClientError:  # the decoder's side: cut, broken chunking, reset
        return "decode_stream"
    except ValueError:  # an event that is not a completion (events.py), or ended halfway
        return "decode_stream"
    except asyncio.CancelledError as exc:
        if lost_backend(exc) is None:
            raise
        return "decode_lost"  # failed its health checks mid-answer (stopped, or gone)
    return None


def _closing(decoder: str, failure: str | None, converter: StreamConverter | None) -> bytes:
    """The error event if any, then [DONE] (the converter's, or ours after an error)."""
    error = _error_event(decoder, failure)
    if converter is not None:
        return error + converter.closing()
    return error + b"data: [DONE]\n\n" if error else b""


def _error_event(decoder: str, failure: str | None) -> bytes:
    if failure is None:
        return b""
    reason = _REASONS.get(failure, "failed mid-stream")
    error = {"error": {"message": f"{decoder} {reason}", "type": "decode_failed", "code": 502}}
    return b"data: " + fastjson.dumps(error) + b"\n\n"
