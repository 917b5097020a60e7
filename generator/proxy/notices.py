"""LMCache's "KV sent" notices: a ZMQ PULL socket that prefillers' LMCache PUSH a msgpack
``ProxyNotif{req_id}`` to, one per TP rank. Waiters register before the prefill request is
sent (a notice may beat the HTTP response) and wait with a deadline; nothing waits forever,
and the pending map only holds requests in flight."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

import msgpack
import zmq
import zmq.asyncio

from generator.proxy.errors import StartupError

__all__ = ["NoticeBoard", "NoticeTimeout"]

log = logging.getLogger("xpyd.proxy.notices")


class NoticeTimeout(Exception):
    """Not all TP ranks said "KV sent" before the deadline."""


@dataclass
class _Pending:
    needed: int
    seen: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)


class NoticeBoard:
    def __init__(self, bind_host: str, port: int) -> None:
        self.address = f"tcp://{bind_host}:{port}"
        self._pending: dict[str, _Pending] = {}
        self._early: dict[str, int] = {}  # notices for ids not registered (yet): bounded below
        self._context = zmq.asyncio.Context.instance()
        self._socket: zmq.asyncio.Socket | None = None
        self._task: asyncio.Task[None] | None = None
        self.received = 0

    async def start(self) -> None:
        self._socket = self._context.socket(zmq.PULL)
        try:
            self._socket.bind(self.address)
        except zmq.ZMQError as exc:
            self._socket.close(linger=0)
            raise StartupError(
                f"cannot bind the KV-notice port {self.address}: {exc.strerror}"
            ) from exc
        self._task = asyncio.create_task(self._listen(), name="lmcache-notices")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._socket is not None:
            self._socket.close(linger=0)

    def expect(self, request_id: str, ranks: int) -> None:
        pending = _Pending(ranks, seen=self._early.pop(request_id, 0))
        if pending.seen >= pending.needed:
            pending.done.set()
        self._pending[request_id] = pending

    async def wait(self, request_id: str, timeout_s: float) -> None:
        pending = self._pending[request_id]
        try:
            await asyncio.wait_for(pending.done.wait(), timeout_s)
        except TimeoutError as exc:
            raise NoticeTimeout(
                f"{pending.seen}/{pending.needed} KV-sent notices after {timeout_s:.0f} s"
            ) from exc
        finally:
            self._pending.pop(request_id, None)

    def forget(self, request_id: str) -> None:
        self._pending.pop(request_id, None)

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def _listen(self) -> None:
        assert self._socket is not None
        while True:
            payload = await self._socket.recv()
            try:
                message = msgpack.unpackb(payload, raw=False)
                request_id = str(message["req_id"])
            except (ValueError, KeyError, TypeError, msgpack.UnpackException):
                log.warning("ignoring a malformed notice (%d bytes)", len(payload))
                continue
            self.received += 1
            self._mark(request_id)

    def _mark(self, request_id: str) -> None:
        pending = self._pending.get(request_id)
        if pending is None:
            if len(self._early) < 10_000:  # late notices of timed-out requests must not pile up
                self._early[request_id] = self._early.get(request_id, 0) + 1
            return
        pending.seen += 1
        if pending.seen >= pending.needed:
            pending.done.set()
