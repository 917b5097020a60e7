"""Helpers of the proxy's HTTP tests: a proxy served in-process in front of stand-in backends
(tests/proxy/fakes.py), and a client."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from generator.proxy.app import Proxy
from generator.proxy.config import ProxyConfig
from generator.proxy.routing import Backend
from tests.proxy.fakes import FakeBackend


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ProxyServer:
    """The proxy served the way ``python -m generator.proxy`` serves it (Proxy.runner), on a
    free loopback port; the part of aiohttp's TestServer interface the tests use."""

    def __init__(self, runner: web.AppRunner) -> None:
        self.runner, self.host, self.port = runner, "127.0.0.1", 0

    async def start(self) -> None:
        await self.runner.setup()
        await web.TCPSite(self.runner, self.host, 0).start()
        self.port = int(self.runner.addresses[0][1])

    def make_url(self, path: str) -> URL:
        return URL(f"http://{self.host}:{self.port}{path}")

    async def close(self) -> None:
        await self.runner.cleanup()


async def serve(config: dict[str, Any]) -> tuple[Proxy, ProxyServer]:
    proxy = Proxy(ProxyConfig.model_validate(config))
    server = ProxyServer(proxy.runner())
    await server.start()
    await proxy.health_known.wait()
    return proxy, server


def nixl_config(
    prefill: list[FakeBackend], decode: list[FakeBackend], **extra: Any
) -> dict[str, Any]:
    return {
        "protocol": "nixl",
        "prefill": [{"name": b.name, "url": b.url} for b in prefill],
        "decode": [{"name": b.name, "url": b.url} for b in decode],
        "timeouts": {"health_interval_s": 60},
        **extra,
    }


async def post(
    server: ProxyServer, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[int, CIMultiDict[str], bytes]:
    """Status, headers (case-insensitive) and body of one request to the proxy."""
    async with (
        aiohttp.ClientSession() as client,
        client.post(server.make_url(path), json=body, headers=headers or {}) as reply,
    ):
        return reply.status, CIMultiDict(reply.headers), await reply.read()


def lmcache_config(
    prefill: FakeBackend, decode: FakeBackend, notify_port: int, **timeouts: float
) -> dict[str, Any]:
    return {
        "protocol": "lmcache-pd",
        "prefill": [{"name": prefill.name, "url": prefill.url, "tp": 2}],
        "decode": [
            {
                "name": decode.name,
                "url": decode.url,
                "tp": 2,
                "kv_host": "decode-host",
                "init_ports": [7300, 7301],
                "alloc_ports": [7400, 7401],
            }
        ],
        "notify": {"bind_host": "127.0.0.1", "port": notify_port},
        "timeouts": {"health_interval_s": 60, **timeouts},
    }


async def serve_lmcache_pd(prefiller: FakeBackend, decoder: FakeBackend) -> ProxyServer:
    """A proxy in lmcache-pd mode whose stand-in prefiller notifies for both TP ranks."""
    port = free_port()
    prefiller.notify_to, prefiller.notify_ranks = f"tcp://127.0.0.1:{port}", 2
    _, server = await serve(lmcache_config(prefiller, decoder, port))
    return server


async def eventually(check: Callable[[], bool], within_s: float = 2.0) -> None:
    """Waits until ``check()`` holds; fails the test if it never does within ``within_s``."""
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"still false after {within_s} s: {check}")
        await asyncio.sleep(0.02)


def nothing_held(proxy: Proxy) -> bool:
    """No backend counter, admission slot or body byte is held by a finished request."""
    backends: list[Backend[Any]] = [*proxy.prefill.backends, *proxy.decode.backends]
    return (
        all(b.outstanding == 0 for b in backends)
        and proxy.admission.in_flight == 0
        and proxy.ctx.budget.held == 0
    )


def backend_addresses(*backends: FakeBackend) -> list[str]:
    """How a backend's address could appear in text: URL, host:port, Python's tuple."""
    found = []
    for backend in backends:
        assert backend.server is not None
        host, port = backend.server.host, backend.server.port
        found += [backend.url, f"{host}:{port}", f"('{host}', {port})"]
    return found


def assert_openai_error(status: int, raw: bytes, expected: int, *addresses: str) -> dict[str, Any]:
    """``raw`` is OpenAI's error shape for ``expected`` and names none of ``addresses``."""
    assert status == expected, raw
    error = json.loads(raw)["error"]
    assert isinstance(error["message"], str)
    assert isinstance(error["type"], str)
    assert error["code"] == expected
    text = raw.decode()
    leaked = [address for address in addresses if address in text]
    assert not leaked, f"{leaked} in {text}"
    return dict(error)
