"""Issue 8, class 2: a client that sends its headers or its body slowly is let go at the
configured deadlines (answered 408 once its headers are in), never held forever."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.proxy.fakes import FakeBackend
from tests.proxy.harness import (
    ProxyServer,
    assert_openai_error,
    eventually,
    nixl_config,
    nothing_held,
    serve,
)

pytestmark = pytest.mark.anyio

DEADLINES = {
    "health_interval_s": 60,
    "client_header_s": 0.5,
    "client_body_idle_s": 0.5,
    "client_body_s": 1.5,
}
HEAD = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


async def connect(server: ProxyServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(server.host, server.port)


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bytes:
    """What the proxy sent before it closed the connection."""
    return await asyncio.wait_for(reader.read(), seconds)  # read() returns at EOF


async def answer_within(reader: asyncio.StreamReader, seconds: float) -> tuple[int, bytes]:
    """The status and body of the proxy's answer (it may keep reading after: lingering)."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), seconds)
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return int(head.split(b" ", 2)[1]), await reader.readexactly(length)


async def test_headers_that_never_finish_are_cut_off(backends: list[FakeBackend]) -> None:
    p0, _, d0, _ = backends
    proxy, server = await serve(nixl_config([p0], [d0], timeouts=DEADLINES))
    reader, writer = await connect(server)
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
    started = time.monotonic()
    assert await closed_within(reader, 5) == b""  # no request yet, so no answer
    assert time.monotonic() - started < 3
    assert nothing_held(proxy)
    writer.close()
    await server.close()


async def test_an_idle_connection_is_closed_at_the_header_deadline(
    backends: list[FakeBackend],
) -> None:
    p0, _, d0, _ = backends
    _, server = await serve(nixl_config([p0], [d0], timeouts=DEADLINES))
    reader, writer = await connect(server)  # sends nothing at all
    started = time.monotonic()
    assert await closed_within(reader, 5) == b""
    assert time.monotonic() - started < 3
    writer.close()
    await server.close()


async def test_a_body_that_stops_coming_gets_408(backends: list[FakeBackend]) -> None:
    p0, _, d0, _ = backends
    proxy, server = await serve(nixl_config([p0], [d0], timeouts=DEADLINES))
    reader, writer = await connect(server)
    writer.write(HEAD + b"Content-Length: 100\r\n\r\n" + b'{"prompt": "')  # 12 of 100 bytes
    started = time.monotonic()
    status, body = await answer_within(reader, 15)
    assert_openai_error(status, body, 408)
    assert time.monotonic() - started < 3
    assert p0.seen == []
    await eventually(lambda: nothing_held(proxy))
    writer.close()
    await server.close()


async def test_a_trickling_body_gets_408_at_the_whole_body_deadline(
    backends: list[FakeBackend],
) -> None:
    """A byte every 0.2 s never trips the 0.5 s gap, but the whole body must take < 1.5 s."""
    p0, _, d0, _ = backends
    proxy, server = await serve(nixl_config([p0], [d0], timeouts=DEADLINES))
    reader, writer = await connect(server)
    writer.write(HEAD + b"Transfer-Encoding: chunked\r\n\r\n")
    started = time.monotonic()

    async def trickle() -> None:
        for _ in range(100):
            writer.write(b"1\r\n \r\n")
            await asyncio.sleep(0.2)

    trickling = asyncio.create_task(trickle())
    status, body = await answer_within(reader, 15)
    trickling.cancel()
    assert_openai_error(status, body, 408)
    assert 1.4 < time.monotonic() - started < 4
    await eventually(lambda: nothing_held(proxy))
    writer.close()
    await server.close()
