"""The decode step: the decoder's request, its answer relayed to the client (SSE as it comes,
a JSON object passed through, or merged with the prefiller's first token), and the drain that
makes a decoder read KV nobody else will (lmcache-pd)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import aiohttp
from aiohttp import web

from generator.proxy.config import DecoderConfig
from generator.proxy.context import Context
from generator.proxy.errors import ProxyError
from generator.proxy.exchange import CONNECT_ERRORS, JSON_TYPE, Exchange, sendable
from generator.proxy.failover import lost_backend, lost_error, waiting_on
from generator.proxy.lmcache_pd import StreamConverter, merge_json
from generator.proxy.replies import read_answer, read_json
from generator.proxy.routing import Backend
from generator.proxy.sse import (
    SSE_TYPE,
    BrokeOff,
    NotAnEvent,
    NotAnObject,
    relay_json,
    relay_stream,
)

__all__ = ["decode", "drain_kv"]


async def drain_kv(
    ctx: Context, payload: bytes, decoder: Backend[DecoderConfig], forward: dict[str, str]
) -> None:
    try:
        async with ctx.client.post(
            decoder.config.url + "/v1/completions",
            data=sendable(payload),
            headers=forward,
            timeout=ctx.decode_timeout,
        ) as reply:
            await read_answer(reply)
            drained = reply.status == 200
    except (aiohttp.ClientError, TimeoutError, ValueError):
        drained = False
    if not drained:  # that KV stays in the decoder's receive buffer: worth an alert
        ctx.metrics.of(ctx.metrics.errors, "decode_drain", decoder.name).inc()


async def decode(
    ctx: Context,
    exchange: Exchange,
    endpoint: str,
    payload: bytes,
    decoder: Backend[DecoderConfig],
    *,
    converter: StreamConverter | None,
    kv_from: Backend[Any] | None = None,
) -> web.StreamResponse:
    """``kv_from``: the prefiller the decoder pulls the KV from (nixl-mp), which the request
    depends on too until its answer starts."""
    decoder.outstanding += 1
    ctx.metrics.of(ctx.metrics.backend_requests, "decode", decoder.name).inc()
    pulling = (
        waiting_on(kv_from, while_=lambda: not exchange.started)
        if kv_from is not None
        else contextlib.nullcontext()
    )
    try:
        with waiting_on(decoder), pulling:
            return await _post_decode(
                ctx, exchange, endpoint, payload, decoder, converter=converter
            )
    except asyncio.CancelledError as exc:
        lost = lost_backend(exc)
        if lost is None:
            raise
        side = "decode" if lost == decoder.name else "prefill"
        ctx.metrics.of(ctx.metrics.errors, f"{side}_lost", lost).inc()
        if exchange.started:  # the answer began: cut it (an answer cannot be replaced now)
            if exchange.request.transport is not None:
                exchange.request.transport.abort()
            raise
        raise lost_error(side, lost) from None
    finally:
        decoder.outstanding -= 1


async def _post_decode(
    ctx: Context,
    exchange: Exchange,
    endpoint: str,
    payload: bytes,
    decoder: Backend[DecoderConfig],
    *,
    converter: StreamConverter | None,
) -> web.StreamResponse:
    started = time.perf_counter()
    try:
        async with ctx.client.post(
            decoder.config.url + endpoint,
            data=sendable(payload),
            headers=exchange.forward,
            timeout=ctx.decode_timeout,
        ) as reply:
            exchange.decoder_reached = True
            if reply.status != 200 and exchange.drain:
                # Refused after the KV was pushed (max_tokens past the context, say): nothing
                # would read that KV, so the decoder is asked for one token that does.
                ctx.spawn(drain_kv(ctx, exchange.drain, decoder, exchange.forward))
            del payload
            exchange.drop_payloads()
            ctx.metrics.of(ctx.metrics.decode_ttft_seconds, decoder.name).observe(
                time.perf_counter() - started
            )
            return await _relay(ctx, exchange, reply, decoder, converter)
    except CONNECT_ERRORS as exc:
        ctx.decode.eject(decoder)
        ctx.metrics.of(ctx.metrics.errors, "decode_connect", decoder.name).inc()
        ctx.log.warning("%s: %s", decoder.name, exc)
        raise ProxyError(502, "decode_unreachable", f"{decoder.name} unreachable") from exc
    except aiohttp.ClientOSError as exc:  # reset before its answer (a decoder killed mid-read)
        ctx.metrics.of(ctx.metrics.errors, "decode_reset", decoder.name).inc()
        raise ProxyError(502, "decode_failed", f"{decoder.name} reset the connection") from exc
    except TimeoutError as exc:
        ctx.metrics.of(ctx.metrics.errors, "decode_timeout", decoder.name).inc()
        raise ProxyError(504, "decode_timeout", f"{decoder.name} did not finish in time") from exc
    except (aiohttp.ClientPayloadError, BrokeOff) as exc:
        raise ProxyError(502, "decode_failed", f"{decoder.name} broke its answer") from exc
    except NotAnEvent as exc:  # as a stream's later events would be: the same stage
        ctx.metrics.of(ctx.metrics.errors, "decode_stream", decoder.name).inc()
        raise ProxyError(502, "decode_failed", f"{decoder.name} {exc}") from exc


async def _relay(
    ctx: Context,
    exchange: Exchange,
    reply: aiohttp.ClientResponse,
    decoder: Backend[DecoderConfig],
    converter: StreamConverter | None,
) -> web.StreamResponse:
    role, name = "decode", decoder.name
    if reply.status == 200 and exchange.facts.stream and reply.content_type == SSE_TYPE:
        return await relay_stream(
            exchange.request,
            exchange.headers,
            reply,
            decoder=name,
            converter=converter,
            metrics=ctx.metrics,
            idle_s=ctx.config.timeouts.backend_idle_s,
            on_start=exchange.answer_starts,
        )
    if reply.status == 200 and exchange.facts.stream:
        raise ProxyError(
            502, "decode_failed", f"{name} answered a stream with {reply.content_type}"
        )
    if reply.status == 200 and converter is None and reply.content_type == JSON_TYPE:
        try:  # the proxy adds nothing: passed on as it arrives, whatever its size
            return await relay_json(
                exchange.request,
                exchange.headers,
                reply,
                decoder=name,
                metrics=ctx.metrics,
                idle_s=ctx.config.timeouts.backend_idle_s,
                on_start=exchange.answer_starts,
            )
        except NotAnObject as exc:
            raise ProxyError(502, "decode_failed", f"{name} {exc}") from exc
    raw, answer = await read_json(
        reply, role=role, backend=name, redact=ctx.redact, held=exchange.answers
    )
    if converter is None:  # a 200 JSON answer labelled otherwise: checked whole, as before
        if not isinstance(answer, dict):
            raise ProxyError(502, "decode_failed", f"{name} answered a non-object")
        return web.Response(body=raw, content_type=JSON_TYPE, headers=exchange.headers)
    try:
        merged = merge_json(
            converter.first, answer, chat=exchange.chat, request_id=exchange.request_id
        )
    except ValueError as exc:
        raise ProxyError(502, "decode_failed", f"{name}: {exc}") from exc
    return web.json_response(merged, headers=exchange.headers)
