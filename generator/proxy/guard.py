"""The edge of the app: what every route is wrapped in, and OpenAI-shaped answers for what
aiohttp would answer itself.

- ``guarded``: the concurrency cap (503 + Retry-After past it) and, for a bug, a 500 in
  OpenAI's shape (logged with its traceback; the client never sees one).
- ``method_not_allowed`` and ``not_found``: 405 and 404 routes, registered after the real ones.
- ``BadHttpFilter``: a client's malformed HTTP is a warning in the log, not a traceback.

Routes and wrappers instead of an aiohttp middleware: the same behaviour without aiohttp's
middleware chain on every request (the benchmark's budget is ~0.3 ms of CPU per request).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from generator.proxy.admission import Admission
from generator.proxy.errors import error_response

__all__ = ["BadHttpFilter", "guarded", "method_not_allowed", "not_found"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
log = logging.getLogger("xpyd.proxy")


def guarded(handler: Handler, admission: Admission | None, retry_after_s: int) -> Handler:
    """``handler`` under the concurrency cap (None: never refused, for /health and the like)."""
    busy = {"Retry-After": str(retry_after_s)}

    async def guard(request: web.Request) -> web.StreamResponse:
        if admission is not None and not admission.enter():
            message = "the proxy has too many requests in flight; retry shortly"
            return error_response(503, "server_busy", message, busy)
        try:
            return await handler(request)
        except Exception:
            if request.writer.output_size > 0:
                raise  # an answer is under way: aiohttp logs this and drops the connection
            log.exception("unexpected error on %s %s", request.method, request.path)
            message = "the proxy failed on this request (its log has the details)"
            return error_response(500, "internal_error", message)
        finally:
            if admission is not None:
                admission.leave()

    return guard


def method_not_allowed(allowed: str) -> Handler:
    async def answer(request: web.Request) -> web.StreamResponse:
        message = f"{request.method} is not allowed on {request.path}; use {allowed}"
        return error_response(405, "method_not_allowed", message, {"Allow": allowed})

    return answer


async def not_found(request: web.Request) -> web.StreamResponse:
    return error_response(404, "not_found_error", f"no such endpoint: {request.path}")


class BadHttpFilter(logging.Filter):
    """For the ``aiohttp.server`` logger: a client's malformed HTTP (answered 400 by aiohttp
    before any handler runs) is one warning line, not an error with a traceback, so that bad
    clients cannot fill the log with what looks like the proxy's own failures."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, HttpProcessingError):
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.msg, record.args = "malformed request: %s", (" ".join(str(error).split()),)
            record.exc_info = record.exc_text = None
        return True
