"""LMCache's "KV sent" notices: a ZMQ PULL socket that prefillers' LMCache PUSH a msgpack
``ProxyNotif{req_id}`` to, one per TP rank. Waiters register before the prefill request is
sent (a notice may beat the HTTP response) and wait with a deadline; nothing waits forever,
and the pending map only holds requests in flight.

The port takes bytes from anyone who can reach it, so no input may stop the listener: ZMQ
drops (and disconnects) a peer whose message is over ``MAX_NOTICE_BYTES`` before it is read
into memory, and what arrives is checked against the one shape LMCache sends (msgspec's
tagged struct in lmcache 0.5.6 ``pd_backend_async.ProxyNotif``: a map of exactly
``{"type": "ProxyNotif", "req_id": <str>}``); anything else is logged and counted, and the
listener carries on. ``running`` says whether it does (the proxy's /ready reads it).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import re
import socket
from dataclasses import dataclass, field
from typing import Any

import msgpack
import zmq
import zmq.asyncio

from generator.proxy.errors import StartupError

__all__ = ["MAX_NOTICE_BYTES", "NoticeBoard", "NoticeTimeout", "parse_notice"]

log = logging.getLogger("xpyd.proxy.notices")

# A real notice is ~50 bytes (our req_id is 32 hex digits); 4 KiB leaves room for other ids.
MAX_NOTICE_BYTES = 4096
_REQ_ID = re.compile(r"[A-Za-z0-9._:-]{1,256}")
_EARLY_CAPACITY = 10_000  # late notices of timed-out requests must not pile up


class NoticeTimeout(Exception):
    """Not all TP ranks said "KV sent" before the deadline."""


def parse_notice(payload: bytes) -> str:
    """The req_id of a ProxyNotif; ValueError (naming what is wrong) for anything else."""
    try:
        # Limits make msgpack refuse any container or string bigger than a notice before
        # building it; no nesting is possible with one map of two strings.
        message: Any = msgpack.unpackb(
            payload,
            raw=False,
            max_str_len=MAX_NOTICE_BYTES,
            max_bin_len=0,
            max_array_len=0,
            max_map_len=2,
            max_ext_len=0,
            strict_map_key=True,
        )
    except Exception as exc:  # msgpack raises ValueError, TypeError, its own UnpackException
        raise ValueError(f"not a msgpack notice ({type(exc).__name__})") from exc
    if not isinstance(message, dict) or set(message) != {"type", "req_id"}:
        raise ValueError("not a ProxyNotif map {type, req_id}")
    request_id = message["req_id"]
    if message["type"] != "ProxyNotif" or not isinstance(request_id, str):
        raise ValueError("not a ProxyNotif with a string req_id")
    if not _REQ_ID.fullmatch(request_id):
        raise ValueError("req_id is not a plain id")
    return request_id


@dataclass
class _Pending:
    needed: int
    seen: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)


class NoticeBoard:
    def __init__(self, bind_host: str, port: int) -> None:
        self.bind_host, self.port = bind_host, port
        self.address = f"tcp://{_zmq_host(bind_host)}:{port}"
        self._pending: dict[str, _Pending] = {}
        self._early: dict[str, int] = {}  # notices for ids not registered (yet): bounded
        self._context = zmq.asyncio.Context.instance()
        self._socket: zmq.asyncio.Socket | None = None
        self._task: asyncio.Task[None] | None = None
        self.received = 0
        self.rejected = 0

    async def start(self) -> None:
        host = _bindable(self.bind_host)
        self.address = f"tcp://{_zmq_host(host)}:{self.port}"
        self._socket = self._context.socket(zmq.PULL)
        self._socket.setsockopt(zmq.MAXMSGSIZE, MAX_NOTICE_BYTES)
        if ":" in host:
            self._socket.setsockopt(zmq.IPV6, 1)
        try:
            self._socket.bind(self.address)
        except zmq.ZMQError as exc:
            self._socket.close(linger=0)
            raise StartupError(
                f"cannot bind the KV-notice port {self.address}: {exc.strerror}"
            ) from exc
        self._task = asyncio.create_task(self._listen(), name="lmcache-notices")
        self._task.add_done_callback(_log_end)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._socket is not None:
            self._socket.close(linger=0)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

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
            try:
                payload = await self._socket.recv()
            except zmq.ZMQError as exc:  # EAGAIN and the like: the socket itself is fine
                log.warning("KV-notice socket: %s", exc.strerror)
                await asyncio.sleep(0.1)
                continue
            self.receive(payload)

    def receive(self, payload: bytes) -> None:
        """One message from the socket: a notice is marked, anything else counted and logged."""
        try:
            request_id = parse_notice(payload)
        except ValueError as exc:
            self.rejected += 1
            log.warning("ignoring a KV notice of %d bytes: %s", len(payload), exc)
            return
        self.received += 1
        self._mark(request_id)

    def _mark(self, request_id: str) -> None:
        pending = self._pending.get(request_id)
        if pending is None:
            if len(self._early) < _EARLY_CAPACITY:
                self._early[request_id] = self._early.get(request_id, 0) + 1
            return
        pending.seen += 1
        if pending.seen >= pending.needed:
            pending.done.set()


def _bindable(host: str) -> str:
    """An address ZMQ can bind: it resolves no host names for bind, so we do (a host's name
    from the spec's hosts file, say)."""
    try:
        ipaddress.ip_address(host)
        return host
    except ValueError:
        pass
    try:
        return str(socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0])
    except OSError as exc:
        raise StartupError(f"cannot resolve the KV-notice bind host {host!r}: {exc}") from exc


def _zmq_host(host: str) -> str:
    """ZMQ writes IPv6 literals in brackets, as URLs do."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _log_end(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("the KV-notice listener stopped: %r", task.exception())
