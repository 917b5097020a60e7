"""The proxy's HTTP behaviour against in-process stand-in backends (tests/proxy/fakes.py)."""

from __future__ import annotations

import json
import re
import time

import aiohttp
import pytest

from tests.proxy.fakes import FakeBackend
from tests.proxy.harness import (
    free_port,
    lmcache_config,
    nixl_config,
    post,
    serve,
    serve_lmcache_pd,
)

pytestmark = pytest.mark.anyio


async def test_nixl_protocol_bodies_and_stamps(backends: list[FakeBackend]) -> None:
    p0, _, d0, _ = backends
    _, server = await serve(nixl_config([p0], [d0]))
    body = {
        "model": "m",
        "prompt": "hi",
        "max_tokens": 9,
        "min_tokens": 2,
    }
    status, headers, raw = await post(server, "/v1/completions", body, {"X-Request-Id": "rid-1"})
    assert status == 200
    assert json.loads(raw)["id"] == "cmpl-d0"
    (sent_prefill,) = p0.seen
    assert sent_prefill["max_tokens"] == 1
    assert sent_prefill["stream"] is False
    assert "min_tokens" not in sent_prefill
    assert "stream_options" not in sent_prefill
    assert sent_prefill["kv_transfer_params"]["do_remote_decode"] is True
    assert sent_prefill["kv_transfer_params"]["do_remote_prefill"] is False
    (sent_decode,) = d0.seen
    assert sent_decode["max_tokens"] == 9  # the client's request, not the prefill's 1
    assert sent_decode["kv_transfer_params"] == {
        "remote_engine_id": "p0",
        "remote_block_ids": [1, 2],
    }
    assert (headers["X-Request-Id"], headers["X-Xpyd-Prefill"], headers["X-Xpyd-Decode"]) == (
        "rid-1",
        "p0",
        "d0",
    )
    # The client's id is for its logs: both engines get the proxy's own, the same one.
    engine_id = p0.headers[0]["x-request-id"]
    assert re.fullmatch("[0-9a-f]{32}", engine_id)
    assert d0.headers[0]["x-request-id"] == engine_id
    await server.close()


async def test_chat_stays_chat_and_sets_max_completion_tokens(backends: list[FakeBackend]) -> None:
    p0, _, d0, _ = backends
    _, server = await serve(nixl_config([p0], [d0]))
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "x"}],
        "max_completion_tokens": 50,
    }
    status, _, _ = await post(server, "/v1/chat/completions", body)
    assert status == 200
    assert p0.seen[0]["max_completion_tokens"] == 1
    assert d0.seen[0]["max_completion_tokens"] == 50
    assert "messages" in d0.seen[0]
    await server.close()


async def test_streams_are_sse_and_a_broken_decoder_ends_with_an_error_event(
    backends: list[FakeBackend],
) -> None:
    p0, _, d0, d1 = backends
    d1.break_stream_after = 1
    _, server = await serve(nixl_config([p0], [d0, d1]))
    body = {"model": "m", "prompt": "hi", "stream": True, "stream_options": {"include_usage": True}}
    status, headers, raw = await post(server, "/v1/completions", body)
    assert status == 200
    assert headers["Content-Type"] == "text/event-stream"
    assert raw.decode().endswith("data: [DONE]\n\n")
    assert raw.count(b"data: ") == 4
    assert d0.seen[0]["stream_options"] == {"include_usage": True}
    status, _, raw = await post(server, "/v1/completions", body)  # round robin: d1 now
    events = [line for line in raw.decode().split("\n\n") if line]
    assert events[0].startswith('data: {"choices"')
    assert json.loads(events[-2][6:])["error"]["type"] == "decode_failed"
    assert events[-1] == "data: [DONE]"
    await server.close()


async def test_unreachable_prefiller_is_ejected_and_the_request_retried(
    backends: list[FakeBackend],
) -> None:
    p0, p1, d0, _ = backends
    proxy, server = await serve(nixl_config([p0, p1], [d0]))
    await p0.close()  # dies after the proxy's health check saw it alive: only a request finds out
    for _ in range(3):
        status, headers, _ = await post(server, "/v1/completions", {"model": "m", "prompt": "x"})
        assert status == 200
        assert headers["X-Xpyd-Prefill"] == "p1"
    dead = proxy.prefill.by_name("p0")
    assert dead is not None
    assert dead.failures == 1  # refused once, retried on p1, then kept out of rotation
    await server.close()


