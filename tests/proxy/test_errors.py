"""Issue 8, class 4: whatever a backend answers, the client gets JSON it asked for or an OpenAI
error with the right status; nothing names a backend's address; a client's fields and headers
cannot steer the backends' KV plumbing."""

from __future__ import annotations

import json

import aiohttp
import pytest

from tests.proxy.fakes import FakeBackend, Misbehaviour
from tests.proxy.harness import (
    assert_openai_error,
    backend_addresses,
    eventually,
    nixl_config,
    nothing_held,
    post,
    serve,
    serve_lmcache_pd,
)

pytestmark = pytest.mark.anyio

BODY = {"model": "m", "prompt": "x", "max_tokens": 5}


@pytest.mark.parametrize(
    ("side", "how", "stream", "status"),
    [
        ("prefill", "html", False, 502),
        ("prefill", "html_500", False, 502),
        ("prefill", "json_400", False, 400),
        ("decode", "html", False, 502),
        ("decode", "html", True, 502),  # asked for a stream, got a page
        ("decode", "html_500", True, 502),
        ("decode", "json_400", False, 400),
        ("decode", "garbage_sse", False, 502),  # asked for JSON, got a stream
        ("decode", "json_list", False, 502),  # JSON, but not an answer
    ],
)
async def test_a_misbehaving_backend_gives_an_openai_error_without_its_address(
    backends: list[FakeBackend], side: str, how: Misbehaviour, stream: bool, status: int
) -> None:
    p0, _, d0, _ = backends
    (p0 if side == "prefill" else d0).misbehave = how
    proxy, server = await serve(nixl_config([p0], [d0]))
    code, _, raw = await post(server, "/v1/completions", BODY | {"stream": stream})
    error = assert_openai_error(code, raw, status, *backend_addresses(p0, d0))
    if how == "json_400":  # the backend's own words reach the client, its address does not
        assert error["message"] == f"context too long at {side[0]}0"
        assert error["type"] == "BadRequestError"
    assert nothing_held(proxy)
    await server.close()


async def test_a_decoder_that_breaks_off_a_passed_on_answer_cuts_the_connection(
    backends: list[FakeBackend],
) -> None:
    """nixl-mp answers pass through as they arrive: one cut halfway cannot become an error
    any more (its first bytes are sent), so the client's connection is cut too, never ended
    as if the answer were whole."""
    p0, _, d0, _ = backends
    d0.misbehave = "json_cut"
    proxy, server = await serve(nixl_config([p0], [d0]))
    with pytest.raises(aiohttp.ClientPayloadError):
        await post(server, "/v1/completions", BODY)
    await eventually(lambda: nothing_held(proxy))
    failed = proxy.ctx.metrics.registry.get_sample_value(
        "xpyd_proxy_errors_total", {"stage": "decode_stream", "backend": "d0"}
    )
    assert failed == 1
    await server.close()


async def test_an_unreachable_prefiller_is_named_not_located(
    backends: list[FakeBackend], dead_url: str
) -> None:
    _, _, d0, _ = backends
    config = nixl_config([], [d0])
    dead = dead_url
    config["prefill"] = [{"name": "p-dead", "url": dead}]
    proxy, server = await serve(config)
    proxy.prefill.health(proxy.prefill.backends[0], ok=True)  # as if it had just died
    status, _, raw = await post(server, "/v1/completions", BODY)
    error = assert_openai_error(status, raw, 502, dead, dead.split("//")[1])
    assert error["message"] == "p-dead unreachable"
    await server.close()


