"""Backend answers, checked before anything reaches the client: a 200 must be JSON (or SSE when
a stream was asked for), anything else becomes an OpenAI-style error with the backend's own
message (addresses removed): its status for a 4xx, 502 for the rest.

Answers read whole (JSON) count into the same memory budget as request bodies while the
request holds them: many large answers at once get 503 instead of growing the proxy."""

from __future__ import annotations

from typing import Any

import aiohttp

from generator.proxy import fastjson
from generator.proxy.body import HeldBody
from generator.proxy.errors import ProxyError, Redactor

__all__ = ["MAX_ANSWER_BYTES", "OverBudget", "backend_failure", "read_answer", "read_json"]

# A completion with logprobs of a long answer is a few MiB; more is a broken backend.
MAX_ANSWER_BYTES = 64 * 2**20
_MESSAGE_CHARS = 500


class OverBudget(Exception):
    """Taking this answer in would pass the proxy's memory budget."""


async def read_answer(reply: aiohttp.ClientResponse, held: HeldBody | None = None) -> bytes:
    """The whole answer, up to MAX_ANSWER_BYTES (ValueError past it), each byte counted into
    ``held`` as it arrives (OverBudget when the proxy's budget has no room for it)."""
    length = reply.content_length
    if length is not None and length <= MAX_ANSWER_BYTES:
        _hold(held, length)
        return await reply.read()
    chunks, size = [], 0
    async for chunk in reply.content.iter_any():
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            raise ValueError(f"answer larger than {MAX_ANSWER_BYTES} bytes")
        _hold(held, size)
        chunks.append(chunk)
    return b"".join(chunks)


def _hold(held: HeldBody | None, size: int) -> None:
    if held is not None and not held.hold(size):
        raise OverBudget


async def read_json(
    reply: aiohttp.ClientResponse,
    *,
    role: str,
    backend: str,
    redact: Redactor,
    held: HeldBody | None = None,
) -> tuple[bytes, Any]:
    """A 200 answer's bytes and parsed JSON; ProxyError for any other status or non-JSON, and
    503 + Retry-After when the answer does not fit the proxy's budget (``held``)."""
    try:
        raw = await read_answer(reply, held)
    except ValueError as exc:
        raise ProxyError(502, f"{role}_failed", f"{backend}: {exc}") from exc
    except OverBudget as exc:
        assert held is not None
        raise ProxyError(
            503,
            "server_busy",
            "the proxy holds too many answers; retry shortly",
            headers={"Retry-After": str(held.retry_after_s)},
        ) from exc
    if reply.status != 200:
        raise backend_failure(reply.status, raw, role=role, backend=backend, redact=redact)
    try:
        return raw, fastjson.loads(raw)
    except ValueError as exc:
        raise ProxyError(
            502, f"{role}_failed", f"{backend} answered 200 with something that is not JSON"
        ) from exc


def backend_failure(
    status: int, raw: bytes, *, role: str, backend: str, redact: Redactor
) -> ProxyError:
    message, kind = _message_and_type(raw)
    if 400 <= status < 500:
        text = message or f"{backend} refused the request ({status})"
        return ProxyError(status, kind or "invalid_request_error", redact(text)[:_MESSAGE_CHARS])
    detail = f": {message}" if message else ""
    return ProxyError(
        502, f"{role}_failed", redact(f"{backend} answered {status}{detail}")[:_MESSAGE_CHARS]
    )


def _message_and_type(raw: bytes) -> tuple[str | None, str | None]:
    """vLLM's error bodies: {"error": {"message", "type"}}, or older {"message", "type"}, or
    FastAPI's {"detail"}; None for anything else (HTML from a gateway, say)."""
    try:
        body = fastjson.loads(raw)
    except ValueError:
        return None, None
    if not isinstance(body, dict):
        return None, None
    error = body.get("error")
    source = error if isinstance(error, dict) else body
    message = source.get("message", body.get("detail"))
    kind = source.get("type")
    return (
        str(message) if message is not None else None,
        kind if isinstance(kind, str) and kind.isidentifier() else None,
    )
