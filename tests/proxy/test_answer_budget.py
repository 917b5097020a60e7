"""Issue 17, item 3: backends' answers read whole count into the proxy's memory budget, like
request bodies: past it a request gets 503 + Retry-After instead of growing the proxy, and
every byte is given back when the request ends."""

from __future__ import annotations

import asyncio

import pytest

from tests.proxy.fakes import FakeBackend
from tests.proxy.harness import eventually, nixl_config, nothing_held, post, serve

pytestmark = pytest.mark.anyio

BODY = {"model": "m", "prompt": "x", "max_tokens": 5}
LIMITS = {"max_buffered_bytes": 2 * 2**20}


async def test_concurrent_large_answers_are_bounded_by_the_budget(
    backends: list[FakeBackend],
) -> None:
    p0, _, d0, _ = backends
    d0.answer_padding_bytes = 900 * 1024  # two fit the 2 MiB budget, ten do not
    proxy, server = await serve(nixl_config([p0], [d0], limits=LIMITS))
    peak = 0

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, proxy.ctx.budget.held)
            await asyncio.sleep(0)

    watcher = asyncio.create_task(watch())
    replies = await asyncio.gather(*(post(server, "/v1/completions", BODY) for _ in range(10)))
    watcher.cancel()
    statuses = sorted(status for status, _, _ in replies)
    assert 200 in statuses
    assert 503 in statuses  # ten answers of 900 KiB at once do not fit 2 MiB
    assert set(statuses) == {200, 503}
    assert all(h["Retry-After"] == "1" for s, h, _ in replies if s == 503)
    assert 0 < peak <= LIMITS["max_buffered_bytes"]
    await eventually(lambda: nothing_held(proxy))
    # One at a time, every answer fits.
    for _ in range(3):
        status, _, raw = await post(server, "/v1/completions", BODY)
        assert status == 200
        assert len(raw) > 900 * 1024
    assert nothing_held(proxy)
    await server.close()
