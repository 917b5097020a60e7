"""Issue 33, class 7: a body nested deeper than the proxy can forward is one 400, whatever the
policy, before any policy walks it (prefix_aware's prompt text once recursed into a role
nested ~990 deep: a RecursionError and a 500). Bodies within the bound are answered without a
500 by every policy. Served as in production, in front of stand-in backends."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from generator.proxy.app import Proxy
from generator.proxy.policies import POLICIES
from generator.proxy.validation import MAX_BODY_DEPTH, nesting_depth
from tests.proxy.fakes import FakeBackend
from tests.proxy.harness import ProxyServer, assert_openai_error, nixl_config, serve

ORJSON_READS = 1024  # orjson refuses to parse deeper: the proxy never sees such a body
PYTHON_DEFAULT_RECURSION_LIMIT = 1000


def nested(depth: int, leaf: str = '"x"') -> str:
    """JSON text of ``depth`` lists around ``leaf`` (built as text: json.dumps recurses)."""
    return "[" * depth + leaf + "]" * depth


# Where a client may nest, and the depth its own nesting sits at in the body (the body's
# object is 1): e.g. a role is in the messages list (2) in a message (3).
PLACES: dict[str, tuple[str, bool, int]] = {
    "role": ('{{"messages": [{{"role": {n}, "content": "x"}}]}}', True, 3),
    "content": ('{{"messages": [{{"role": "user", "content": {n}}}]}}', True, 3),
    "part": ('{{"messages": [{{"role": "user", "content": [{{"text": {n}}}]}}]}}', True, 5),
    "message": ('{{"messages": [{n}]}}', True, 2),
    "prompt": ('{{"prompt": {n}}}', False, 1),
    "field": ('{{"prompt": "x", "extra": {{"a": {n}}}}}', False, 2),
}


def body_of(place: str, depth: int) -> tuple[bytes, bool, int]:
    """The raw body, whether it is a chat request, and how deep it nests in all."""
    template, chat, above = PLACES[place]
    return template.format(n=nested(depth)).encode(), chat, above + depth


@dataclass
class Rig:
    loop: asyncio.AbstractEventLoop
    servers: dict[str, tuple[Proxy, ProxyServer]]
    backends: tuple[FakeBackend, FakeBackend]
    errors: list[logging.LogRecord]


class _Errors(logging.Handler):
    def __init__(self, records: list[logging.LogRecord]) -> None:
        super().__init__(logging.ERROR)
        self.records = records

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


async def _start() -> tuple[dict[str, tuple[Proxy, ProxyServer]], tuple[FakeBackend, FakeBackend]]:
    prefiller, decoder = await FakeBackend("p0").start(), await FakeBackend("d0").start()
    servers = {
        name: await serve(
            nixl_config([prefiller], [decoder], policy={"prefill": name, "decode": name})
        )
        for name in POLICIES
    }
    return servers, (prefiller, decoder)


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    loop = asyncio.new_event_loop()
    errors: list[logging.LogRecord] = []
    handler = _Errors(errors)
    logging.getLogger().addHandler(handler)
    servers, backends = loop.run_until_complete(_start())
    yield Rig(loop, servers, backends, errors)
    logging.getLogger().removeHandler(handler)
    for _, server in servers.values():
        loop.run_until_complete(server.close())
    for backend in backends:
        loop.run_until_complete(backend.close())
    loop.close()


@contextlib.contextmanager
def python_default_recursion_limit() -> Iterator[None]:
    """The proxy runs under Python's default recursion limit; hypothesis raises it while a
    test runs, which would hide a recursive walk that gives out in production."""
    raised = sys.getrecursionlimit()
    sys.setrecursionlimit(PYTHON_DEFAULT_RECURSION_LIMIT)
    try:
        yield
    finally:
        sys.setrecursionlimit(raised)


async def _post(server: ProxyServer, chat: bool, body: bytes) -> tuple[int, bytes]:
    path = "/v1/chat/completions" if chat else "/v1/completions"
    async with (
        aiohttp.ClientSession() as client,
        client.post(
            server.make_url(path), data=body, headers={"Content-Type": "application/json"}
        ) as reply,
    ):
        return reply.status, await reply.read()


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    policy=st.sampled_from(sorted(POLICIES)),
    place=st.sampled_from(sorted(PLACES)),
    depth=st.integers(1, ORJSON_READS - 8)
    | st.integers(MAX_BODY_DEPTH - 8, MAX_BODY_DEPTH + 2)
    | st.integers(ORJSON_READS - 40, ORJSON_READS - 8),
)
# The 2 KB body (a role ~990 deep; how deep Python's recursion gives out depends on
# the stack below the handler), and as deep as orjson parses, in a role and in a part's text.
@example(policy="prefix_aware", place="role", depth=990)
@example(policy="prefix_aware", place="role", depth=ORJSON_READS - 6)
@example(policy="prefix_aware", place="part", depth=ORJSON_READS - 8)
def test_a_body_too_deep_to_forward_is_one_400_for_every_policy(
    rig: Rig, policy: str, place: str, depth: int
) -> None:
    body, chat, total = body_of(place, depth)
    prefiller, _ = rig.backends
    seen = len(prefiller.seen)
    with python_default_recursion_limit():
        status, raw = rig.loop.run_until_complete(_post(rig.servers[policy][1], chat, body))
    assert rig.errors == [], [record.getMessage() for record in rig.errors]
    if total > MAX_BODY_DEPTH:
        error = assert_openai_error(status, raw, 400)
        assert "nests" in error["message"]
        assert len(prefiller.seen) == seen  # refused before any engine heard of it
    else:
        assert status != 500, raw


@pytest.mark.parametrize("place", ["role", "part", "content", "prompt"])
def test_a_policy_reads_a_deep_prompt_without_recursing(place: str) -> None:
    """What prefix_aware hashes of a body the proxy accepts never recurses into it: a role or
    a part that is no text is no text (vLLM refuses it anyway)."""
    from generator.proxy.fastjson import loads
    from generator.proxy.prompt import RequestView

    body, chat, _ = body_of(place, ORJSON_READS - 8)
    view = RequestView.of(loads(body), chat=chat)
    with python_default_recursion_limit():
        hashes = view.block_hashes(1, 1, 64)
    assert all(isinstance(block, int) for block in hashes)


def _reference_depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_reference_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_reference_depth(v) for v in value), default=0)
    return 0


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=30,
)


@given(JSON)
def test_the_depth_is_counted_without_recursion_as_json_nests(value: Any) -> None:
    assert nesting_depth(value) == _reference_depth(value)
    text = json.dumps(value)
    assert nesting_depth(json.loads(text)) == _reference_depth(value)


def test_the_bound_is_what_the_proxy_can_forward() -> None:
    """A body at the bound is serialized for the engines; one level more could not be."""
    from generator.proxy.fastjson import dumps, loads

    deepest = loads('{"a": ' + nested(MAX_BODY_DEPTH - 1, "1") + "}")
    assert nesting_depth(deepest) == MAX_BODY_DEPTH
    dumps(deepest)
    with pytest.raises((TypeError, ValueError, RecursionError)):
        dumps(loads('{"a": ' + nested(MAX_BODY_DEPTH, "1") + "}"))
