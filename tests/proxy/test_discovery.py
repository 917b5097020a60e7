"""Backends found by name (generator/proxy/discovery.py): a name with several addresses is a
backend per address, looked up again as the proxy runs, so a role scaled up or down (a
headless Service over a StatefulSet, `kubectl scale`) is routed to without a restart.

The lookups here use the system's resolver where a test needs a real answer; where a name must
have several addresses, a stand-in resolver gives them (no cluster DNS runs here: editing this
machine's /etc/hosts is not the tests' to do), and the stand-in engines listen at exactly those
addresses, on one port, as a StatefulSet's pods do."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from generator.proxy.app import Proxy
from generator.proxy.config import BackendConfig, DecoderConfig, ProxyConfig
from generator.proxy.discovery import addresses_of, discovered, host_of
from tests.proxy.fakes import FakeBackend
from tests.proxy.harness import ProxyServer, free_port, post

pytestmark = pytest.mark.anyio
_GAUGES = ("xpyd_proxy_backend_healthy{", "xpyd_proxy_outstanding{")


class Names:
    """A stand-in for cluster DNS: what each name resolves to now."""

    def __init__(self, **names: list[str]) -> None:
        self.names = names
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str] | None:
        self.asked.append(host)
        return self.names.get(host)


async def test_the_system_resolver_answers_and_a_name_nobody_has_is_no_answer() -> None:
    assert "127.0.0.1" in (await addresses_of("localhost", 80) or [])
    assert await addresses_of("no-such-engine.invalid", 80) is None


def test_an_address_written_as_such_is_not_looked_up() -> None:
    assert host_of(BackendConfig(name="p", url="http://10.0.0.5:8100")) is None
    assert host_of(BackendConfig(name="p", url="http://[fd00::5]:8100")) is None
    assert host_of(BackendConfig(name="p", url="http://prefill-0:8100")) == ("prefill-0", 8100)
    assert host_of(BackendConfig(name="p", url="https://prefill-0")) == ("prefill-0", 443)


async def test_several_addresses_make_a_backend_each_and_the_kv_receiver_follows() -> None:
    decoder = DecoderConfig(
        name="decode-0",
        url="http://decode-0:7200",
        kv_host="decode-0",
        init_ports=[7300],
        alloc_ports=[7400],
    )
    names = Names(**{"decode-0": ["10.0.0.7", "fd00::7"]})
    found = await discovered([decoder], names)
    assert [(c.name, c.url, c.kv_host) for c in found] == [
        ("decode-0@10.0.0.7", "http://10.0.0.7:7200", "10.0.0.7"),
        ("decode-0@fd00::7", "http://[fd00::7]:7200", "fd00::7"),
    ]
    assert all(c.init_ports == [7300] and c.alloc_ports == [7400] for c in found)


async def test_one_address_or_a_failed_lookup_keeps_the_backend_as_written() -> None:
    written = [
        BackendConfig(name="prefill-0", url="http://prefill-0:8100"),
        BackendConfig(name="prefill-1", url="http://prefill-1:8100"),
        BackendConfig(name="prefill-2", url="http://127.0.0.1:8102"),
    ]
    names = Names(**{"prefill-0": ["10.0.0.9"]})  # prefill-1: the lookup failed
    assert await discovered(written, names) == written
    assert names.asked == ["prefill-0", "prefill-1"]  # not the address


@pytest.fixture
async def replicas() -> AsyncIterator[list[FakeBackend]]:
    """Three stand-in decoders on one port, at 127.0.0.1, .2 and .3 (a StatefulSet's pods)."""
    port = free_port()
    started = [
        await FakeBackend(f"d{i}", host=f"127.0.0.{i}", port=port).start() for i in (1, 2, 3)
    ]
    yield started
    for backend in started:
        await backend.close()


async def test_a_scaled_role_is_routed_to_without_a_restart(
    backends: list[FakeBackend], replicas: list[FakeBackend]
) -> None:
    port = replicas[0].port
    names = Names(localhost=["127.0.0.1"])  # one replica: the backend as written
    config = ProxyConfig.model_validate(
        {
            "protocol": "nixl",
            "prefill": [{"name": "prefill-0", "url": backends[0].url}],
            "decode": [{"name": "decode-0", "url": f"http://localhost:{port}"}],
            "timeouts": {"health_interval_s": 60},
            "discover_every_s": 60,  # the test looks up itself, with discover()
        }
    )
    proxy = Proxy(config, resolve=names)
    server = ProxyServer(proxy.runner())
    await server.start()
    try:
        await proxy.health_known.wait()
        assert [b.name for b in proxy.decode.backends] == ["decode-0"]

        names.names["localhost"] = ["127.0.0.3", "127.0.0.2"]  # scaled to two, then three
        await proxy.discover()
        await proxy.check_health()
        names.names["localhost"] = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
        await proxy.discover()
        # A pod just found waits for its first health check: none is routed to before.
        joined = proxy.decode.by_name("decode-0@127.0.0.1")
        assert joined is not None
        assert not joined.healthy
        await proxy.check_health()
        assert [b.name for b in proxy.decode.available()] == [  # in the answer's order
            "decode-0@127.0.0.1",
            "decode-0@127.0.0.2",
            "decode-0@127.0.0.3",
        ]
        body = {"model": "m", "prompt": "hi", "max_tokens": 3}
        for _ in range(6):
            status, _, _ = await post(server, "/v1/completions", body)
            assert status == 200
        assert [len(replica.seen) for replica in replicas] == [2, 2, 2]

        names.names["localhost"] = ["127.0.0.1"]  # scaled back to one
        await proxy.discover()
        await proxy.check_health()
        assert [b.name for b in proxy.decode.available()] == ["decode-0"]
        status, _, _ = await post(server, "/v1/completions", body)
        assert status == 200
        assert len(replicas[0].seen) == 3
        metrics = (await _get(server, "/metrics")).decode().splitlines()
        gauges = [line for line in metrics if line.startswith(_GAUGES)]
        assert any('backend="decode-0"' in line for line in gauges)
        # A gone pod's gauges leave with it (its request counter stays: a total).
        assert not any("decode-0@" in line for line in gauges), gauges
        assert any('backend="decode-0@127.0.0.2"' in line for line in metrics)
    finally:
        await server.close()


async def _get(server: ProxyServer, path: str) -> bytes:
    async with aiohttp.ClientSession() as client, client.get(server.make_url(path)) as reply:
        return await reply.read()
