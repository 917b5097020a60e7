"""The P/D proxy service (aiohttp server and client, one pooled client session).

    client -> /v1/completions or /v1/chat/completions
      1. pick a prefiller and a decoder (policy, session stickiness, health)
      2. prefill: the request cut to one token (protocols.prefill_body); a refused connection
         ejects that prefiller and retries once on another one
      3. lmcache-pd: wait (with a deadline) for the prefiller's LMCache to say the KV was sent
      4. decode: the request, relayed as JSON or as SSE (a final error event if it breaks)

Every response carries X-Request-Id and X-Xpyd-Prefill / X-Xpyd-Decode (the pair used).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from generator.proxy import fastjson
from generator.proxy.config import DecoderConfig, ProxyConfig
from generator.proxy.health import check_pools
from generator.proxy.lmcache_pd import (
    StreamConverter,
    decoder_request,
    first_token,
    merge_json,
    prefill_only,
)
from generator.proxy.metrics import ProxyMetrics
from generator.proxy.notices import NoticeBoard, NoticeTimeout
from generator.proxy.protocols import decode_body, prefill_body
from generator.proxy.routing import Backend, NoBackend, Pool, SessionTable
from generator.proxy.sse import relay_stream, send_events

__all__ = ["Proxy"]

_JSON = "application/json"
_CONNECT_ERRORS = (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError)


class ProxyError(Exception):
    """Ends a request with an OpenAI-style error body."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message

    def response(self, headers: dict[str, str]) -> web.Response:
        body = {"error": {"message": self.message, "type": self.kind, "code": self.status}}
        return web.json_response(body, status=self.status, headers=headers)


@dataclass
class Exchange:
    """One client request on its way through prefill and decode."""

    request: web.Request
    endpoint: str
    chat: bool
    request_id: str
    body: dict[str, Any] = field(default_factory=dict)
    forward: dict[str, str] = field(default_factory=dict)  # headers sent to the backends
    headers: dict[str, str] = field(default_factory=dict)  # headers returned to the client


