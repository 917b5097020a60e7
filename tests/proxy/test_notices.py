"""Issue 17, item 1: no input on the KV-notice port stops the listener. Every message that is
not LMCache's ProxyNotif is refused, logged and counted; a message over the size bound is
dropped by ZMQ before the proxy reads it; requests keep working afterwards; /ready fails when
the listener is not running."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import msgpack
import pytest
import zmq
import zmq.asyncio
from hypothesis import given, settings
from hypothesis import strategies as st

from generator.proxy.notices import MAX_NOTICE_BYTES, NoticeBoard, parse_notice
from tests.proxy.fakes import FakeBackend
from tests.proxy.harness import eventually, free_port, lmcache_config, post, serve

pytestmark = pytest.mark.anyio

BODY = {"model": "m", "prompt": "x", "max_tokens": 5}


def nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


ATTACKS = [
    msgpack.packb({"type": "ProxyNotif", "req_id": nested(1000)}),  # the issue's ~3 KB message
    msgpack.packb({"req_id": {"a": nested(500)}}),
    msgpack.packb({"type": "ProxyNotif", "req_id": 12}),
    msgpack.packb({"type": "ProxyNotif", "req_id": "x" * 300}),
    msgpack.packb({"type": "ProxyNotif", "req_id": "ab", "extra": 1}),
    msgpack.packb({"type": "CancelNotif", "req_id": "ab"}),
    msgpack.packb(["ProxyNotif", "ab"]),
    b"\xc1",  # never used in msgpack
    b"",
    b"\xdd\xff\xff\xff\xff",  # an array that claims 4 billion elements
]


def test_lmcache_s_notice_is_accepted() -> None:
    # msgspec's tagged struct, as lmcache 0.5.6 pd_backend_async.ProxyNotif encodes it.
    assert parse_notice(msgpack.packb({"type": "ProxyNotif", "req_id": "abc-1"})) == "abc-1"


@pytest.mark.parametrize("payload", ATTACKS)
def test_anything_else_is_refused_with_a_reason(payload: bytes) -> None:
    with pytest.raises(ValueError, match=r"\w"):
        parse_notice(payload)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=MAX_NOTICE_BYTES))
def test_random_bytes_are_a_notice_or_a_value_error(payload: bytes) -> None:
    try:
        request_id = parse_notice(payload)
    except ValueError:
        return
    assert isinstance(request_id, str)
    assert 0 < len(request_id) <= 256


async def send_raw(address: str, payloads: list[bytes]) -> None:
    socket = zmq.asyncio.Context.instance().socket(zmq.PUSH)
    socket.connect(address)
    for payload in payloads:
        await socket.send(payload)
    await asyncio.sleep(0.1)
    socket.close(linger=1000)


async def test_the_listener_survives_every_attack_and_requests_still_work(
    backends: list[FakeBackend], caplog: pytest.LogCaptureFixture
) -> None:
    p0, _, d0, _ = backends
    port = free_port()
    p0.notify_to, p0.notify_ranks = f"tcp://127.0.0.1:{port}", 2
    proxy, server = await serve(lmcache_config(p0, d0, port))
    assert proxy.notices is not None
    with caplog.at_level(logging.WARNING, logger="xpyd.proxy.notices"):
        await send_raw(p0.notify_to, ATTACKS)
        await eventually(lambda: proxy.notices is not None and proxy.notices.rejected == 10)
    assert len([r for r in caplog.records if "ignoring a KV notice" in r.message]) == 10
    assert proxy.notices.running
    status, _, _ = await post(server, "/v1/completions", BODY)
    assert status == 200
    async with (
        aiohttp.ClientSession() as client,
        client.get(server.make_url("/metrics")) as reply,
    ):
        assert 'xpyd_proxy_kv_notices{outcome="rejected"} 10.0' in await reply.text()
    await server.close()


async def test_a_message_over_the_bound_is_dropped_unread() -> None:
    port = free_port()
    board = NoticeBoard("127.0.0.1", port)
    await board.start()
    huge = msgpack.packb({"type": "ProxyNotif", "req_id": "y" * (8 * 2**20)})
    await send_raw(board.address, [huge])
    await send_raw(board.address, [msgpack.packb({"type": "ProxyNotif", "req_id": "ok"})])
    await eventually(lambda: board.received == 1)
    assert board.rejected == 0  # ZMQ dropped the 8 MiB one: it never reached the proxy
    assert board.running
    await board.stop()


async def test_ready_fails_when_the_listener_is_not_running(backends: list[FakeBackend]) -> None:
    p0, _, d0, _ = backends
    proxy, server = await serve(lmcache_config(p0, d0, free_port()))
    assert proxy.notices is not None
    await proxy.notices.stop()
    async with (
        aiohttp.ClientSession() as client,
        client.get(server.make_url("/ready")) as reply,
    ):
        assert reply.status == 503
        assert (await reply.json())["kv_notices_listening"] is False
    await server.close()


async def test_a_host_name_is_resolved_for_bind() -> None:
    board = NoticeBoard("localhost", free_port())
    await board.start()
    assert board.address.startswith(("tcp://127.0.0.1:", "tcp://[::1]:"))
    await board.stop()
