"""One client request on its way through the proxy, and how payloads are sent: shared by
the request flow (flow.py) and the decode step (decode.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from generator.proxy.body import HeldBody, RequestFacts

__all__ = ["CONNECT_ERRORS", "JSON_TYPE", "Exchange", "sendable"]

JSON_TYPE = "application/json"
CONNECT_ERRORS = (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError)
_NO_FACTS = RequestFacts(stream=False, max_tokens=None)  # a tuple: one for every request
_WHOLE_BYTES = 2**20
_SLICE_BYTES = 256 * 1024


@dataclass(slots=True)
class Exchange:
    """One client request on its way through prefill and decode."""

    request: web.Request
    endpoint: str
    chat: bool
    request_id: str  # the client's X-Request-Id if it is a plain token, else ours
    held: HeldBody
    answers: HeldBody  # the backends' answers read whole: the same budget as bodies
    # The request's id at the engines (X-Request-Id, and LMCache's req_id), always ours, so that
    # two clients sending the same X-Request-Id never share an engine request or KV notices.
    kv_id: str = ""
    model: object = None  # the client's model field, for the drain request
    drain: bytes = b""  # lmcache-pd: what makes the decoder read KV that nobody else will
    alone: bytes = b""  # lmcache-pd: the request for the decoder alone (a full context)
    facts: RequestFacts = _NO_FACTS
    prefill: bytes = b""  # the prefill payload
    decode: bytes = b""  # the decoder payload without the fields the prefill decides
    forward: dict[str, str] = field(default_factory=dict)  # headers sent to the backends
    headers: dict[str, str] = field(default_factory=dict)  # headers returned to the client
    decoder_reached: bool = False  # the decoder answered: it has the request (and the KV)
    # The client's body, kept (and held in the budget) until the answer starts while another
    # attempt may need it (failover.py); empty once no attempt can.
    raw: bytes | bytearray = b""
    attempt: int = 0  # 0: the first pair tried
    started: bool = False  # the client has the first bytes of its answer: no other attempt

    def drop_payloads(self) -> None:
        """The decoder has the request: the payloads' memory (and, unless another attempt may
        need the body, its budget) are free again."""
        self.prefill = self.decode = self.alone = b""
        if not self.raw:
            self.held.release()

    def answer_starts(self) -> None:
        self.started = True
        self.raw = b""
        self.held.release()

    def next_attempt(self, kv_id: str) -> None:
        """Everything an attempt set, back to the start; the engines see a new request id."""
        self.attempt += 1
        self.kv_id, self.forward["X-Request-Id"] = kv_id, kv_id
        self.drain = self.alone = self.prefill = self.decode = b""
        self.decoder_reached = False
        self.headers.pop("X-Xpyd-Prefill", None)
        self.headers.pop("X-Xpyd-Decode", None)


def sendable(payload: bytes) -> bytes | AsyncIterator[memoryview]:
    """Small payloads whole; large ones in slices that wait for the socket, so that the
    transport never holds a second copy of a many-MiB body."""
    if len(payload) <= _WHOLE_BYTES:
        return payload
    return _slices(memoryview(payload))


async def _slices(view: memoryview) -> AsyncIterator[memoryview]:
    for start in range(0, len(view), _SLICE_BYTES):
        yield view[start : start + _SLICE_BYTES]