async def test_authorization_is_forwarded_never_bearer_none(
    backends: list[FakeBackend], monkeypatch: pytest.MonkeyPatch
) -> None:
    p0, _, d0, _ = backends
    _, server = await serve(nixl_config([p0], [d0]))
    await post(server, "/v1/completions", {"model": "m", "prompt": "x"})
    await post(
        server, "/v1/completions", {"model": "m", "prompt": "x"}, {"Authorization": "Bearer client"}
    )
    await server.close()
    monkeypatch.setenv("BACKEND_KEY", "configured")
    _, server = await serve(nixl_config([p0], [d0], api_key_env="BACKEND_KEY"))
    await post(server, "/v1/completions", {"model": "m", "prompt": "x"})
    assert [h.get("authorization") for h in p0.headers] == [
        None,
        "Bearer client",
        "Bearer configured",
    ]
    assert [h.get("authorization") for h in d0.headers] == [
        None,
        "Bearer client",
        "Bearer configured",
    ]
    await server.close()


async def test_session_header_keeps_the_pair(backends: list[FakeBackend]) -> None:
    p0, p1, d0, d1 = backends
    _, server = await serve(nixl_config([p0, p1], [d0, d1], session_header="session-id"))
    pairs = set()
    for _ in range(4):
        _, headers, _ = await post(
            server, "/v1/completions", {"model": "m", "prompt": "x"}, {"session-id": "s1"}
        )
        pairs.add((headers["X-Xpyd-Prefill"], headers["X-Xpyd-Decode"]))
    assert len(pairs) == 1
    others = set()
    for _ in range(4):
        _, headers, _ = await post(server, "/v1/completions", {"model": "m", "prompt": "x"})
        others.add(headers["X-Xpyd-Prefill"])
    assert others == {"p0", "p1"}
    await server.close()


async def test_ready_health_and_metrics(backends: list[FakeBackend], dead_url: str) -> None:
    p0, _, _, _ = backends
    config = nixl_config([p0], [])
    config["decode"] = [{"name": "dead", "url": dead_url}]
    proxy, server = await serve(config)
    await proxy.check_health()
    async with aiohttp.ClientSession() as client:
        assert (await client.get(server.make_url("/health"))).status == 200
        ready = await client.get(server.make_url("/ready"))
        assert ready.status == 503
        assert await ready.json() == {"ready": False, "prefill_available": 1, "decode_available": 0}
        status, _, raw = await post(server, "/v1/completions", {"model": "m", "prompt": "x"})
        assert status == 503
        assert json.loads(raw)["error"]["type"] == "no_backend"
        text = await (await client.get(server.make_url("/metrics"))).text()
    assert 'xpyd_proxy_backend_healthy{backend="dead",role="decode"} 0.0' in text
    assert 'xpyd_proxy_requests_total{endpoint="completions",status="503"} 1.0' in text
    await server.close()


async def test_lmcache_pd_waits_for_every_rank_notice(backends: list[FakeBackend]) -> None:
    p0, _, d0, _ = backends
    port = free_port()
    p0.notify_to, p0.notify_ranks = f"tcp://127.0.0.1:{port}", 2
    proxy, server = await serve(lmcache_config(p0, d0, port))
    status, headers, _ = await post(
        server,
        "/v1/completions",
        {"model": "m", "prompt": "x", "max_tokens": 5},
        {"X-Request-Id": "r-9"},
    )
    assert status == 200, headers
    spec = p0.seen[0]["kv_transfer_params"]
    # The KV's id is the proxy's own: a client's X-Request-Id is not unique across clients.
    kv_id = spec["disagg_spec"]["req_id"]
    assert kv_id != "r-9"
    assert p0.headers[0]["x-request-id"] == d0.headers[0]["x-request-id"] == kv_id
    assert headers["X-Request-Id"] == "r-9"  # the client's id stays the client's
    assert spec == {
        "ret_first_tok": True,
        "disagg_spec": {
            "req_id": kv_id,
            "receiver_host": "decode-host",
            "receiver_init_port": [7300, 7301],
            "receiver_alloc_port": [7400, 7401],
        },
    }
    # The decoder continues from the prefiller's first token (tokens in: prompt ids + first).
    assert d0.seen[0] == {"model": "m", "prompt": [1, 2, 3, 7], "max_tokens": 4}
    assert proxy.notices is not None
    assert proxy.notices.received == 2
    assert proxy.notices.in_flight == 0
    await server.close()


