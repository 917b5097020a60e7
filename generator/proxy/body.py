"""A client's request body: read within the size cap, the body budget and the client deadlines,
parsed once, and checked for the few fields the proxy itself acts on.

Memory: the body is read into one buffer (never joined or copied again), parsed, and the
parsed request lives only until both backend payloads are serialized (protocols.py). Its
bytes count against the proxy's body budget until the decode request is sent.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import StreamReader, web

from generator.proxy import fastjson
from generator.proxy.admission import BodyBudget
from generator.proxy.config import LimitsConfig, TimeoutsConfig
from generator.proxy.errors import ProxyError
from generator.proxy.validation import RequestFacts, check_nesting, check_request

__all__ = ["HeldBody", "RequestFacts", "parse_body", "public_request_id", "read_body"]

_INVALID = "invalid_request_error"
BodyBytes = TypeVar("BodyBytes", bytes, bytearray)
# A client's X-Request-Id is echoed and forwarded only if it is short and plain.
_REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+=/-]{0,127}")


@dataclass(slots=True)
class HeldBody:
    """This request's share of the body budget; given back once, whatever happens."""

    budget: BodyBudget
    size: int = 0
    retry_after_s: int = 1  # what a client is told when the budget is full

    def hold(self, total: int) -> bool:
        if total <= self.size:
            return True
        if not self.budget.take(total - self.size):
            return False
        self.size = total
        return True

    def release(self) -> None:
        self.budget.give_back(self.size)
        self.size = 0


def _too_large(limit: int) -> ProxyError:
    return ProxyError(413, _INVALID, f"request body is larger than {limit} bytes")


def _busy(retry_after_s: int) -> ProxyError:
    return ProxyError(
        503,
        "server_busy",
        "the proxy holds too many request bodies; retry shortly",
        headers={"Retry-After": str(retry_after_s)},
    )


async def read_body(
    request: web.Request, limits: LimitsConfig, timeouts: TimeoutsConfig, held: HeldBody
) -> bytes | bytearray:
    """The body, or ProxyError: 413 too large, 415 compressed, 408 too slow, 503 no budget."""
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        # The app reads bodies raw (no decompression bombs), and vLLM takes none either.
        raise ProxyError(415, _INVALID, f"Content-Encoding {encoding!r} is not supported")
    declared = request.content_length
    if declared is not None and declared > limits.max_body_bytes:
        raise _too_large(limits.max_body_bytes)  # before reading a byte of it
    if not held.hold(declared or 0):
        raise _busy(limits.retry_after_s)
    content = request.content
    try:
        if content.is_eof():  # all of it came with the headers: take it as it is, no copy
            return _checked(content.read_nowait(), limits, held)
        async with asyncio.timeout(timeouts.client_body_idle_s) as timer:
            return await _read_chunks(content, limits, held, timer, timeouts)
    except TimeoutError as exc:
        raise ProxyError(408, "timeout", "the request body arrived too slowly") from exc
    except web.RequestPayloadError as exc:  # broken chunked framing, say
        raise ProxyError(400, _INVALID, "the request body could not be read") from exc


async def _read_chunks(
    content: StreamReader,
    limits: LimitsConfig,
    held: HeldBody,
    timer: asyncio.Timeout,
    timeouts: TimeoutsConfig,
) -> bytearray:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeouts.client_body_s
    buffer = bytearray()
    while chunk := await content.readany():
        buffer += chunk
        _checked(buffer, limits, held)
        timer.reschedule(min(loop.time() + timeouts.client_body_idle_s, deadline))
    return buffer


def _checked(data: BodyBytes, limits: LimitsConfig, held: HeldBody) -> BodyBytes:
    if len(data) > limits.max_body_bytes:  # no Content-Length, or one that lied
        raise _too_large(limits.max_body_bytes)
    if not held.hold(len(data)):
        raise _busy(limits.retry_after_s)
    return data


def parse_body(
    raw: bytes | bytearray, *, chat: bool, pd_first_token: bool
) -> tuple[dict[str, Any], RequestFacts]:
    try:
        body = fastjson.loads(raw)
    except ValueError as exc:  # orjson's JSONDecodeError is a ValueError too
        raise ProxyError(400, _INVALID, f"body is not JSON: {exc}") from exc
    except RecursionError as exc:  # the json module's fallback: it parses recursively
        raise ProxyError(400, _INVALID, "body nests too deeply to parse") from exc
    if not isinstance(body, dict):
        raise ProxyError(400, _INVALID, "body must be a JSON object")
    check_nesting(raw, body)  # before anything (a policy, the payloads) walks it
    return body, check_request(body, chat=chat, pd_first_token=pd_first_token)


def public_request_id(header: str | None, generated: str) -> str:
    """The client's X-Request-Id if it is a plain token, else ours (never echo arbitrary text)."""
    if header is not None and _REQUEST_ID.fullmatch(header):
        return header
    return generated
