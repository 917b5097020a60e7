"""Fixtures of the proxy's tests: asyncio under anyio, and four stand-in backends."""

from __future__ import annotations

from collections.abc import AsyncIterator

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
