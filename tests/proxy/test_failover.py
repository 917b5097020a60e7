"""Issue 19: a request whose pair fails before its answer starts goes through another pair;
one whose backend fails its health checks is given up within the bound (never left waiting
on a stopped engine); an answer that already started ends with a clean error event.

Stand-in backends (tests/proxy/fakes.py); the same faults on real engines are in
tests/integration/test_faults.py."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import pytest

from generator.proxy.app import Proxy
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
FAST_CHECKS = {"health_interval_s": 0.1, "health_timeout_s": 0.5}


def migrating(
    prefill: list[FakeBackend], decode: list[FakeBackend], attempts: int = 2, **extra: Any
) -> dict[str, Any]:
    config = nixl_config(prefill, decode, **extra)
    return config | {"recovery": {"attempts": attempts}, "timeouts": FAST_CHECKS}


def migrations(proxy: Proxy, side: str, reason: str) -> float:
    value = proxy.metrics.registry.get_sample_value(
        "xpyd_proxy_migrations_total", {"side": side, "reason": reason}
    )
    return value or 0.0


@pytest.mark.parametrize("stream", [False, True])
async def test_a_decoder_that_answers_500_is_replaced_by_another(
    backends: list[FakeBackend], stream: bool
) -> None:
    p0, _, d0, d1 = backends
    d0.misbehave = "html_500"
    proxy, server = await serve(migrating([p0], [d0, d1]))
    status, headers, raw = await post(server, "/v1/completions", BODY | {"stream": stream})
    assert status == 200, raw
    assert headers["X-Xpyd-Decode"] == "d1"
    assert (b"data: " in raw) == stream
    assert len(p0.seen) == 2  # prefilled again for the new decoder
    assert migrations(proxy, "decode", "decode_failed") == 1
    await eventually(lambda: nothing_held(proxy))
    await server.close()


@pytest.mark.parametrize("side", ["prefill", "decode"])
async def test_a_backend_that_resets_the_connection_is_replaced_by_another(
    backends: list[FakeBackend], side: str
) -> None:
    p0, p1, d0, d1 = backends
    (p0 if side == "prefill" else d0).misbehave = "reset"
    proxy, server = await serve(migrating([p0, p1], [d0, d1]))
    status, headers, raw = await post(server, "/v1/completions", BODY)
    assert status == 200, raw
    assert headers[f"X-Xpyd-{side.title()}"] == f"{side[0]}1"
    assert migrations(proxy, side, f"{side}_failed") == 1
    await server.close()


async def test_a_decoder_that_is_gone_is_replaced_by_another(
    backends: list[FakeBackend],
) -> None:
    p0, _, d0, d1 = backends
    proxy, server = await serve(migrating([p0], [d0, d1]))
    await d0.close()  # connections refused from now on; its health check has not seen it yet
    status, headers, raw = await post(server, "/v1/completions", BODY)
    assert status == 200, raw
    assert headers["X-Xpyd-Decode"] == "d1"
    assert migrations(proxy, "decode", "decode_unreachable") == 1
    await server.close()


async def test_one_attempt_means_no_migration(backends: list[FakeBackend]) -> None:
    p0, _, d0, d1 = backends
    d0.misbehave = "html_500"
    proxy, server = await serve(migrating([p0], [d0, d1], attempts=1))
    status, _, raw = await post(server, "/v1/completions", BODY)
    assert status == 502, raw
    assert d1.seen == []
    assert migrations(proxy, "decode", "decode_failed") == 0
    await server.close()


async def test_the_clients_own_error_is_never_sent_elsewhere(backends: list[FakeBackend]) -> None:
    p0, _, d0, d1 = backends
    d0.misbehave = "json_400"
    _, server = await serve(migrating([p0], [d0, d1]))
    status, _, _ = await post(server, "/v1/completions", BODY)
    assert status == 400
    assert d1.seen == []
    await server.close()


async def test_attempts_are_bounded_when_every_decoder_fails(backends: list[FakeBackend]) -> None:
    p0, _, d0, d1 = backends
    d0.misbehave = d1.misbehave = "html_500"
    proxy, server = await serve(migrating([p0], [d0, d1], attempts=3))
    status, _, raw = await post(server, "/v1/completions", BODY)
    # Two decoders, both failed: the third attempt finds none left that was not tried, and
    # the client hears how the last one failed.
    assert status == 502, raw
    assert json.loads(raw)["error"]["type"] == "decode_failed"
    assert migrations(proxy, "decode", "decode_failed") == 2
    await eventually(lambda: nothing_held(proxy))
    await server.close()


async def _hung_until_unhealthy(backend: FakeBackend, after_s: float) -> None:
    await eventually(lambda: backend.in_flight == 1)
    await asyncio.sleep(after_s)
    backend.healthy = False  # as a SIGSTOPped engine: its /health stops answering 200


@pytest.mark.parametrize("stream", [False, True])
async def test_a_request_on_a_decoder_that_stops_is_migrated_within_the_bound(
    backends: list[FakeBackend], stream: bool
) -> None:
    p0, _, d0, d1 = backends
    d0.misbehave = "hang"  # accepts the request, never answers
    proxy, server = await serve(migrating([p0], [d0, d1]))
    started = time.monotonic()
    stopping = asyncio.create_task(_hung_until_unhealthy(d0, 0.2))
    status, headers, raw = await post(server, "/v1/completions", BODY | {"stream": stream})
    await stopping
    assert status == 200, raw
    assert headers["X-Xpyd-Decode"] == "d1"
    # One failed check (interval 0.1 s) after it stopped, not the 600 s idle limit.
    assert time.monotonic() - started < 3
    assert migrations(proxy, "decode", "decode_lost") == 1
    await eventually(lambda: d0.cancelled == 1)  # its request was closed
    await eventually(lambda: nothing_held(proxy))
    await server.close()


async def test_a_stream_that_started_ends_with_an_error_event_when_its_decoder_stops(
    backends: list[FakeBackend],
) -> None:
    p0, _, d0, d1 = backends
    d0.misbehave = "stall"  # one event, then nothing
    proxy, server = await serve(migrating([p0], [d0, d1]))
    stopping = asyncio.create_task(_hung_until_unhealthy(d0, 0.2))
    started = time.monotonic()
    status, _, raw = await post(server, "/v1/completions", BODY | {"stream": True})
    await stopping
    assert status == 200
    events = [line[6:] for line in raw.decode().splitlines() if line.startswith("data: ")]
    assert json.loads(events[0])["choices"][0]["text"] == "0"  # what the client already had
    error = json.loads(events[1])["error"]
    assert error["type"] == "decode_failed"
    assert "health checks" in error["message"]
    assert events[-1] == "[DONE]"
    assert time.monotonic() - started < 3
    assert d1.seen == []  # an answer that started is never sent again
    await eventually(lambda: nothing_held(proxy))
    await server.close()


async def test_a_prefill_on_a_prefiller_that_stops_goes_to_another(
    backends: list[FakeBackend],
) -> None:
    p0, p1, d0, _ = backends
    p0.misbehave = "hang"
    proxy, server = await serve(migrating([p0, p1], [d0]))
    stopping = asyncio.create_task(_hung_until_unhealthy(p0, 0.2))
    status, headers, raw = await post(server, "/v1/completions", BODY)
    await stopping
    assert status == 200, raw
    assert headers["X-Xpyd-Prefill"] == "p1"
    assert migrations(proxy, "prefill", "prefill_lost") == 1
    await eventually(lambda: nothing_held(proxy))
    await server.close()


async def test_a_decode_pulling_from_a_prefiller_that_dies_goes_through_another_pair(
    backends: list[FakeBackend],
) -> None:
    # nixl-mp: the decoder pulls the KV from the prefiller; one that died leaves the pull
    # hanging (the stand-in decoder hangs), so the request is given up when the prefiller is.
    p0, p1, d0, d1 = backends
    d0.misbehave = "hang"
    proxy, server = await serve(migrating([p0, p1], [d0, d1]))
    # Only the prefiller fails its checks; the decoder still answers /health.
    losing = asyncio.create_task(_unhealthy_when(p0, lambda: d0.in_flight == 1))
    status, headers, raw = await post(server, "/v1/completions", BODY)
    await losing
    assert status == 200, raw
    assert (headers["X-Xpyd-Prefill"], headers["X-Xpyd-Decode"]) == ("p1", "d1")
    await eventually(lambda: d0.cancelled == 1)  # the hung pull was closed
    assert migrations(proxy, "prefill", "prefill_lost") == 1
    await eventually(lambda: nothing_held(proxy))
    await server.close()


async def _unhealthy_when(backend: FakeBackend, condition: Any) -> None:
    await eventually(condition)
    await asyncio.sleep(0.2)
    backend.healthy = False


async def test_a_client_that_leaves_is_not_taken_for_a_lost_backend(
    backends: list[FakeBackend],
) -> None:
    p0, _, d0, d1 = backends
    d0.misbehave = "hang"
    proxy, server = await serve(migrating([p0], [d0, d1]))
    timeout = aiohttp.ClientTimeout(total=0.3)
    async with aiohttp.ClientSession(timeout=timeout) as client:
        with pytest.raises(TimeoutError):
            async with client.post(_url(server), json=BODY) as reply:
                await reply.read()
    await eventually(lambda: d0.cancelled == 1)
    await asyncio.sleep(0.3)
    assert d1.seen == []  # a cancelled client's request goes nowhere else
    assert migrations(proxy, "decode", "decode_lost") == 0
    await eventually(lambda: nothing_held(proxy))
    await server.close()


def _url(server: ProxyServer) -> str:
    return str(server.make_url("/v1/completions"))


def stall_watching(
    prefill: list[FakeBackend], decode: list[FakeBackend], stall_s: float
) -> dict[str, Any]:
    config = migrating(prefill, decode)
    return config | {"recovery": config["recovery"] | {"stall_s": stall_s}}


@pytest.mark.parametrize("stream", [False, True])
async def test_a_wedged_decoder_that_passes_its_health_checks_is_taken_out_and_sits_out(
    backends: list[FakeBackend], stream: bool
) -> None:
    # vLLM's wedged decoder (SIGSTOP/SIGCONT, a hung KV pull): /health passes, nothing moves.
    p0, _, d0, d1 = backends
    d0.misbehave = "hang"
    proxy, server = await serve(stall_watching([p0], [d0, d1], stall_s=0.5))
    started = time.monotonic()
    status, headers, raw = await post(server, "/v1/completions", BODY | {"stream": stream})
    took = time.monotonic() - started
    assert status == 200, raw
    assert headers["X-Xpyd-Decode"] == "d1"
    assert 0.5 <= took < 3  # the stall's length, a check or two, then the other decoder
    assert migrations(proxy, "decode", "decode_lost") == 1
    assert d0.healthy  # it never failed /health: its counters told
    wedged = proxy.decode.by_name("d0")
    assert wedged is not None
    assert not wedged.available(time.monotonic())  # /health passes, yet it sits out
    await eventually(lambda: wedged.available(time.monotonic()), within_s=3.0)
    await eventually(lambda: nothing_held(proxy))
    await server.close()


async def test_a_slow_decoder_whose_counters_move_is_not_taken_for_a_wedged_one(
    backends: list[FakeBackend],
) -> None:
    p0, _, d0, d1 = backends
    d0.misbehave = "crawl"  # 2 s of answer, a token every 0.2 s: four stall lengths of 0.5 s
    proxy, server = await serve(stall_watching([p0], [d0, d1], stall_s=0.5))
    status, headers, raw = await post(server, "/v1/completions", BODY | {"stream": True})
    assert status == 200, raw
    assert headers["X-Xpyd-Decode"] == "d0"
    assert raw.count(b"data: ") == 11  # its 10 events and [DONE], none cut
    assert migrations(proxy, "decode", "decode_lost") == 0
    await server.close()


async def test_an_idle_backend_is_never_stalled(backends: list[FakeBackend]) -> None:
    p0, _, d0, d1 = backends
    proxy, server = await serve(stall_watching([p0], [d0, d1], stall_s=0.2))
    await asyncio.sleep(0.6)  # three stall lengths without a request, counters still
    assert all(b.available(time.monotonic()) for b in proxy.decode.backends)
    await server.close()


async def test_an_lmcache_pd_request_whose_decoder_dies_before_the_kv_arrives_goes_elsewhere(
    backends: list[FakeBackend],
) -> None:
    """lmcache-pd: the prefiller pushes the KV into the decoder the proxy chose; into a dead
    decoder the push never finishes and its "KV sent" notice never comes (measured: requests
    then waited out their client's deadline). The request waits on that decoder too, so it is
    given up when the decoder fails its checks and goes through another pair."""
    p0, _, d0, d1 = backends
    port = free_port()
    p0.notify_to, p0.notify_ranks = f"tcp://127.0.0.1:{port}", 1  # rank 1's send hangs
    config = lmcache_config(p0, d0, port, **FAST_CHECKS)
    config["decode"].append(config["decode"][0] | {"name": d1.name, "url": d1.url})
    config["recovery"] = {"attempts": 2}
    proxy, server = await serve(config)

    async def decoder_dies() -> None:
        await eventually(lambda: proxy.notices is not None and proxy.notices.in_flight == 1)
        p0.notify_ranks = 2  # its sends to the other decoder work
        d0.healthy = False

    dying = asyncio.create_task(decoder_dies())
    started = time.monotonic()
    status, headers, raw = await post(server, "/v1/completions", BODY)
    await dying
    assert status == 200, raw
    assert (headers["X-Xpyd-Prefill"], headers["X-Xpyd-Decode"]) == ("p0", "d1")
    assert time.monotonic() - started < 3  # not kv_notice_s (30 s)
    assert migrations(proxy, "decode", "decode_lost") == 1
    assert d0.seen == []  # never decoded without its KV
    assert len(p0.seen) == 2  # prefilled again, for d1
    assert proxy.notices is not None
    await eventually(lambda: proxy.notices is not None and proxy.notices.in_flight == 0)
    await server.close()


async def _only_decoder_out(
    backends: list[FakeBackend], *, hold_s: float
) -> tuple[Proxy, ProxyServer]:
    """A proxy whose one decoder (d0) fails its checks (restarting) and is out of rotation."""
    p0, _, d0, _ = backends
    d0.healthy = False
    config = nixl_config([p0], [d0]) | {"recovery": {"hold_s": hold_s}, "timeouts": FAST_CHECKS}
    proxy, server = await serve(config)
    await eventually(lambda: not proxy.decode.available())
    return proxy, server


def held(proxy: Proxy) -> float:
    return proxy.metrics.registry.get_sample_value("xpyd_proxy_held_requests") or 0.0


async def test_a_request_waits_for_a_restarting_decoder_within_hold_s(
    backends: list[FakeBackend],
) -> None:
    """recovery.hold_s: sent while the only decoder is out of rotation (restarting), a request
    waits for the health checks to take it back instead of failing at once."""
    d0 = backends[2]
    proxy, server = await _only_decoder_out(backends, hold_s=5)
    started = time.monotonic()
    sending = asyncio.create_task(post(server, "/v1/completions", BODY))
    await eventually(lambda: held(proxy) == 1)
    await asyncio.sleep(0.3)
    assert not sending.done()  # still waiting, not a 503
    d0.healthy = True  # back: the next check (0.1 s apart) takes it into rotation
    status, headers, raw = await sending
    assert status == 200, raw
    assert headers["X-Xpyd-Decode"] == "d0"
    assert time.monotonic() - started < 3
    assert held(proxy) == 0
    await server.close()


async def test_a_held_request_gets_its_503_once_hold_s_is_over(
    backends: list[FakeBackend],
) -> None:
    proxy, server = await _only_decoder_out(backends, hold_s=0.5)
    started = time.monotonic()
    status, _, raw = await post(server, "/v1/completions", BODY)
    waited = time.monotonic() - started
    assert status == 503, raw
    assert json.loads(raw)["error"]["message"].endswith("after waiting 0.5 s")
    assert 0.5 <= waited < 2.5
    assert held(proxy) == 0
    await server.close()
