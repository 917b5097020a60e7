"""Issue 17, item 3: backends' answers never grow the proxy without bound. A non-streamed
nixl-mp answer (the proxy adds nothing to it) is passed on as it arrives, whatever its size;
an answer the proxy must read whole (lmcache-pd merges the prefiller's first token into it)
counts into the memory budget like request bodies: past it a request gets 503 + Retry-After,
and every byte is given back when the request ends."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest

from generator.proxy.app import Proxy
from tests.proxy.fakes import FakeBackend
from tests.proxy.harness import (
    eventually,
    free_port,
    lmcache_config,
    nixl_config,
    nothing_held,
    post,
    serve,
)

pytestmark = pytest.mark.anyio

BODY = {"model": "m", "prompt": "x", "max_tokens": 5}
LIMITS = {"max_buffered_bytes": 2 * 2**20}
PADDING = 900 * 1024  # two fit the 2 MiB budget, ten do not


def peak_of_budget(proxy: Proxy) -> tuple[asyncio.Task[None], Callable[[], int]]:
    peak = 0

    async def watch() -> None:
        nonlocal peak
        while True:
            peak = max(peak, proxy.ctx.budget.held)
            await asyncio.sleep(0)

    return asyncio.create_task(watch()), lambda: peak


async def test_large_nixl_answers_pass_through_without_being_held(
    backends: list[FakeBackend],
) -> None:
    p0, _, d0, _ = backends
    d0.answer_padding_bytes = PADDING
    proxy, server = await serve(nixl_config([p0], [d0], limits=LIMITS))
    watcher, peak = peak_of_budget(proxy)
    replies = await asyncio.gather(*(post(server, "/v1/completions", BODY) for _ in range(10)))
    watcher.cancel()
    assert [status for status, _, _ in replies] == [200] * 10
    for _, headers, raw in replies:  # whole, and the decoder's own answer
        assert headers["Content-Type"].startswith("application/json")
        answer = json.loads(raw)
        assert answer["choices"][0]["text"] == d0.name
        assert len(answer["padding"]) == PADDING
    assert peak() < 64 * 1024  # request bodies only: no answer was held
    await eventually(lambda: nothing_held(proxy))
    await server.close()


async def test_concurrent_merged_answers_are_bounded_by_the_budget(
    backends: list[FakeBackend],
) -> None:
    p0, _, d0, _ = backends
    d0.answer_padding_bytes = PADDING
    port = free_port()
    p0.notify_to, p0.notify_ranks = f"tcp://127.0.0.1:{port}", 2
    proxy, server = await serve(lmcache_config(p0, d0, port) | {"limits": LIMITS})
    watcher, peak = peak_of_budget(proxy)
    replies = await asyncio.gather(*(post(server, "/v1/completions", BODY) for _ in range(10)))
    watcher.cancel()
    statuses = sorted(status for status, _, _ in replies)
    assert set(statuses) == {200, 503}  # ten answers of 900 KiB at once do not fit 2 MiB
    assert all(h["Retry-After"] == "1" for s, h, _ in replies if s == 503)
    assert 0 < peak() <= LIMITS["max_buffered_bytes"]
    await eventually(lambda: nothing_held(proxy))
    # One at a time, every answer fits: the prefiller's first token, then the decoder's text.
    for _ in range(3):
        status, _, raw = await post(server, "/v1/completions", BODY)
        assert status == 200
        assert json.loads(raw)["choices"][0]["text"] == f"F{d0.name}"
    assert nothing_held(proxy)
    await server.close()
