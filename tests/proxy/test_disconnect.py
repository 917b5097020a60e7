"""Issue 8, class 1: a client that leaves, or a backend that hangs, never keeps a request, its
backend connection or its least-outstanding counter."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import pytest

from tests.proxy.fakes import FakeBackend
from tests.proxy.harness import (
    ProxyServer,
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


async def leave_early(server: ProxyServer, body: dict[str, Any], after_s: float = 0.3) -> None:
    """A client that gives up on its request: the connection closes under the proxy."""
    timeout = aiohttp.ClientTimeout(total=after_s)
    async with aiohttp.ClientSession(timeout=timeout) as client:
        with pytest.raises(TimeoutError):
            async with client.post(server.make_url("/v1/completions"), json=body) as reply:
                await reply.read()


@pytest.mark.parametrize("stream", [False, True])
async def test_a_client_leaving_cancels_its_hung_decoder_request(
    backends: list[FakeBackend], stream: bool
) -> None:
    p0, _, d0, _ = backends
    d0.misbehave = "hang"
    proxy, server = await serve(nixl_config([p0], [d0], policy={"decode": "least_outstanding"}))
    await leave_early(server, BODY | {"stream": stream})
    await eventually(lambda: d0.cancelled == 1)  # the decoder saw its connection closed
    await eventually(lambda: nothing_held(proxy))
    assert d0.in_flight == 0
    await server.close()


async def test_a_client_leaving_mid_stream_cancels_the_stream(
    backends: list[FakeBackend],
) -> None:
    p0, _, d0, _ = backends
    d0.misbehave = "stall"  # one event, then nothing
    proxy, server = await serve(nixl_config([p0], [d0]))
    await leave_early(server, BODY | {"stream": True})
    await eventually(lambda: d0.cancelled == 1)
    await eventually(lambda: nothing_held(proxy))
    await server.close()


async def test_a_client_leaving_during_prefill_cancels_it_and_never_decodes(
    backends: list[FakeBackend],
) -> None:
    p0, _, d0, _ = backends
    p0.misbehave = "hang"
    proxy, server = await serve(nixl_config([p0], [d0]))
    await leave_early(server, BODY)
    await eventually(lambda: p0.cancelled == 1)
    await eventually(lambda: nothing_held(proxy))
    assert d0.seen == []
    await server.close()


async def test_a_hung_decoder_ends_at_the_idle_deadline(backends: list[FakeBackend]) -> None:
    p0, _, d0, _ = backends
    d0.misbehave = "hang"
    timeouts = {"health_interval_s": 60, "backend_idle_s": 0.5}
    proxy, server = await serve(nixl_config([p0], [d0], timeouts=timeouts))
    started = time.monotonic()
    status, _, raw = await post(server, "/v1/completions", BODY)
    assert status == 504
    assert json.loads(raw)["error"]["type"] == "decode_timeout"
    assert time.monotonic() - started < 3
    await eventually(lambda: d0.cancelled == 1)
    assert nothing_held(proxy)
    await server.close()


async def test_a_stream_that_stalls_ends_with_an_error_event(
    backends: list[FakeBackend],
) -> None:
    p0, _, d0, _ = backends
    d0.misbehave = "stall"
    timeouts = {"health_interval_s": 60, "backend_idle_s": 0.5}
    proxy, server = await serve(nixl_config([p0], [d0], timeouts=timeouts))
    status, _, raw = await post(server, "/v1/completions", BODY | {"stream": True})
    events = [e for e in raw.decode().split("\n\n") if e]
    assert status == 200
    assert events[0] == 'data: {"choices": [{"text": "0"}]}'
    assert json.loads(events[-2][6:])["error"]["message"] == "d0 sent nothing for too long"
    assert events[-1] == "data: [DONE]"
    await eventually(lambda: d0.cancelled == 1)
    assert nothing_held(proxy)
    await server.close()


async def test_a_client_that_stops_reading_is_dropped_and_the_decoder_freed(
    backends: list[FakeBackend],
) -> None:
    p0, _, d0, _ = backends
    d0.misbehave = "flood"  # 64 KiB events, as fast as the proxy takes them
    timeouts = {"health_interval_s": 60, "backend_idle_s": 0.5}
    proxy, server = await serve(nixl_config([p0], [d0], timeouts=timeouts))
    reader, writer = await asyncio.open_connection(server.host, server.port)
    body = json.dumps(BODY | {"stream": True}).encode()
    writer.write(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    await writer.drain()
    # Never read: socket buffers fill, the proxy's writes wait, the idle deadline passes.
    await eventually(lambda: d0.cancelled == 1, within_s=10)
    await eventually(lambda: nothing_held(proxy))
    writer.close()
    await server.close()
    del reader


async def test_lmcache_pd_a_client_leaving_after_the_kv_push_still_drains_the_decoder(
    backends: list[FakeBackend],
) -> None:
    """The KV is in the decoder's receive buffer once the prefill answered: the decoder must
    read it, or that buffer fills and no KV-sent notice ever comes again."""
    p0, _, d0, _ = backends
    port = free_port()
    p0.notify_to, p0.notify_ranks = f"tcp://127.0.0.1:{port}", 1  # one of two: the wait hangs
    proxy, server = await serve(lmcache_config(p0, d0, port, kv_notice_s=30))
    await leave_early(server, BODY, after_s=0.5)
    await eventually(lambda: len(d0.seen) == 1)
    assert d0.seen[0] == {"model": "m", "prompt": [1, 2, 3, 7], "max_tokens": 1, "stream": False}
    await eventually(lambda: nothing_held(proxy))
    assert proxy.notices is not None
    assert proxy.notices.in_flight == 0
    await server.close()
