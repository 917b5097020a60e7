"""Server-sent events to the client: relaying a decoder's stream, with a final error event
when the decoder breaks mid-stream (the seed proxy ended such streams silently)."""

from __future__ import annotations

import json

import aiohttp
from aiohttp import web

from generator.proxy.lmcache_pd import StreamConverter
from generator.proxy.metrics import ProxyMetrics

__all__ = ["relay_stream", "send_events"]

_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
_DECODER_BROKE = (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, TimeoutError)


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
) -> web.StreamResponse:
    out = web.StreamResponse(status=200, headers=headers | _SSE_HEADERS)
    await out.prepare(request)
    try:
        if converter is not None:
            await out.write(converter.opening())
        await _copy(reply, out, decoder, converter, metrics)
        if converter is not None:
            await out.write(converter.closing())
        await out.write_eof()
    except ConnectionResetError:
        # The client went away (often right after [DONE]): stop; leaving the caller's `async
        # with` closes the decoder connection, which aborts its request if still running.
        metrics.errors.labels("client_disconnect", decoder).inc()
    return out


async def _copy(
    reply: aiohttp.ClientResponse,
    out: web.StreamResponse,
    decoder: str,
    converter: StreamConverter | None,
    metrics: ProxyMetrics,
) -> None:
    try:
        async for chunk in reply.content.iter_any():
            await out.write(converter.feed(chunk) if converter is not None else chunk)
    except _DECODER_BROKE as exc:
        metrics.errors.labels("decode_stream", decoder).inc()
        message = f"{decoder} failed mid-stream: {type(exc).__name__}: {exc}"
        error = {"error": {"message": message, "type": "decode_failed", "code": 502}}
        await out.write(f"data: {json.dumps(error)}\n\n".encode())
        if converter is None:
            await out.write(b"data: [DONE]\n\n")
