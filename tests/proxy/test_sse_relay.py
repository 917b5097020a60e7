"""Every event the proxy relays from a decoder's stream is checked, whatever path the request
took: nixl's plain relay, lmcache-pd's converter, or lmcache-pd's decoder asked alone (a prompt
that fills the context). A decoder whose stream goes wrong before the client has a byte gets an
OpenAI error (502); one that goes wrong later ends the stream with an error event and [DONE];
no client ever gets an event that is not JSON."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import NamedTuple

import pytest

from generator.proxy.app import Proxy
from tests.proxy.fakes import FakeBackend, Misbehaviour
from tests.proxy.harness import (
    ProxyServer,
    assert_openai_error,
    backend_addresses,
    eventually,
    free_port,
    lmcache_config,
    nixl_config,
    nothing_held,
    post,
    serve,
)

pytestmark = pytest.mark.anyio

PROMPT = {"model": "m", "prompt": "x", "max_tokens": 3, "stream": True}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}
# What test_fuzz found (nixl): the decoder's `data: <html>not json</html>` reached the client.
FUZZ_BODY = {
    "prompt": "",
    "max_completion_tokens": 0,
    "stream": True,
    "model": None,
    "messages": [],
}


class Route(NamedTuple):
    protocol: str
    endpoint: str
    body: dict[str, object]
    max_model_len: int | None = None  # 4: the stand-in prompt (3 tokens) fills the context
    converted: bool = False  # lmcache-pd's converter: the client's stream starts at once


ROUTES = {
    "nixl completion": Route("nixl", "/v1/completions", PROMPT),
    "nixl chat": Route("nixl", "/v1/chat/completions", CHAT),
    "nixl fuzz body": Route("nixl", "/v1/completions", FUZZ_BODY),
    "lmcache-pd completion": Route("lmcache-pd", "/v1/completions", PROMPT, converted=True),
    "lmcache-pd chat": Route("lmcache-pd", "/v1/chat/completions", CHAT, converted=True),
    "lmcache-pd alone": Route("lmcache-pd", "/v1/completions", PROMPT, max_model_len=4),
    "lmcache-pd chat alone": Route("lmcache-pd", "/v1/chat/completions", CHAT, max_model_len=4),
}
GARBAGE: list[Misbehaviour] = ["garbage_sse", "garbage_late", "html_sse", "cut_sse"]


@asynccontextmanager
async def _served(
    route: Route, prefiller: FakeBackend, decoder: FakeBackend
) -> AsyncIterator[tuple[Proxy, ProxyServer]]:
    """The route's proxy, closed even when the test fails (a proxy left open fails a later
    test with its ResourceWarnings)."""
    decoder.max_model_len = route.max_model_len
    if route.protocol == "nixl":
        proxy, server = await serve(nixl_config([prefiller], [decoder]))
    else:
        port = free_port()
        prefiller.notify_to, prefiller.notify_ranks = f"tcp://127.0.0.1:{port}", 2
        proxy, server = await serve(lmcache_config(prefiller, decoder, port))
    try:
        yield proxy, server
    finally:
        await server.close()


def _events(raw: bytes) -> list[object]:
    """The stream's events, each parsed as JSON ([DONE] as a string)."""
    payloads = [event.removeprefix(b"data: ") for event in raw.split(b"\n\n") if event]
    return [p.decode() if p == b"[DONE]" else json.loads(p) for p in payloads]


async def test_the_fuzz_case_a_garbage_stream_is_a_502_not_relayed(
    backends: list[FakeBackend],
) -> None:
    """The example test_fuzz found: an empty prompt, max_completion_tokens 0 (a chat field,
    ignored on /v1/completions), a streamed answer whose only event is an HTML page."""
    p0, _, d0, _ = backends
    d0.misbehave = "garbage_sse"
    async with _served(ROUTES["nixl fuzz body"], p0, d0) as (proxy, server):
        status, _, raw = await post(server, "/v1/completions", FUZZ_BODY)
        error = assert_openai_error(status, raw, 502, *backend_addresses(p0, d0))
        assert error["type"] == "decode_failed"
        assert b"<html>" not in raw
        await eventually(lambda: nothing_held(proxy))


@pytest.mark.parametrize("how", GARBAGE)
@pytest.mark.parametrize("name", sorted(ROUTES))
async def test_no_route_relays_an_event_that_is_not_json(
    backends: list[FakeBackend], name: str, how: Misbehaviour
) -> None:
    route = ROUTES[name]
    p0, _, d0, _ = backends
    d0.misbehave = how
    async with _served(route, p0, d0) as (proxy, server):
        status, _, raw = await post(server, route.endpoint, route.body)
        addresses = backend_addresses(p0, d0)
        if not route.converted and how != "garbage_late":  # nothing sent yet: an error answer
            assert_openai_error(status, raw, 502, *addresses)
        else:
            assert status == 200, raw
            *relayed, error, done = _events(raw)
            assert relayed, "the first token's event, or the decoder's good one"
            assert isinstance(error, dict)
            assert error["error"]["type"] == "decode_failed"
            assert done == "[DONE]"
            assert not [address for address in addresses if address in raw.decode()]
        await eventually(lambda: nothing_held(proxy))


@pytest.mark.parametrize("name", sorted(ROUTES))
async def test_a_good_stream_passes_on_every_route(backends: list[FakeBackend], name: str) -> None:
    route = ROUTES[name]
    p0, _, d0, _ = backends
    async with _served(route, p0, d0) as (_, server):
        status, _, raw = await post(server, route.endpoint, route.body)
    assert status == 200, raw
    *events, done = _events(raw)
    assert done == "[DONE]"
    assert events
    assert all(isinstance(event, dict) and "error" not in event for event in events)
