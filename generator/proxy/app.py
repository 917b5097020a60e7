"""The P/D proxy service (aiohttp server and client, one pooled client session).

Endpoints: /v1/completions and /v1/chat/completions (flow.py: prefill, then decode),
/v1/models (relayed from a decoder), /health, /ready, /metrics. Every answer carries
X-Request-Id; generation answers also X-Xpyd-Prefill / X-Xpyd-Decode (the pair used).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from generator.proxy.admission import Admission
from generator.proxy.config import ProxyConfig
from generator.proxy.context import Context
from generator.proxy.discovery import Resolve, addresses_of, discovered
from generator.proxy.errors import ProxyError, Redactor, error_response
from generator.proxy.flow import handle_generate
from generator.proxy.guard import Handler, guarded, method_not_allowed, not_found
from generator.proxy.health import check_pools
from generator.proxy.replies import read_json

__all__ = ["Proxy"]

_JSON = "application/json"
# Client address, request line, status, bytes, seconds, and the id to find it in backends' logs.
_ACCESS_FORMAT = '%a "%r" %s %b %Tf %{X-Request-Id}o'
_SHUTDOWN_S = 10.0  # streams in flight get this long to finish on SIGTERM
_MODELS_TIMEOUT = aiohttp.ClientTimeout(total=10)
log = logging.getLogger("xpyd.proxy")


class Proxy:
    def __init__(self, config: ProxyConfig, *, resolve: Resolve = addresses_of) -> None:
        """``resolve``: how backends' names are looked up (discovery.py; the system's)."""
        self.config = config
        self._resolve = resolve
        self.ctx = Context(config)
        self.prefill, self.decode, self.notices = (
            self.ctx.prefill,
            self.ctx.decode,
            self.ctx.notices,
        )
        self.metrics, self.sessions, self.admission = (
            self.ctx.metrics,
            self.ctx.sessions,
            self.ctx.admission,
        )
        self.health_known = asyncio.Event()  # set once every backend was checked once

    # ---- lifecycle -------------------------------------------------------------------------

    def runner(self, *, access_log: bool = False) -> web.AppRunner:
        """What serves the app, here and in the tests alike (aiohttp's test server would turn
        on handler cancellation by itself and hide a proxy that does not)."""
        access = logging.getLogger("aiohttp.access")
        if access_log:
            access.setLevel(logging.INFO)
        return web.AppRunner(
            self.app(),
            handle_signals=False,
            access_log=access if access_log else None,
            access_log_format=_ACCESS_FORMAT,
            shutdown_timeout=_SHUTDOWN_S,
        )

    def app(self) -> web.Application:
        timeouts = self.config.timeouts
        app = web.Application(
            # Settings of aiohttp's connection handler, here so that every runner gets them:
            handler_args={
                # aiohttp >= 3.9 does not cancel a handler when its client disconnects: it
                # only raises on the handler's next read or write, and a handler waiting on a
                # hung decoder does neither. Cancellation closes the backend requests in
                # flight (vLLM then aborts them) and runs every `finally` that frees a counter.
                "handler_cancellation": True,
                # A new or idle connection is closed if a request's headers are not all there
                # within this time (aiohttp's keep-alive timer starts when a connection opens
                # and after each answer): the header read timeout.
                "keepalive_timeout": timeouts.client_header_s,
                # Bodies are read as sent: a compressed one is refused (body.read_body), so
                # no small request ever inflates into a large one.
                "auto_decompress": False,
            },
        )
        self._add_routes(app)
        app.cleanup_ctx.append(self._lifespan)
        return app

    def _add_routes(self, app: web.Application) -> None:
        capped, retry_after_s = self.admission, self.config.limits.retry_after_s
        routes: list[tuple[str, str, Handler, Admission | None]] = [
            ("POST", "/v1/completions", self.completions, capped),
            ("POST", "/v1/chat/completions", self.chat_completions, capped),
            ("GET", "/v1/models", self.models, capped),
            # Local and cheap: answered under any load, so that no orchestrator restarts a
            # proxy for being busy.
            ("GET", "/health", self.health, None),
            ("GET", "/ready", self.ready, None),
            ("GET", "/metrics", self.prometheus, None),
        ]
        for method, path, handler, admission in routes:
            app.router.add_route(method, path, guarded(handler, admission, retry_after_s))
            app.router.add_route("*", path, method_not_allowed(method))
        app.router.add_route("*", "/{path:.*}", not_found)

    async def _lifespan(self, _: web.Application) -> AsyncIterator[None]:
        if self.notices is not None:
            await self.notices.start()  # first: it may fail (a port in use), leaving nothing open
        self.ctx.open_client()
        checker = asyncio.create_task(self._check_health_forever(), name="health-checks")
        yield
        checker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await checker
        if self.notices is not None:
            await self.notices.stop()
        await self.ctx.close()

    # ---- endpoints -------------------------------------------------------------------------

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await handle_generate(self.ctx, request, "/v1/completions", chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await handle_generate(self.ctx, request, "/v1/chat/completions", chat=True)

    async def health(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def ready(self, _: web.Request) -> web.Response:
        prefill, decode = len(self.prefill.available()), len(self.decode.available())
        # lmcache-pd: without its notice listener every request would wait 30 s and fail.
        listening = self.notices is None or self.notices.running
        ok = prefill > 0 and decode > 0 and listening
        body = {"ready": ok, "prefill_available": prefill, "decode_available": decode}
        if self.notices is not None:
            body["kv_notices_listening"] = listening
        return web.json_response(body, status=200 if ok else 503)

    async def prometheus(self, _: web.Request) -> web.Response:
        for role, pool in (("prefill", self.prefill), ("decode", self.decode)):
            for backend in pool.backends:
                labels = (role, backend.name)
                self.metrics.outstanding.labels(*labels).set(backend.outstanding)
                self.metrics.healthy.labels(*labels).set(
                    1 if backend.available(time.monotonic()) else 0
                )
        if self.notices is not None:
            self.metrics.notices.labels("accepted").set(self.notices.received)
            self.metrics.notices.labels("rejected").set(self.notices.rejected)
        body = generate_latest(self.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def models(self, request: web.Request) -> web.Response:
        for backend in self.decode.available():
            try:
                async with self.ctx.client.get(
                    f"{backend.config.url}/v1/models",
                    headers=self.ctx.auth(request),
                    timeout=_MODELS_TIMEOUT,
                ) as reply:
                    raw, _ = await read_json(
                        reply, role="decode", backend=backend.name, redact=self.ctx.redact
                    )
                    return web.Response(body=raw, content_type=_JSON)
            except ProxyError as error:
                if error.status < 500:  # a refusal (401, say) is the client's answer
                    return error.response({})
            except (aiohttp.ClientError, TimeoutError):
                pass  # the next decoder may answer
        return error_response(503, "no_backend", "no decoder answered /v1/models")

    # ---- health ----------------------------------------------------------------------------

    async def _check_health_forever(self) -> None:
        every_s, next_lookup = self.config.discover_every_s, 0.0
        while True:
            # Before the checks: a backend found now is checked in the same round.
            if every_s is not None and time.monotonic() >= next_lookup:
                await self.discover()
                next_lookup = time.monotonic() + every_s
            await self.check_health()
            self.health_known.set()
            await asyncio.sleep(self.config.timeouts.health_interval_s)

    async def discover(self) -> None:
        """Looks the backends' names up again (discovery.py): each pool gains and loses the
        addresses its names gained and lost."""
        prefill = self.prefill.sync(await discovered(self.config.prefill, self._resolve))
        decode = self.decode.sync(await discovered(self.config.decode, self._resolve))
        for role, (joined, left) in (("prefill", prefill), ("decode", decode)):
            if joined or left:
                log.warning("%s backends found: %s; gone: %s", role, joined or "-", left or "-")
            for name in left:  # its series would stand still at its last value
                for gauge in (self.metrics.outstanding, self.metrics.healthy):
                    with contextlib.suppress(KeyError):
                        gauge.remove(role, name)
        configs = [b.config for pool in (self.prefill, self.decode) for b in pool.backends]
        self.ctx.redact = Redactor([*self.config.prefill, *self.config.decode, *configs])

    async def check_health(self) -> None:
        await check_pools(
            self.ctx.client,
            [self.prefill, self.decode],
            timeout_s=self.config.timeouts.health_timeout_s,
            failures_to_eject=self.config.recovery.health_failures,
            stall_s=self.config.recovery.stall_s,
        )