class Proxy:
    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        timeouts = config.timeouts
        self.prefill = Pool.of(config.prefill, config.policy.prefill, timeouts.eject_s)
        self.decode = Pool.of(config.decode, config.policy.decode, timeouts.eject_s)
        self.sessions = SessionTable(config.session_capacity)
        self.metrics = ProxyMetrics()
        self.notices = (
            NoticeBoard(config.notify.bind_host, config.notify.port) if config.notify else None
        )
        self.api_key = os.environ.get(config.api_key_env) if config.api_key_env else None
        self._client: aiohttp.ClientSession | None = None
        # Built once: per-request ClientTimeout objects and metric label lookups add up.
        self._prefill_timeout = aiohttp.ClientTimeout(
            total=timeouts.prefill_s, sock_connect=timeouts.connect_s
        )
        self._decode_timeout = aiohttp.ClientTimeout(
            total=timeouts.decode_s, sock_connect=timeouts.connect_s
        )
        self.health_known = asyncio.Event()  # set once every backend was checked once

    # ---- lifecycle -------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/ready", self.ready)
        app.router.add_get("/metrics", self.prometheus)
        app.cleanup_ctx.append(self._lifespan)
        return app

    async def _lifespan(self, _: web.Application) -> AsyncIterator[None]:
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60, enable_cleanup_closed=True)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.config.timeouts.connect_s)
        self._client = aiohttp.ClientSession(
            connector=connector, timeout=timeout, auto_decompress=False
        )
        if self.notices is not None:
            await self.notices.start()
        checker = asyncio.create_task(self._check_health_forever(), name="health-checks")
        yield
        checker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await checker
        if self.notices is not None:
            await self.notices.stop()
        await self._client.close()

    @property
    def client(self) -> aiohttp.ClientSession:
        assert self._client is not None, "used outside the app's lifespan"
        return self._client

    # ---- endpoints -------------------------------------------------------------------------

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "/v1/completions", chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, "/v1/chat/completions", chat=True)

    async def health(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def ready(self, _: web.Request) -> web.Response:
        prefill, decode = len(self.prefill.available()), len(self.decode.available())
        ok = prefill > 0 and decode > 0
        body = {"ready": ok, "prefill_available": prefill, "decode_available": decode}
        return web.json_response(body, status=200 if ok else 503)

    async def prometheus(self, _: web.Request) -> web.Response:
        for role, pool in (("prefill", self.prefill), ("decode", self.decode)):
            for backend in pool.backends:
                labels = (role, backend.name)
                self.metrics.outstanding.labels(*labels).set(backend.outstanding)
                self.metrics.healthy.labels(*labels).set(
                    1 if backend.available(time.monotonic()) else 0
                )
        body = generate_latest(self.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def models(self, request: web.Request) -> web.Response:
        for backend in self.decode.available():
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with self.client.get(
                    f"{backend.config.url}/v1/models",
                    headers=self._auth(request),
                    timeout=aiohttp.ClientTimeout(total=10),
                ) as reply:
                    return web.Response(
                        body=await reply.read(), status=reply.status, content_type=_JSON
                    )
        return ProxyError(503, "no_backend", "no decoder answered /v1/models").response({})

    # ---- the P/D request -------------------------------------------------------------------

    async def _generate(
        self, request: web.Request, endpoint: str, *, chat: bool
    ) -> web.StreamResponse:
        request_id = request.headers.get("X-Request-Id") or uuid.uuid4().hex
        exchange = Exchange(
            request, endpoint, chat, request_id, headers={"X-Request-Id": request_id}
        )
        kind = "chat" if chat else "completions"
        try:
            exchange.body = await self._body(request)
            prefiller, decoder = self._choose(request)
            exchange.forward = self._auth(request) | {
                "X-Request-Id": request_id,
                "Content-Type": _JSON,
            }
            prefilled, prefiller = await self._prefill(exchange, prefiller, decoder)
            exchange.headers |= {"X-Xpyd-Prefill": prefiller.name, "X-Xpyd-Decode": decoder.name}
            if self.config.protocol == "nixl":
                payload = decode_body(exchange.body, prefilled)
                response = await self._decode(exchange, exchange.endpoint, payload, decoder, None)
            else:
                response = await self._decode_after_first_token(exchange, prefilled, decoder)
        except ProxyError as error:
            self.metrics.requests.labels(kind, str(error.status)).inc()
            return error.response(exchange.headers)
        self.metrics.requests.labels(kind, str(response.status)).inc()
        return response

    async def _body(self, request: web.Request) -> dict[str, Any]:
        try:
            body = fastjson.loads(await request.read())
        except ValueError as exc:  # orjson's JSONDecodeError is a ValueError too
            raise ProxyError(400, "invalid_request_error", f"body is not JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise ProxyError(400, "invalid_request_error", "body must be a JSON object")
        return body

    def _auth(self, request: web.Request) -> dict[str, str]:
        """The client's credentials go through; else the configured key; never 'Bearer None'."""
        if "Authorization" in request.headers:
            return {"Authorization": request.headers["Authorization"]}
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def _choose(self, request: web.Request) -> tuple[Backend[Any], Backend[DecoderConfig]]:
        session = (
            request.headers.get(self.config.session_header) if self.config.session_header else None
        )
        sticky = self.sessions.get(session) if session else None
        try:
            prefiller = self.prefill.pick(prefer=sticky[0] if sticky else None)
            decoder = self.decode.pick(prefer=sticky[1] if sticky else None)
        except NoBackend as exc:
            raise ProxyError(503, "no_backend", "no healthy prefiller or decoder") from exc
        if session:
            self.sessions.put(session, (prefiller.name, decoder.name))
        return prefiller, decoder

    async def _prefill(
        self, exchange: Exchange, prefiller: Backend[Any], decoder: Backend[DecoderConfig]
    ) -> tuple[dict[str, Any], Backend[Any]]:
        payload = prefill_body(
            self.config.protocol,
            exchange.body,
            chat=exchange.chat,
            request_id=exchange.request_id,
            decoder=decoder.config,
        )
        tried: set[str] = set()
        while True:
            try:
                return await self._prefill_once(exchange, payload, prefiller), prefiller
            except _CONNECT_ERRORS as exc:
                self.prefill.eject(prefiller)
                self.metrics.errors.labels("prefill_connect", prefiller.name).inc()
                tried.add(prefiller.name)
                try:
                    prefiller = self.prefill.pick(exclude=frozenset(tried))
                except NoBackend:
                    raise ProxyError(502, "prefill_unreachable", f"{sorted(tried)}: {exc}") from exc
                if len(tried) > 1:  # retried once already
                    raise ProxyError(502, "prefill_unreachable", f"{sorted(tried)}: {exc}") from exc

    async def _prefill_once(
        self, exchange: Exchange, payload: dict[str, Any], prefiller: Backend[Any]
    ) -> dict[str, Any]:
        timeouts, request_id = self.config.timeouts, exchange.request_id
        if self.notices is not None:
            self.notices.expect(request_id, prefiller.config.tp)
        prefiller.outstanding += 1
        self.metrics.backend_requests.labels("prefill", prefiller.name).inc()
        started = time.perf_counter()
        try:
            async with self.client.post(
                prefiller.config.url + exchange.endpoint,
                data=fastjson.dumps(payload),
                headers=exchange.forward,
                timeout=self._prefill_timeout,
            ) as reply:
                raw = await reply.read()
                if reply.status != 200:
                    self.metrics.errors.labels("prefill_status", prefiller.name).inc()
                    raise ProxyError(
                        reply.status,
                        "prefill_failed",
                        f"{prefiller.name}: {raw[:500].decode(errors='replace')}",
                    )
            self.metrics.prefill_seconds.labels(prefiller.name).observe(
                time.perf_counter() - started
            )
            if self.notices is not None:
                await self._await_kv(request_id, prefiller)
            result: dict[str, Any] = fastjson.loads(raw)
            return result
        except TimeoutError as exc:
            self.metrics.errors.labels("prefill_timeout", prefiller.name).inc()
            raise ProxyError(
                504, "prefill_timeout", f"{prefiller.name} took over {timeouts.prefill_s:.0f} s"
            ) from exc
        finally:
            prefiller.outstanding -= 1
            if self.notices is not None:
                self.notices.forget(request_id)

    async def _await_kv(self, request_id: str, prefiller: Backend[Any]) -> None:
        assert self.notices is not None
        started = time.perf_counter()
        try:
            await self.notices.wait(request_id, self.config.timeouts.kv_notice_s)
        except NoticeTimeout as exc:
            self.metrics.errors.labels("kv_notice_timeout", prefiller.name).inc()
            raise ProxyError(504, "kv_transfer_timeout", f"{prefiller.name}: {exc}") from exc
        self.metrics.kv_wait_seconds.labels(prefiller.name).observe(time.perf_counter() - started)

    async def _decode_after_first_token(
        self, exchange: Exchange, prefilled: dict[str, Any], decoder: Backend[DecoderConfig]
    ) -> web.StreamResponse:
        """lmcache-pd: the prefiller made the first token; the decoder continues from it."""
        try:
            first = first_token(prefilled, chat=exchange.chat)
        except ValueError as exc:
            raise ProxyError(502, "prefill_failed", str(exc)) from exc
        converter = StreamConverter(first, chat=exchange.chat, request_id=exchange.request_id)
        payload = decoder_request(exchange.body, first, chat=exchange.chat)
        if prefill_only(first, exchange.body, chat=exchange.chat):
            # The answer is complete, but the decoder must still read the KV it was sent: chunks
            # never read stay in its receive buffer, and once that is full no notice comes again.
            await self._drain(payload | {"max_tokens": 1, "stream": False}, decoder, exchange)
            if exchange.body.get("stream"):
                return await send_events(
                    exchange.request, exchange.headers, converter.opening() + converter.closing()
                )
            answer = merge_json(first, None, chat=exchange.chat, request_id=exchange.request_id)
            return web.json_response(answer, headers=exchange.headers)
        return await self._decode(exchange, "/v1/completions", payload, decoder, converter)

    async def _drain(
        self, payload: dict[str, Any], decoder: Backend[DecoderConfig], exchange: Exchange
    ) -> None:
        try:
            async with self.client.post(
                decoder.config.url + "/v1/completions",
                data=fastjson.dumps(payload),
                headers=exchange.forward,
                timeout=self._decode_timeout,
            ) as reply:
                await reply.read()
        except (aiohttp.ClientError, TimeoutError):
            self.metrics.errors.labels("decode_drain", decoder.name).inc()

    async def _decode(
        self,
        exchange: Exchange,
        endpoint: str,
        payload: dict[str, Any],
        decoder: Backend[DecoderConfig],
        converter: StreamConverter | None,
    ) -> web.StreamResponse:
        decoder.outstanding += 1
        self.metrics.backend_requests.labels("decode", decoder.name).inc()
        started = time.perf_counter()
        try:
            async with self.client.post(
                decoder.config.url + endpoint,
                data=fastjson.dumps(payload),
                headers=exchange.forward,
                timeout=self._decode_timeout,
            ) as reply:
                self.metrics.decode_ttft_seconds.labels(decoder.name).observe(
                    time.perf_counter() - started
                )
                if reply.status != 200 or not exchange.body.get("stream"):
                    raw = await reply.read()
                    if converter is not None and reply.status == 200:
                        answer = merge_json(
                            converter.first,
                            fastjson.loads(raw),
                            chat=exchange.chat,
                            request_id=exchange.request_id,
                        )
                        return web.json_response(answer, headers=exchange.headers)
                    return web.Response(
                        body=raw, status=reply.status, content_type=_JSON, headers=exchange.headers
                    )
                return await relay_stream(
                    exchange.request,
                    exchange.headers,
                    reply,
                    decoder=decoder.name,
                    converter=converter,
                    metrics=self.metrics,
                )
        except _CONNECT_ERRORS as exc:
            self.decode.eject(decoder)
            self.metrics.errors.labels("decode_connect", decoder.name).inc()
            raise ProxyError(502, "decode_unreachable", f"{decoder.name}: {exc}") from exc
        except TimeoutError as exc:
            raise ProxyError(
                504, "decode_timeout", f"{decoder.name} did not finish in time"
            ) from exc
        finally:
            decoder.outstanding -= 1

    # ---- health ----------------------------------------------------------------------------

    async def _check_health_forever(self) -> None:
        while True:
            await self.check_health()
            self.health_known.set()
            await asyncio.sleep(self.config.timeouts.health_interval_s)

    async def check_health(self) -> None:
        await check_pools(self.client, [self.prefill, self.decode])
