"""Every error the proxy answers has OpenAI's shape, ``{"error": {"message", "type", "code"}}``
with ``code`` equal to the HTTP status, and names backends only by their configured name.

    ProxyError      ends a request with that body (raised anywhere in a request's handling)
    Redactor        removes backend addresses from text that came from a backend or a library

StartupError is the other kind: the proxy cannot start (a port in use); one line, exit 1.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable

from aiohttp import web

from generator.proxy import fastjson
from generator.proxy.config import BackendConfig

__all__ = ["ProxyError", "Redactor", "StartupError", "error_response"]

_JSON = "application/json"


def error_response(
    status: int,
    kind: str,
    message: str,
    headers: dict[str, str] | None = None,
    *,
    param: str | None = None,
) -> web.Response:
    body = {"error": {"message": message, "type": kind, "param": param, "code": status}}
    return web.Response(
        body=fastjson.dumps(body), status=status, content_type=_JSON, headers=headers
    )


class StartupError(Exception):
    """The proxy cannot start: says what and where, in one line."""


class ProxyError(Exception):
    """Ends a request with an OpenAI-style error body."""

    def __init__(
        self,
        status: int,
        kind: str,
        message: str,
        *,
        headers: dict[str, str] | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.kind, self.message, self.param = status, kind, message, param
        self.headers = headers or {}

    def response(self, headers: dict[str, str]) -> web.Response:
        return error_response(
            self.status, self.kind, self.message, headers | self.headers, param=self.param
        )


# Whatever the configuration says, text that reaches a client loses anything that looks like an
# address: URLs, IPv4/IPv6 literals (bare, bracketed, with or without a port), host:port names
# and Python's ('host', port) tuples.
_GENERIC = re.compile(
    r"[a-z][a-z0-9+.-]*://[^\s\"'<>]+"
    r"|\(\s*'[^']*'\s*,\s*\d+[^)]*\)"
    r"|\[[0-9a-f:.%a-z]+\](?::\d+)?"
    r"|\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"
    # a name with a port: labels of letters, digits and hyphens, one of them not all digits
    r"|\b(?:[a-z0-9-]+\.)*[a-z0-9-]*[a-z-][a-z0-9-]*(?:\.[a-z0-9-]+)*:\d{2,5}\b",
    re.IGNORECASE,
)
# Candidates for a bare IPv6 literal (two colons at least, an optional zone); ipaddress decides.
_IPV6_CANDIDATE = re.compile(r"(?<![\w:.[])[0-9a-f:.]*:[0-9a-f:.]*:[0-9a-f:.]*(?:%\w+)?", re.I)


def _hide_ipv6(match: re.Match[str]) -> str:
    text = match.group(0)
    try:
        ipaddress.IPv6Address(text.split("%", 1)[0])
    except ValueError:
        return text
    return "<address>"


class Redactor:
    """Replaces each backend's URL and host:port with its name, then any other address."""

    def __init__(self, backends: Iterable[BackendConfig]) -> None:
        pairs: list[tuple[str, str]] = []
        for backend in backends:
            address = backend.url.split("://", 1)[1].rstrip("/")
            pairs += [(backend.url.rstrip("/"), backend.name), (address, backend.name)]
        # Longest first: a URL must be replaced before the host:port inside it.
        self._pairs = sorted(set(pairs), key=lambda pair: -len(pair[0]))

    def __call__(self, text: str) -> str:
        for address, name in self._pairs:
            text = text.replace(address, name)
        return _GENERIC.sub("<address>", _IPV6_CANDIDATE.sub(_hide_ipv6, text))
