"""Issue 8, class 3: bodies are capped (413), the bodies held at once are capped, requests in
flight are capped (503 + Retry-After) while health checks keep answering, and a request waiting
on its prefill holds its serialized payloads, not its parsed form."""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.proxy.fakes import FakeBackend
from tests.proxy.harness import (
    assert_openai_error,
    eventually,
    nixl_config,
    nothing_held,
    post,
    serve,
)

pytestmark = pytest.mark.anyio

LIMITS = {"max_body_bytes": 64 * 1024, "max_buffered_bytes": 96 * 1024}


def body_of(size: int) -> dict[str, Any]:
    return {"model": "m", "prompt": "x" * size, "max_tokens": 2}


async def chunked(data: bytes, piece: int = 8192) -> AsyncIterator[bytes]:
    for start in range(0, len(data), piece):
        yield data[start : start + piece]


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
async def test_a_body_over_the_cap_gets_413_and_reaches_no_backend(
    backends: list[FakeBackend], declared: bool
) -> None:
    p0, _, d0, _ = backends
    proxy, server = await serve(nixl_config([p0], [d0], limits=LIMITS))
    data = json.dumps(body_of(200_000)).encode()
    async with (
        aiohttp.ClientSession() as client,
        client.post(
            server.make_url("/v1/completions"),
            data=data if declared else chunked(data),
            headers={"Content-Type": "application/json"},
        ) as reply,
    ):
        assert_openai_error(reply.status, await reply.read(), 413)
    assert p0.seen == []
    assert nothing_held(proxy)
    status, _, _ = await post(server, "/v1/completions", body_of(1000))  # under the cap: fine
    assert status == 200
    await server.close()


async def test_past_the_body_budget_requests_get_503_with_retry_after(
    backends: list[FakeBackend],
) -> None:
    """Two 60 KiB bodies held by a hung prefiller fill a 96 KiB budget's first 60 KiB; the
    second does not fit until the first is released."""
    p0, _, d0, _ = backends
    p0.misbehave = "hang"
    proxy, server = await serve(nixl_config([p0], [d0], limits=LIMITS))
    first = asyncio.create_task(post(server, "/v1/completions", body_of(60_000)))
    await eventually(lambda: p0.in_flight == 1)
    status, headers, raw = await post(server, "/v1/completions", body_of(60_000))
    assert_openai_error(status, raw, 503)
    assert headers["Retry-After"] == "1"
    first.cancel()
    await eventually(lambda: nothing_held(proxy))
    await server.close()


async def test_past_the_concurrency_cap_503_while_health_checks_still_answer(
    backends: list[FakeBackend],
) -> None:
    p0, _, d0, _ = backends
    d0.misbehave = "hang"
    config = nixl_config([p0], [d0], limits={"max_concurrent_requests": 2, "retry_after_s": 3})
    proxy, server = await serve(config)
    held = [asyncio.create_task(post(server, "/v1/completions", body_of(10))) for _ in range(2)]
    await eventually(lambda: d0.in_flight == 2)
    status, headers, raw = await post(server, "/v1/completions", body_of(10))
    assert_openai_error(status, raw, 503)
    assert headers["Retry-After"] == "3"
    async with aiohttp.ClientSession() as client:
        for path in ("/health", "/ready", "/metrics"):
            async with client.get(server.make_url(path)) as reply:
                assert reply.status == 200, path
    for task in held:
        task.cancel()
    await eventually(lambda: nothing_held(proxy))
    d0.misbehave = None
    status, _, _ = await post(server, "/v1/completions", body_of(10))
    assert status == 200  # the slots came back
    await server.close()


async def test_a_request_waiting_on_its_prefill_holds_its_payloads_not_its_parsed_body(
    backends: list[FakeBackend],
) -> None:
    """A prompt of token ids is ~7 bytes each as JSON and ~36 as Python ints: while the prefill
    runs (seconds, for a long prompt) the proxy holds the serialized payloads, and the parsed
    request must be gone (the proxy held it, ~5x the body, until the end of the request)."""
    p0, _, d0, _ = backends
    p0.misbehave = "hang"
    proxy, server = await serve(nixl_config([p0], [d0]))
    prompt_length = 150_000
    data = json.dumps({"model": "m", "prompt": list(range(10**5, 10**5 + prompt_length))})
    request = asyncio.create_task(post_bytes(server.make_url("/v1/completions"), data.encode()))
    await eventually(lambda: p0.in_flight == 1, within_s=10)
    gc.collect()
    parsed = [o for o in gc.get_objects() if isinstance(o, list) and len(o) == prompt_length]
    assert parsed == []
    assert proxy.ctx.budget.held == len(data)  # the body's bytes count until the decoder has it
    request.cancel()
    await eventually(lambda: nothing_held(proxy))
    await server.close()


async def post_bytes(url: Any, data: bytes) -> int:
    async with (
        aiohttp.ClientSession() as client,
        client.post(url, data=chunked(data), headers={"Content-Type": "application/json"}) as reply,
    ):
        return reply.status
