"""Active health checks: every backend's /health, concurrently; results feed the pools, and
a backend they take out of rotation is lost: the requests waiting on it are given up."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp

from generator.proxy import fastjson
from generator.proxy.failover import give_up_on
from generator.proxy.replies import read_answer
from generator.proxy.routing import Backend, Pool

__all__ = ["check_pools"]

log = logging.getLogger("xpyd.proxy.health")
_CARD_TIMEOUT = aiohttp.ClientTimeout(total=3)


async def check_pools(
    client: aiohttp.ClientSession,
    pools: list[Pool[Any]],
    *,
    timeout_s: float = 3.0,
    failures_to_eject: int = 1,
) -> None:
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    await asyncio.gather(
        *(
            _check(client, pool, backend, timeout, failures_to_eject)
            for pool in pools
            for backend in pool.backends
        )
    )


async def _check(
    client: aiohttp.ClientSession,
    pool: Pool[Any],
    backend: Backend[Any],
    timeout: aiohttp.ClientTimeout,
    failures_to_eject: int,
) -> None:
    # /health only: an lmcache-pd prefiller crashes on a request without disagg_spec.
    try:
        async with client.get(f"{backend.config.url}/health", timeout=timeout) as reply:
            ok = reply.status == 200
    except (aiohttp.ClientError, TimeoutError):
        ok = False
    if ok and not backend.healthy:
        log.warning("%s is back in rotation", backend.name)
    if ok and backend.max_model_len is None:
        backend.max_model_len = await _max_model_len(client, backend)
    if pool.health(backend, ok, failures_to_eject=failures_to_eject):
        given_up = give_up_on(backend)
        log.warning("%s is out of rotation; %d requests on it given up", backend.name, given_up)


async def _max_model_len(client: aiohttp.ClientSession, backend: Backend[Any]) -> int | None:
    """vLLM's model card says it ({"data": [{"max_model_len": 2048}]}); None if it does not."""
    try:
        async with client.get(f"{backend.config.url}/v1/models", timeout=_CARD_TIMEOUT) as reply:
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
