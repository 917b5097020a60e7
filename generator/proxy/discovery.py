"""Backends found by name: a backend whose host name resolves to several addresses is one
backend per address, looked up again every ``discover_every_s``.

What it is for: the Kubernetes export gives each engine a headless Service over its own
StatefulSet, so ``kubectl scale statefulset decode-0 --replicas 3`` makes the name ``decode-0``
resolve to three pod addresses; the proxy then routes to all three without a restart. A name
with one address (compose's service names, the process runtime's loopback, one replica) stays
the backend as written, so nothing changes where nothing was scaled.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

from generator.proxy.config import BackendConfig, DecoderConfig

__all__ = ["MAX_ADDRESSES", "Resolve", "addresses_of", "discovered", "host_of"]

C = TypeVar("C", bound=BackendConfig)
# A name's answer is read like input: past this many addresses the rest are not routed to.
MAX_ADDRESSES = 256
_LOOKUP_TIMEOUT_S = 5.0

# (host, port) -> its addresses, sorted; None when the lookup failed (keep what is known).
Resolve = Callable[[str, int], Awaitable[list[str] | None]]


async def addresses_of(host: str, port: int) -> list[str] | None:
    """The system resolver's addresses for ``host`` (cluster DNS in a pod), bounded in time
    and count."""
    loop = asyncio.get_running_loop()
    try:
        answers = await asyncio.wait_for(
            loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), _LOOKUP_TIMEOUT_S
        )
    except (OSError, TimeoutError, UnicodeError):
        return None
    found = {str(answer[4][0]) for answer in answers}
    return sorted(found, key=_address_order)[:MAX_ADDRESSES]


def host_of(config: BackendConfig) -> tuple[str, int] | None:
    """The name to look up and its port; None for an address written as such (nothing to
    find)."""
    parts = urlsplit(config.url)
    if not parts.hostname:
        return None
    try:
        ipaddress.ip_address(parts.hostname)
    except ValueError:
        return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    return None


async def discovered(configs: Sequence[C], resolve: Resolve) -> list[C]:
    """Each config as written, or one per address of its name where it has several; a
    lookup that fails keeps the config as written (aiohttp resolves it on each connection)."""
    hosts = [host_of(config) for config in configs]
    lookups = await asyncio.gather(*(_lookup(host, resolve) for host in hosts))
    found: list[C] = []
    for config, addresses in zip(configs, lookups, strict=True):
        found += _per_address(config, addresses) if addresses and len(addresses) > 1 else [config]
    return found


async def _lookup(host: tuple[str, int] | None, resolve: Resolve) -> list[str] | None:
    return None if host is None else await resolve(*host)


def _per_address(config: C, addresses: Sequence[str]) -> list[C]:
    parts = urlsplit(config.url)
    name = parts.hostname
    copies: list[C] = []
    for address in addresses:
        host = f"[{address}]" if ":" in address else address
        netloc = f"{host}:{parts.port}" if parts.port else host
        update: dict[str, object] = {
            "name": f"{config.name}@{address}",
            "url": urlunsplit(parts._replace(netloc=netloc)),
        }
        # lmcache-pd: the prefiller pushes KV to the decoder's receiver at kv_host, the same
        # pod as its API when both name the Service.
        if isinstance(config, DecoderConfig) and config.kv_host == name:
            update["kv_host"] = address
        copies.append(config.model_copy(update=update))
    return copies


def _address_order(address: str) -> tuple[int, bytes]:
    parsed = ipaddress.ip_address(address.split("%", 1)[0])
    return parsed.version, parsed.packed
