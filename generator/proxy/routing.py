"""Choosing a prefiller and a decoder: pure state, no I/O (the app feeds it events).

- A policy per side (policies.py), asked with a view of the parsed request.
- Session stickiness: the same session header value gets the same pair while both stay
  healthy; sessions live in a bounded LRU (the seed's map grew forever).
- Ejection: a backend that refuses connections, or fails ``health_failures`` health checks in
  a row, sits out until a health check passes again; a passive ejection also expires after
  ``eject_s``; a stalled one (health.py) sits out for the stall's length. A backend that
  fails its checks is also *lost*: the requests waiting on it are given up (failover.py), so
  that none waits on a dead, stopped or wedged engine past that bound.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from generator.proxy.config import BackendConfig
from generator.proxy.policies import NO_VIEW, Policy, RequestView

__all__ = ["Backend", "NoBackend", "Pool", "SessionTable"]

C = TypeVar("C", bound=BackendConfig)


class NoBackend(Exception):
    """No healthy backend of a kind is left."""


@dataclass
class Backend(Generic[C]):
    config: C
    outstanding: int = 0
    healthy: bool = True
    ejected_until: float = 0.0  # monotonic time; 0 = not ejected
    failures: int = 0
    checks_failed: int = 0  # failed health checks in a row
    # The request tasks waiting on this backend now (failover.py gives them up if it is lost).
    # Each with what says it still depends on this backend.
    waiting: dict[asyncio.Task[object], Callable[[], bool]] = field(default_factory=dict)
    # vLLM's max_model_len from its /v1/models (None until read): the proxy checks token
    # counts against it before a prefill pushes KV that the decoder would then refuse.
    max_model_len: int | None = None
    # Progress (health.py): the engine's token counters at the last look, since when they
    # stand still, and until when a stall keeps it out (a passing /health does not end that).
    tokens: float | None = None
    tokens_since: float = 0.0
    stalled_until: float = 0.0

    @property
    def name(self) -> str:
        return self.config.name

    def available(self, now: float) -> bool:
        return self.healthy and now >= self.ejected_until and now >= self.stalled_until


@dataclass
class Pool(Generic[C]):
    """The backends of one kind (all prefillers, or all decoders) and their selection policy."""

    backends: list[Backend[C]]
    policy: Policy
    eject_s: float
    clock: Callable[[], float] = time.monotonic

    @classmethod
    def of(cls, configs: Iterable[C], policy: Policy, eject_s: float) -> Pool[C]:
        return cls([Backend(config) for config in configs], policy, eject_s)

    def sync(self, configs: Iterable[C]) -> tuple[list[str], list[str]]:
        """The pool becomes ``configs`` (discovery.py): a backend at a URL it had keeps its
        state (its name may change); a new one is out of rotation until a health check passes
        (a pod scaled up is not ready at once); one gone leaves, and requests on it finish
        there. Returns the names that joined and those that left."""
        by_url = {backend.config.url: backend for backend in self.backends}
        kept: list[Backend[C]] = []
        joined: list[str] = []
        for config in configs:
            backend = by_url.pop(config.url, None)
            if backend is None:
                backend = Backend(config, healthy=False)
                joined.append(config.name)
            else:
                backend.config = config  # the name follows how many addresses share it
            kept.append(backend)
        self.backends = kept
        return joined, [backend.name for backend in by_url.values()]

    def by_name(self, name: str) -> Backend[C] | None:
        return next((b for b in self.backends if b.name == name), None)

    def available(self) -> list[Backend[C]]:
        now = self.clock()
        return [b for b in self.backends if b.available(now)]

    def pick(
        self,
        view: RequestView = NO_VIEW,
        *,
        exclude: frozenset[str] = frozenset(),
        prefer: str | None = None,
    ) -> Backend[C]:
        candidates = [b for b in self.available() if b.name not in exclude]
        if not candidates:
            raise NoBackend
        if prefer is not None:
            sticky = next((b for b in candidates if b.name == prefer), None)
            if sticky is not None:
                return sticky
        return self.policy.choose(candidates, view)

    def eject(self, backend: Backend[C]) -> None:
        """A failed connection: out of rotation for eject_s (or until a health check passes)."""
        backend.failures += 1
        backend.ejected_until = self.clock() + self.eject_s

    def health(self, backend: Backend[C], ok: bool, *, failures_to_eject: int = 1) -> bool:
        """A health check's result; True when it takes the backend out of rotation."""
        if ok:
            backend.healthy, backend.checks_failed = True, 0
            backend.ejected_until = 0.0
            backend.failures = 0
            return False
        backend.checks_failed += 1
        lost = backend.healthy and backend.checks_failed >= failures_to_eject
        if lost:
            backend.healthy = False
        return lost


_SHORT_KEY = 64


@dataclass
class SessionTable:
    """session id -> (prefiller, decoder), least recently used evicted past ``capacity``."""

    capacity: int
    _pairs: OrderedDict[str, tuple[str, str]] = field(default_factory=OrderedDict)

    @staticmethod
    def key(session: str | None) -> str | None:
        """What the table stores for a session header: long values as a digest, so that a full
        table takes ``capacity`` x ~100 bytes whatever the clients send (headers go to 8 KiB)."""
        if not session or len(session) <= _SHORT_KEY:
            return session or None
        return "#" + hashlib.blake2b(session.encode(errors="replace"), digest_size=16).hexdigest()

    def get(self, session: str) -> tuple[str, str] | None:
        pair = self._pairs.get(session)
        if pair is not None:
            self._pairs.move_to_end(session)
        return pair

    def put(self, session: str, pair: tuple[str, str]) -> None:
        self._pairs[session] = pair
        self._pairs.move_to_end(session)
        while len(self._pairs) > self.capacity:
            self._pairs.popitem(last=False)

    def __len__(self) -> int:
        return len(self._pairs)
