"""Active health checks: every backend's /health, concurrently; results feed the pools."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp

from generator.proxy.routing import Backend, Pool

__all__ = ["check_pools"]

log = logging.getLogger("xpyd.proxy.health")
_TIMEOUT = aiohttp.ClientTimeout(total=3)


async def check_pools(client: aiohttp.ClientSession, pools: list[Pool[Any]]) -> None:
    await asyncio.gather(
        *(_check(client, pool, backend) for pool in pools for backend in pool.backends)
    )


async def _check(client: aiohttp.ClientSession, pool: Pool[Any], backend: Backend[Any]) -> None:
    # /health only: an lmcache-pd prefiller crashes on a request without disagg_spec.
    try:
        async with client.get(f"{backend.config.url}/health", timeout=_TIMEOUT) as reply:
            ok = reply.status == 200
    except (aiohttp.ClientError, TimeoutError):
        ok = False
    if ok != backend.healthy:
        log.warning("%s is %s", backend.name, "back in rotation" if ok else "out of rotation")
    pool.health(backend, ok)
