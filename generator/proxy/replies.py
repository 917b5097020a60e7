"""Backend answers, checked before anything reaches the client: a 200 must be JSON (or SSE when
a stream was asked for), anything else becomes an OpenAI-style error with the backend's own
message (addresses removed): its status for a 4xx, 502 for the rest."""

from __future__ import annotations

from typing import Any

import aiohttp

from generator.proxy import fastjson
from generator.proxy.errors import ProxyError, Redactor

__all__ = ["MAX_ANSWER_BYTES", "backend_failure", "read_answer", "read_json"]

# A completion with logprobs of a long answer is a few MiB; more is a broken backend.
MAX_ANSWER_BYTES = 64 * 2**20
_MESSAGE_CHARS = 500


async def read_answer(reply: aiohttp.ClientResponse) -> bytes:
    """The whole answer, up to MAX_ANSWER_BYTES; ValueError past it."""
    if reply.content_length is not None and reply.content_length <= MAX_ANSWER_BYTES:
        return await reply.read()
    chunks, size = [], 0
    async for chunk in reply.content.iter_any():
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            raise ValueError(f"answer larger than {MAX_ANSWER_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json(
    reply: aiohttp.ClientResponse, *, role: str, backend: str, redact: Redactor
) -> tuple[bytes, Any]:
    """A 200 answer's bytes and parsed JSON; ProxyError for any other status or non-JSON."""
    length = reply.content_length
    try:
        # The usual case (vLLM's JSON answers carry a length) without read_answer's frame.
        small = length is not None and length <= MAX_ANSWER_BYTES
        raw = await (reply.read() if small else read_answer(reply))
    except ValueError as exc:
        raise ProxyError(502, f"{role}_failed", f"{backend}: {exc}") from exc
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
