"""Fixtures of the proxy's tests: asyncio under anyio, and four stand-in backends."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator

import pytest

from tests.proxy.fakes import FakeBackend


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def backends() -> AsyncIterator[list[FakeBackend]]:
    started = [await FakeBackend(name).start() for name in ("p0", "p1", "d0", "d1")]
    yield started
    for backend in started:
        await backend.close()


@pytest.fixture
def dead_url() -> Iterator[str]:
    """A loopback URL that refuses connections for the whole test: its port stays bound but
    never listens, so no server started meanwhile (this test's own proxy, or another worker's)
    can take it, as a port found free and then released could be (CI 2026-12-06)."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{held.getsockname()[1]}"
