"""One P/D request, from the client's body to the decoder's answer.

    client -> /v1/completions or /v1/chat/completions
      1. read the body (size cap, body budget, client deadlines) and parse it once (body.py)
      2. pick a prefiller and a decoder: each side's policy sees the parsed request
         (policies.py), then session stickiness and health
      3. serialize both backend payloads (protocols.py) and drop the parsed request
      4. prefill: the request cut to one token; a refused connection ejects that prefiller and
         retries once on another one
      5. lmcache-pd: wait (with a deadline) for the prefiller's LMCache to say the KV was sent
      6. decode (decode.py): the request, relayed as JSON or as SSE (a final error event if
         it breaks)

A client that disconnects cancels this whole coroutine (the app turns on aiohttp's handler
cancellation): every backend request in flight is closed, which aborts it in vLLM, and every
counter is released in ``finally``. One exception: with lmcache-pd, once the prefiller has
pushed the KV, the decoder is still asked for one token in the background, because KV it never
reads stays in its receive buffer.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import Any

import aiohttp
from aiohttp import web

from generator.proxy.body import HeldBody, parse_body, public_request_id, read_body
from generator.proxy.config import DecoderConfig
from generator.proxy.context import Context
from generator.proxy.decode import decode, drain_kv
from generator.proxy.errors import ProxyError
from generator.proxy.exchange import CONNECT_ERRORS, JSON_TYPE, Exchange, sendable
from generator.proxy.failover import lost_backend, lost_error, migratable, waiting_on
from generator.proxy.lmcache_pd import (
    DECODER_DROPS,
    FirstToken,
    StreamConverter,
    decoder_fields,
    drain_payload,
    first_token,
    merge_json,
    prefill_only,
)
from generator.proxy.notices import NoticeTimeout
from generator.proxy.one_token import answer_alone_payload
from generator.proxy.prompt import RequestView
from generator.proxy.protocols import append_fields, decode_base, prefill_payload
from generator.proxy.replies import read_json
from generator.proxy.routing import Backend, NoBackend
from generator.proxy.sse import send_events
from generator.proxy.validation import check_context

__all__ = ["Exchange", "handle_generate"]


async def handle_generate(
    ctx: Context, request: web.Request, endpoint: str, *, chat: bool
) -> web.StreamResponse:
    engine_id = uuid.uuid4().hex
    # Without a plain id of the client's, the client sees the engines' id.
    request_id = public_request_id(request.headers.get("X-Request-Id"), engine_id)
    exchange = Exchange(
        request,
        endpoint,
        chat,
        request_id,
        HeldBody(ctx.budget, retry_after_s=ctx.config.limits.retry_after_s),
        HeldBody(ctx.budget, retry_after_s=ctx.config.limits.retry_after_s),
        kv_id=engine_id,
        headers={"X-Request-Id": request_id},
    )
    kind = "chat" if chat else "completions"
    try:
        response = await _generate(ctx, exchange)
    except ProxyError as error:
        ctx.metrics.of(ctx.metrics.requests, kind, str(error.status)).inc()
        return error.response(exchange.headers)
    finally:
        exchange.held.release()
        exchange.answers.release()
        if ctx.notices is not None and exchange.kv_id:
            ctx.notices.forget(exchange.kv_id)
    ctx.metrics.of(ctx.metrics.requests, kind, str(response.status)).inc()
    return response


async def _generate(ctx: Context, exchange: Exchange) -> web.StreamResponse:
    """Attempts, each through its own pair, while one fails before the answer starts."""
    limits, timeouts = ctx.config.limits, ctx.config.timeouts
    exchange.raw = await read_body(exchange.request, limits, timeouts, exchange.held)
    failed: dict[str, set[str]] = {"prefill": set(), "decode": set()}
    last: ProxyError | None = None
    while True:
        try:
            return await _attempt(ctx, exchange, failed)
        except ProxyError as error:
            if error.kind == "no_backend" and last is not None:
                raise last from error  # every pair left was tried: say how the last one failed
            if exchange.started or not exchange.raw or not migratable(error):
                raise
            last = error
            side = error.kind.split("_", 1)[0]
            failed[side].add(exchange.headers.get(_PAIR_HEADERS[side], ""))
            ctx.metrics.of(ctx.metrics.migrations, side, error.kind).inc()
            ctx.log.warning("request %s: %s; trying another pair", exchange.request_id, error)
            if ctx.notices is not None:
                ctx.notices.forget(exchange.kv_id)
            exchange.next_attempt(uuid.uuid4().hex)


_PAIR_HEADERS = {"prefill": "X-Xpyd-Prefill", "decode": "X-Xpyd-Decode"}
# A held request looks for a pair this often: a restarted engine rejoins at a health check,
# seconds apart, so the poll adds at most this to its wait.
_HOLD_POLL_S = 0.25


async def _attempt(
    ctx: Context, exchange: Exchange, failed: dict[str, set[str]]
) -> web.StreamResponse:
    lmcache = ctx.config.protocol == "lmcache-pd"
    body, exchange.facts = parse_body(exchange.raw, chat=exchange.chat, pd_first_token=lmcache)
    if exchange.attempt + 1 >= ctx.config.recovery.attempts:
        exchange.raw = b""  # no attempt after this one needs it
    view = RequestView.of(body, chat=exchange.chat)
    prefiller, decoder = await _choose(ctx, exchange.request, view, failed)
    # Named before the prefill, so that a failure says which pair it was.
    exchange.headers |= {"X-Xpyd-Prefill": prefiller.name, "X-Xpyd-Decode": decoder.name}
    check_context(exchange.facts, decoder.max_model_len)
    exchange.forward = ctx.auth(exchange.request) | {
        "X-Request-Id": exchange.kv_id,
        "Content-Type": JSON_TYPE,
    }
    await _payloads(ctx, exchange, body, prefiller, decoder)
    del body
    view.release()  # the parsed request is gone once its payloads are serialized
    if exchange.alone:
        del exchange.headers["X-Xpyd-Prefill"]
        return await _decoder_alone(ctx, exchange, decoder)
    kv_to = decoder if lmcache else None
    prefilled, prefiller = await _prefill(ctx, exchange, prefiller, view, kv_to=kv_to)
    exchange.prefill = b""
    exchange.answers.release()  # parsed already: its bytes are gone
    exchange.headers["X-Xpyd-Prefill"] = prefiller.name  # the retry's, if it was retried
    if ctx.config.protocol == "nixl":
        params = prefilled.get("kv_transfer_params")
        fields = {"kv_transfer_params": params} if params is not None else {}
        payload, exchange.decode = append_fields(exchange.decode, fields), b""
        return await decode(
            ctx, exchange, exchange.endpoint, payload, decoder, converter=None, kv_from=prefiller
        )
    return await _decode_after_first_token(ctx, exchange, prefilled, prefiller, decoder)


async def _payloads(
    ctx: Context,
    exchange: Exchange,
    body: dict[str, Any],
    prefiller: Backend[Any],
    decoder: Backend[DecoderConfig],
) -> None:
    """lmcache-pd: the decoder's request alone for a prompt that fills the context
    (one_token.py); else both payloads."""
    if ctx.config.protocol == "lmcache-pd":
        exchange.alone = await answer_alone_payload(
            ctx,
            body,
            exchange.facts,
            chat=exchange.chat,
            prefiller=prefiller,
            headers=exchange.forward,
            max_model_len=decoder.max_model_len,
        )
    if not exchange.alone:
        _serialize(ctx, exchange, body, decoder)


def _serialize(
    ctx: Context, exchange: Exchange, body: dict[str, Any], decoder: Backend[DecoderConfig]
) -> None:
    """Both payloads, for the decoder chosen (lmcache-pd's prefill names its KV ports)."""
    exchange.model = body.get("model")
    exchange.prefill = prefill_payload(
        ctx.config.protocol,
        body,
        chat=exchange.chat,
        request_id=exchange.kv_id,
        decoder=decoder.config,
    )
    drops = DECODER_DROPS if ctx.config.protocol == "lmcache-pd" else frozenset()
    exchange.decode = decode_base(body, drop=drops)


async def _choose(
    ctx: Context, request: web.Request, view: RequestView, failed: dict[str, set[str]]
) -> tuple[Backend[Any], Backend[DecoderConfig]]:
    """A pair in rotation. With none, a first attempt waits up to ``recovery.hold_s`` for one
    (an engine restarting: the health checks take it back); a later attempt, whose pairs
    failed it, does not."""
    hold_s = ctx.config.recovery.hold_s if not (failed["prefill"] or failed["decode"]) else 0.0
    deadline = asyncio.get_running_loop().time() + hold_s
    held = False
    try:
        while True:
            try:
                return _pick_pair(ctx, request, view, failed)
            except NoBackend as exc:
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    waited = f" after waiting {hold_s:g} s" if hold_s else ""
                    message = f"no healthy prefiller or decoder{waited}"
                    raise ProxyError(503, "no_backend", message) from exc
                if not held:
                    held = True
                    ctx.metrics.held.inc()
                await asyncio.sleep(min(_HOLD_POLL_S, left))
    finally:
        if held:
            ctx.metrics.held.dec()


def _pick_pair(
    ctx: Context, request: web.Request, view: RequestView, failed: dict[str, set[str]]
) -> tuple[Backend[Any], Backend[DecoderConfig]]:
    header = ctx.config.session_header
    session = ctx.sessions.key(request.headers.get(header)) if header else None
    sticky = ctx.sessions.get(session) if session else None
    prefiller = ctx.prefill.pick(
        view, exclude=frozenset(failed["prefill"]), prefer=sticky[0] if sticky else None
    )
    decoder = ctx.decode.pick(
        view, exclude=frozenset(failed["decode"]), prefer=sticky[1] if sticky else None
    )
    if session:
        ctx.sessions.put(session, (prefiller.name, decoder.name))
    return prefiller, decoder


async def _prefill(
    ctx: Context,
    exchange: Exchange,
    prefiller: Backend[Any],
    view: RequestView,
    *,
    kv_to: Backend[DecoderConfig] | None = None,
) -> tuple[dict[str, Any], Backend[Any]]:
    tried: list[str] = []
    while True:
        try:
            return await _prefill_once(ctx, exchange, prefiller, kv_to), prefiller
        except CONNECT_ERRORS as exc:
            ctx.prefill.eject(prefiller)
            ctx.metrics.of(ctx.metrics.errors, "prefill_connect", prefiller.name).inc()
            ctx.log.warning("%s: %s", prefiller.name, exc)  # the address stays in the log
            tried.append(prefiller.name)
            unreachable = ProxyError(502, "prefill_unreachable", f"{', '.join(tried)} unreachable")
            if len(tried) > 1:  # retried once already
                raise unreachable from exc
            try:
                prefiller = ctx.prefill.pick(view, exclude=frozenset(tried))
            except NoBackend:
                raise unreachable from exc
            exchange.headers["X-Xpyd-Prefill"] = prefiller.name


async def _prefill_once(
    ctx: Context, exchange: Exchange, prefiller: Backend[Any], kv_to: Backend[DecoderConfig] | None
) -> dict[str, Any]:
    """``kv_to``: lmcache-pd's decoder, which the prefiller pushes the KV into as it prefills
    (a lost decoder never takes it, and the prefill waits for it)."""
    if ctx.notices is not None:
        ctx.notices.expect(exchange.kv_id, prefiller.config.tp)
    prefiller.outstanding += 1
    ctx.metrics.of(ctx.metrics.backend_requests, "prefill", prefiller.name).inc()
    started = time.perf_counter()
    try:
        with waiting_on(prefiller), waiting_on(kv_to) if kv_to else contextlib.nullcontext():
            answer = await _post_prefill(ctx, exchange, prefiller)
    except asyncio.CancelledError as exc:
        if (lost := lost_backend(exc)) is None:
            raise
        if kv_to is not None and lost == kv_to.name:
            raise lost_error("decode", lost) from None
        ctx.metrics.of(ctx.metrics.errors, "prefill_lost", prefiller.name).inc()
        raise lost_error("prefill", prefiller.name) from None
    finally:
        prefiller.outstanding -= 1
    ctx.metrics.of(ctx.metrics.prefill_seconds, prefiller.name).observe(
        time.perf_counter() - started
    )
    if not isinstance(answer, dict):
        raise ProxyError(502, "prefill_failed", f"{prefiller.name} answered a non-object")
    return answer


async def _post_prefill(ctx: Context, exchange: Exchange, prefiller: Backend[Any]) -> object:
    try:
        async with ctx.client.post(
            prefiller.config.url + exchange.endpoint,
            data=sendable(exchange.prefill),
            headers=exchange.forward,
            timeout=ctx.prefill_timeout,
        ) as reply:
            _, answer = await read_json(
                reply,
                role="prefill",
                backend=prefiller.name,
                redact=ctx.redact,
                held=exchange.answers,
            )
    except ProxyError:
        ctx.metrics.of(ctx.metrics.errors, "prefill_status", prefiller.name).inc()
        raise
    except TimeoutError as exc:
        ctx.metrics.of(ctx.metrics.errors, "prefill_timeout", prefiller.name).inc()
        raise ProxyError(504, "prefill_timeout", f"{prefiller.name} took too long") from exc
    except aiohttp.ClientPayloadError as exc:
        raise ProxyError(502, "prefill_failed", f"{prefiller.name} broke its answer") from exc
    except CONNECT_ERRORS:
        raise  # _prefill retries those on another prefiller
    except aiohttp.ClientOSError as exc:  # reset before its answer (a prefiller killed mid-read)
        raise ProxyError(502, "prefill_failed", f"{prefiller.name} reset the connection") from exc
    return answer


async def _decoder_alone(
    ctx: Context, exchange: Exchange, decoder: Backend[DecoderConfig]
) -> web.StreamResponse:
    """lmcache-pd, a prompt that fills the context (one_token.py): the decoder's own one-token
    answer, and no KV moves."""
    exchange.headers["X-Xpyd-Decode"] = decoder.name
    return await decode(ctx, exchange, exchange.endpoint, exchange.alone, decoder, converter=None)


async def _await_kv(
    ctx: Context, exchange: Exchange, prefiller: Backend[Any], decoder: Backend[DecoderConfig]
) -> None:
    assert ctx.notices is not None
    started = time.perf_counter()
    try:
        # Neither a prefiller lost while it pushes nor one pushing into a lost decoder sends
        # its notice.
        with waiting_on(prefiller), waiting_on(decoder):
            await ctx.notices.wait(exchange.kv_id, ctx.config.timeouts.kv_notice_s)
    except asyncio.CancelledError as exc:
        if (lost := lost_backend(exc)) is None:
            raise
        side = "decode" if lost == decoder.name else "prefill"
        raise lost_error(side, lost) from None
    except NoticeTimeout as exc:
        ctx.metrics.of(ctx.metrics.errors, "kv_notice_timeout", prefiller.name).inc()
        raise ProxyError(504, "kv_transfer_timeout", f"{prefiller.name}: {exc}") from exc
    ctx.metrics.of(ctx.metrics.kv_wait_seconds, prefiller.name).observe(
        time.perf_counter() - started
    )


async def _decode_after_first_token(
    ctx: Context,
    exchange: Exchange,
    prefilled: dict[str, Any],
    prefiller: Backend[Any],
    decoder: Backend[DecoderConfig],
) -> web.StreamResponse:
    """lmcache-pd: the prefiller made the first token; the decoder continues from it."""
    try:
        first = first_token(prefilled, chat=exchange.chat)
    except ValueError as exc:
        raise ProxyError(502, "prefill_failed", f"{prefiller.name}: {exc}") from exc
    facts, context = exchange.facts, decoder.max_model_len
    exchange.drain = drain = drain_payload(first, exchange.model, context)
    try:
        await _await_kv(ctx, exchange, prefiller, decoder)
        if prefill_only(first, facts.max_tokens, context):
            return await _answer_prefill_only(ctx, exchange, first, drain, decoder)
        converter = StreamConverter(first, chat=exchange.chat, request_id=exchange.request_id)
        fields = decoder_fields(first, facts, chat=exchange.chat, max_model_len=context)
        payload = append_fields(exchange.decode, fields)
        return await decode(ctx, exchange, "/v1/completions", payload, decoder, converter=converter)
    except asyncio.CancelledError:
        if not exchange.decoder_reached:  # the client left between the KV push and its read
            ctx.spawn(drain_kv(ctx, drain, decoder, exchange.forward))
        raise


async def _answer_prefill_only(
    ctx: Context,
    exchange: Exchange,
    first: FirstToken,
    drain: bytes,
    decoder: Backend[DecoderConfig],
) -> web.StreamResponse:
    # The answer is complete, but the decoder must still read the KV it was sent: chunks never
    # read stay in its receive buffer, and once that is full no notice comes again.
    exchange.decoder_reached = True
    await asyncio.shield(ctx.spawn(drain_kv(ctx, drain, decoder, exchange.forward)))
    if exchange.facts.stream:
        converter = StreamConverter(first, chat=exchange.chat, request_id=exchange.request_id)
        events = converter.opening() + converter.closing()
        return await send_events(exchange.request, exchange.headers, events)
    answer = merge_json(first, None, chat=exchange.chat, request_id=exchange.request_id)
    return web.json_response(answer, headers=exchange.headers)
