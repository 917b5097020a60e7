"""Failover: requests waiting on a lost backend are given up, and a request that failed before
the client got a byte of its answer may be sent again through another pair.

A backend is *lost* when it fails its health checks (routing.py): a killed engine whose
address no longer answers, or a stopped one (SIGSTOP) that holds its connections open and
sends nothing. Each request task registers with the backend it waits on; losing the backend
cancels those tasks with ``LOST`` and the backend's name as the message, and the request code
turns that one cancellation into an error of its own (``<side>_lost``), leaving every other
cancellation (a client that left) alone.

A nixl-mp decode also waits on its prefiller until its answer starts: the decoder pulls the
KV from it, and a pull from a prefiller that died hangs (measured: until vLLM's 300 s
execute-model timeout kills the decoder's engine core, docs/facts.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from generator.proxy.errors import ProxyError
from generator.proxy.routing import Backend

__all__ = ["LOST", "give_up_on", "lost_backend", "lost_error", "migratable", "waiting_on"]

LOST = "xpyd: backend lost"
# Failures of the backend's own (never the client's, never a deadline): another pair may
# answer. A timeout is not among them: trying again would double the client's wait.
_MIGRATABLE = frozenset(
    f"{side}_{what}" for side in ("prefill", "decode") for what in ("unreachable", "failed", "lost")
)


def _always() -> bool:
    return True


@contextmanager
def waiting_on(backend: Backend[Any], *, while_: Callable[[], bool] = _always) -> Iterator[None]:
    """The current request waits on ``backend`` (for as long as ``while_()`` holds)."""
    task = asyncio.current_task()
    if task is None:  # not in a task: nothing to give up
        yield
        return
    backend.waiting[task] = while_
    try:
        yield
    finally:
        backend.waiting.pop(task, None)


def give_up_on(backend: Backend[Any]) -> int:
    """Cancels every request still waiting on ``backend``; how many there were."""
    waiting, backend.waiting = backend.waiting, {}
    given_up = [task for task, still in waiting.items() if still()]
    for task in given_up:
        task.cancel(f"{LOST}: {backend.name}")
    return len(given_up)


def lost_backend(exc: asyncio.CancelledError) -> str | None:
    """The lost backend's name if this cancellation is its (and then it is taken back: the
    request goes on); None for any other cancellation."""
    message = exc.args[0] if exc.args else None
    if not isinstance(message, str) or not message.startswith(f"{LOST}: "):
        return None
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()
    return message.removeprefix(f"{LOST}: ")


def lost_error(side: str, backend: str) -> ProxyError:
    return ProxyError(502, f"{side}_lost", f"{backend} failed its health checks")


def migratable(error: ProxyError) -> bool:
    return error.kind in _MIGRATABLE
