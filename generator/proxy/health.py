"""Active health checks: every backend's /health, concurrently; results feed the pools."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp

from generator.proxy import fastjson
from generator.proxy.replies import read_answer
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
    if ok and backend.max_model_len is None:
        backend.max_model_len = await _max_model_len(client, backend)
    pool.health(backend, ok)


async def _max_model_len(client: aiohttp.ClientSession, backend: Backend[Any]) -> int | None:
    """vLLM's model card says it ({"data": [{"max_model_len": 2048}]}); None if it does not."""
    try:
        async with client.get(f"{backend.config.url}/v1/models", timeout=_TIMEOUT) as reply:
            if reply.status != 200:
                return None
            models = fastjson.loads(await read_answer(reply))
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None
    cards = models.get("data") if isinstance(models, dict) else None
    card = cards[0] if isinstance(cards, list) and cards else None
    length = card.get("max_model_len") if isinstance(card, dict) else None
    if isinstance(length, int) and not isinstance(length, bool) and 0 < length < 2**31:
        return length
    return None