async def test_lmcache_pd_a_decoder_stream_of_garbage_ends_with_an_error_event(
    backends: list[FakeBackend],
) -> None:
    p0, _, d0, _ = backends
    d0.misbehave = "garbage_sse"
    server = await serve_lmcache_pd(p0, d0)
    status, _, raw = await post(server, "/v1/completions", BODY | {"stream": True})
    events = [e for e in raw.decode().split("\n\n") if e]
    assert status == 200
    assert json.loads(events[0][6:])["choices"][0]["text"] == "F"  # the prefiller's token
    assert json.loads(events[-2][6:])["error"]["type"] == "decode_failed"
    assert events[-1] == "data: [DONE]"
    await server.close()


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/v1/completions", 405),
        ("PUT", "/v1/chat/completions", 405),
        ("POST", "/health", 405),
        ("GET", "/v2/anything", 404),
        ("POST", "/", 404),
    ],
)
async def test_aiohttps_own_answers_are_openai_errors(
    backends: list[FakeBackend], method: str, path: str, status: int
) -> None:
    p0, _, d0, _ = backends
    _, server = await serve(nixl_config([p0], [d0]))
    async with (
        aiohttp.ClientSession() as client,
        client.request(method, server.make_url(path)) as reply,
    ):
        assert_openai_error(reply.status, await reply.read(), status)
        if status == 405:
            assert "Allow" in reply.headers
    await server.close()


@pytest.mark.parametrize(
    "body",
    [
        {"model": "m", "prompt": "x", "stream": "sometimes"},
        {"model": "m", "prompt": "x", "max_tokens": [5]},
        {"model": "m", "prompt": "x", "max_tokens": 2.5},
        ["not", "an", "object"],
    ],
)
async def test_fields_the_proxy_reads_are_checked_like_vllm_checks_them(
    backends: list[FakeBackend], body: object
) -> None:
    p0, _, d0, _ = backends
    _, server = await serve(nixl_config([p0], [d0]))
    async with (
        aiohttp.ClientSession() as client,
        client.post(server.make_url("/v1/completions"), json=body) as reply,
    ):
        assert_openai_error(reply.status, await reply.read(), 400)
    assert p0.seen == []
    await server.close()


async def test_lax_values_vllm_accepts_are_accepted(backends: list[FakeBackend]) -> None:
    p0, _, d0, _ = backends
    server = await serve_lmcache_pd(p0, d0)
    status, headers, _ = await post(
        server,
        "/v1/completions",
        {"model": "m", "prompt": "x", "stream": "true", "max_tokens": "3"},
    )
    assert status == 200
    assert headers["Content-Type"] == "text/event-stream"
    assert d0.seen[0]["max_tokens"] == 2
    await server.close()


async def test_a_clients_kv_transfer_params_never_reach_a_backend(
    backends: list[FakeBackend],
) -> None:
    """They would point an engine at any host to pull KV from."""
    p0, _, d0, _ = backends
    _, server = await serve(nixl_config([p0], [d0]))
    evil = {"do_remote_prefill": True, "remote_host": "203.0.113.9", "remote_port": 1}
    status, _, _ = await post(server, "/v1/completions", BODY | {"kv_transfer_params": evil})
    assert status == 200
    assert p0.seen[0]["kv_transfer_params"]["remote_host"] is None
    assert d0.seen[0]["kv_transfer_params"] == {
        "remote_engine_id": "p0",
        "remote_block_ids": [1, 2],
    }
    await server.close()


@pytest.mark.parametrize("request_id", ["a" * 200, "x y", "<script>", "é"])
async def test_an_odd_request_id_is_replaced_not_echoed(
    backends: list[FakeBackend], request_id: str
) -> None:
    p0, _, d0, _ = backends
    _, server = await serve(nixl_config([p0], [d0]))
    status, headers, _ = await post(server, "/v1/completions", BODY, {"X-Request-Id": request_id})
    assert status == 200
    assert headers["X-Request-Id"] != request_id
    assert len(headers["X-Request-Id"]) == 32
    assert p0.headers[0]["x-request-id"] == headers["X-Request-Id"]
    await server.close()


async def test_long_session_values_are_stored_as_short_keys(
    backends: list[FakeBackend],
) -> None:
    p0, p1, d0, d1 = backends
    proxy, server = await serve(nixl_config([p0, p1], [d0, d1], session_header="session-id"))
    pairs = set()
    for _ in range(3):
        _, headers, _ = await post(server, "/v1/completions", BODY, {"session-id": "s" * 4000})
        pairs.add((headers["X-Xpyd-Prefill"], headers["X-Xpyd-Decode"]))
    assert len(pairs) == 1  # still sticky
    (key,) = proxy.ctx.sessions._pairs
    assert len(key) < 64
    await server.close()