async def test_lost_notice_fails_with_504_within_the_deadline(backends: list[FakeBackend]) -> None:
    p0, _, d0, _ = backends
    port = free_port()
    p0.notify_to, p0.notify_ranks = f"tcp://127.0.0.1:{port}", 1  # one of two ranks is lost
    proxy, server = await serve(lmcache_config(p0, d0, port, kv_notice_s=0.5))
    started = time.monotonic()
    status, _, raw = await post(server, "/v1/completions", {"model": "m", "prompt": "x"})
    assert status == 504
    assert time.monotonic() - started < 3
    assert json.loads(raw)["error"]["type"] == "kv_transfer_timeout"
    assert "1/2 KV-sent notices" in json.loads(raw)["error"]["message"]
    assert d0.seen == []  # never decoded without the KV
    assert proxy.notices is not None
    assert proxy.notices.in_flight == 0  # no leak
    await server.close()


async def test_lmcache_pd_answers_carry_the_first_token_and_full_usage(
    backends: list[FakeBackend],
) -> None:
    p0, _, d0, _ = backends
    server = await serve_lmcache_pd(p0, d0)
    status, _, raw = await post(
        server, "/v1/completions", {"model": "m", "prompt": "x", "max_tokens": 4}
    )
    answer = json.loads(raw)
    assert status == 200
    assert (
        answer["choices"][0]["text"] == "Fd0"
    )  # first token from the prefiller, then the decoder's
    assert answer["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    chat = {
        "model": "m",
        "messages": [{"role": "user", "content": "x"}],
        "max_completion_tokens": 4,
        "stream": True,
    }
    status, headers, raw = await post(server, "/v1/chat/completions", chat)
    assert status == 200
    assert headers["Content-Type"] == "text/event-stream"
    events = [json.loads(e[6:]) for e in raw.decode().split("\n\n") if e.startswith("data: {")]
    assert raw.decode().endswith("data: [DONE]\n\n")
    assert {e["object"] for e in events} == {"chat.completion.chunk"}
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": "F"}
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in events) == "F012"
    assert "messages" not in d0.seen[-1]
    assert d0.seen[-1]["prompt"] == [1, 2, 3, 7]
    assert d0.seen[-1]["max_tokens"] == 3
    await server.close()


async def test_lmcache_pd_one_token_is_answered_by_the_prefill_alone(
    backends: list[FakeBackend],
) -> None:
    p0, _, d0, _ = backends
    server = await serve_lmcache_pd(p0, d0)
    status, _, raw = await post(
        server, "/v1/completions", {"model": "m", "prompt": "x", "max_tokens": 1}
    )
    assert status == 200
    assert json.loads(raw)["choices"][0]["text"] == "F"
    # The decoder still reads the KV it was sent (its buffer would fill up), one token, unused;
    # the seed sent it max_tokens=0 here.
    assert d0.seen == [{"model": "m", "prompt": [1, 2, 3, 7], "max_tokens": 1, "stream": False}]
    await server.close()


async def test_a_decoder_killed_while_requests_flow_is_left_out(
    backends: list[FakeBackend],
) -> None:
    p0, _, d0, d1 = backends
    proxy, server = await serve(nixl_config([p0], [d0, d1]))
    body = {"model": "m", "prompt": "x", "stream": True}
    assert {
        (await post(server, "/v1/completions", body))[1]["X-Xpyd-Decode"] for _ in range(4)
    } == {"d0", "d1"}
    await d1.close()  # killed: in flight or next, it refuses connections
    results = [await post(server, "/v1/completions", body) for _ in range(6)]
    statuses = [status for status, _, _ in results]
    assert statuses.count(502) <= 1  # at most the one request that found it dead first
    assert [h["X-Xpyd-Decode"] for s, h, _ in results if s == 200] == ["d0"] * statuses.count(200)
    dead = proxy.decode.by_name("d1")
    assert dead is not None
    assert not dead.available(time.monotonic())
    await server.close()
