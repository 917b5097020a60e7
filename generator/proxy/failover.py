"""Failover: requests waiting on a lost backend are given up, and a request that failed before
the client got a byte of its answer may be sent again through another pair.

A backend is *lost* when it fails its health checks (routing.py): a killed engine whose
address no longer answers, or a stopped one (SIGSTOP) that holds its connections open and
sends nothing. Each request task registers with the backend it waits on; losing the backend
cancels those tasks with ``LOST`` as the message, and the request code turns that one
cancellation into an error of its own (``<side>_lost``), leaving every other cancellation (a
client that left) alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from generator.proxy.errors import ProxyError
from generator.proxy.routing import Backend

__all__ = ["LOST", "give_up_on", "is_lost", "lost_error", "migratable", "waiting_on"]

LOST = "xpyd: backend lost"
# Failures of the backend's own (never the client's, never a deadline): another pair may
# answer. A timeout is not among them: trying again would double the client's wait.
_MIGRATABLE = frozenset(
    f"{side}_{what}" for side in ("prefill", "decode") for what in ("unreachable", "failed", "lost")
)


@contextmanager
def waiting_on(backend: Backend[Any]) -> Iterator[None]:
    task = asyncio.current_task()
    if task is None:  # not in a task: nothing to give up
        yield
        return
    backend.waiting.add(task)
    try:
        yield
    finally:
        backend.waiting.discard(task)


def give_up_on(backend: Backend[Any]) -> int:
    """Cancels every request waiting on ``backend``; how many there were."""
    tasks, backend.waiting = backend.waiting, set()
    for task in tasks:
        task.cancel(LOST)
    return len(tasks)


def is_lost(exc: asyncio.CancelledError) -> bool:
    """This cancellation is a lost backend's (and is taken back: the request goes on)."""
    if exc.args[:1] != (LOST,):
        return False
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()
    return True


def lost_error(side: str, backend: str) -> ProxyError:
    return ProxyError(502, f"{side}_lost", f"{backend} failed its health checks")


def migratable(error: ProxyError) -> bool:
    return error.kind in _MIGRATABLE
