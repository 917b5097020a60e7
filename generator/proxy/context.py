"""What a request's handling shares with the rest of the proxy: configuration, pools, counters,
the one pooled client session, and the tasks that outlive a request."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Coroutine
from typing import Any

import aiohttp
from aiohttp import web

from generator.proxy.admission import Admission, BodyBudget
from generator.proxy.config import DecoderConfig, PolicyChoice, ProxyConfig
from generator.proxy.errors import Redactor
from generator.proxy.metrics import ProxyMetrics
from generator.proxy.notices import NoticeBoard
from generator.proxy.policies import Policy, make_policy
from generator.proxy.routing import Pool, SessionTable

__all__ = ["Context"]


class Context:
    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        timeouts, limits = config.timeouts, config.limits
        policy = config.policy
        self.prefill = Pool.of(config.prefill, _policy(policy.prefill), timeouts.eject_s)
        self.decode: Pool[DecoderConfig] = Pool.of(
            config.decode, _policy(policy.decode), timeouts.eject_s
        )
        self.sessions = SessionTable(config.session_capacity)
        self.metrics = ProxyMetrics()
        self.notices = (
            NoticeBoard(config.notify.bind_host, config.notify.port) if config.notify else None
        )
        self.admission = Admission(limits.max_concurrent_requests)
        self.budget = BodyBudget(limits.max_buffered_bytes)
        self.redact = Redactor([*config.prefill, *config.decode])
        self.log = logging.getLogger("xpyd.proxy")
        self.api_key = os.environ.get(config.api_key_env) if config.api_key_env else None
        self._client: aiohttp.ClientSession | None = None
        self._background: set[asyncio.Task[None]] = set()
        # Built once: per-request ClientTimeout objects add up. sock_read bounds each wait for
        # a backend's bytes; total bounds the whole request, stream included.
        self.prefill_timeout = aiohttp.ClientTimeout(
            total=timeouts.prefill_s,
            sock_connect=timeouts.connect_s,
            sock_read=timeouts.backend_idle_s,
        )
        self.decode_timeout = aiohttp.ClientTimeout(
            total=timeouts.decode_s,
            sock_connect=timeouts.connect_s,
            sock_read=timeouts.backend_idle_s,
        )

    def open_client(self) -> None:
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=60, enable_cleanup_closed=True)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.config.timeouts.connect_s)
        self._client = aiohttp.ClientSession(
            connector=connector, timeout=timeout, auto_decompress=False
        )

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self._client is not None:
            await self._client.close()

    @property
    def client(self) -> aiohttp.ClientSession:
        assert self._client is not None, "used outside the app's lifespan"
        return self._client

    def spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """A task that outlives the request that started it (held here until it ends)."""
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def auth(self, request: web.Request) -> dict[str, str]:
        """The client's credentials go through; else the configured key; never 'Bearer None'."""
        if "Authorization" in request.headers:
            return {"Authorization": request.headers["Authorization"]}
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


def _policy(choice: PolicyChoice) -> Policy:
    return make_policy(choice.name, choice.options)
