"""Active health checks: every backend's /health, concurrently; results feed the pools, and
a backend they take out of rotation is lost: the requests waiting on it are given up.

A backend with requests in flight must also make progress: a wedged vLLM engine answers
/health while its engine core never finishes a step again (measured after SIGSTOP/SIGCONT,
and on a decoder whose KV pull hung). Its token counters then stand still; ``stall_s`` of
that fails its checks, and it sits out ``stall_s`` more, since its /health would re-admit it
at once."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

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
    stall_s: float | None = None,
) -> None:
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    await asyncio.gather(
        *(
            _check(
                client,
                pool,
                backend,
                timeout=timeout,
                failures_to_eject=failures_to_eject,
                stall_s=stall_s,
            )
            for pool in pools
            for backend in pool.backends
        )
    )


async def _check(
    client: aiohttp.ClientSession,
    pool: Pool[Any],
    backend: Backend[Any],
    *,
    timeout: aiohttp.ClientTimeout,
    failures_to_eject: int,
    stall_s: float | None,
) -> None:
    # /health only: an lmcache-pd prefiller crashes on a request without disagg_spec.
    try:
        async with client.get(f"{backend.config.url}/health", timeout=timeout) as reply:
            ok = reply.status == 200
    except (aiohttp.ClientError, TimeoutError):
        ok = False
    stalled = ok and stall_s is not None and await _stalled(client, pool, backend, stall_s)
    ok = ok and not stalled
    if ok and not backend.healthy:
        log.warning("%s is back in rotation", backend.name)
    if ok and backend.max_model_len is None:
        backend.max_model_len = await _max_model_len(client, backend)
    if pool.health(backend, ok, failures_to_eject=failures_to_eject):
        if stalled and stall_s is not None:
            backend.stalled_until = pool.clock() + stall_s
        given_up = give_up_on(backend)
        why = "stalled: its token counters stood still" if stalled else "failed its checks"
        log.warning(
            "%s is out of rotation (%s); %d requests on it given up", backend.name, why, given_up
        )


# vLLM's counters that move with every engine step of a running request.
_PROGRESS = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total")


async def _stalled(
    client: aiohttp.ClientSession, pool: Pool[Any], backend: Backend[Any], stall_s: float
) -> bool:
    """Requests in flight on it, and its token counters unchanged for ``stall_s``."""
    now = pool.clock()
    if backend.outstanding == 0:  # idle is not stalled; the next request starts the clock
        backend.tokens_since = now
        return False
    tokens = await _tokens(client, backend)
    if tokens is None:  # unreadable: /health alone decides
        return False
    if tokens != backend.tokens:
        backend.tokens, backend.tokens_since = tokens, now
        return False
    return now - backend.tokens_since >= stall_s


async def _tokens(client: aiohttp.ClientSession, backend: Backend[Any]) -> float | None:
    try:
        async with client.get(f"{backend.config.url}/metrics", timeout=_CARD_TIMEOUT) as reply:
            if reply.status != 200:
                return None
            page = (await read_answer(reply)).decode(errors="replace")
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None
    # Only the two counters' lines are parsed: vLLM's page is mostly histogram buckets.
    lines = "\n".join(line for line in page.splitlines() if line.startswith(_PROGRESS))
    try:
        families = list(text_string_to_metric_families(lines + "\n"))
    except ValueError:
        return None
    return sum(sample.value for family in families for sample in family.samples)


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
