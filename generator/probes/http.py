"""The one module that speaks HTTP to a running stack (httpx) and reads Prometheus text.

Every probe goes through a ``ProbeClient``: it knows which service it asks, so a failure says
"router answered HTTP 502 on /v1/completions: <the router's own message>" with the ``logs``
command to run, never httpx's text. Its transport is injectable: unit tests drive the
verdicts with ``httpx.MockTransport`` and recorded pages.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx
from prometheus_client.parser import text_string_to_metric_families

from generator.errors import ProbeError

__all__ = [
    "Answer",
    "MetricSamples",
    "NetworkNames",
    "Origin",
    "ProbeClient",
    "Reply",
    "Transport",
    "backend_message",
    "metric_sum",
    "parse_samples",
    "read_here",
]

MetricSamples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
Transport = httpx.BaseTransport  # what tests inject (httpx.MockTransport)
_BODY_SHOWN = 300  # characters of a non-JSON error body kept in a message
_T = TypeVar("_T")


@dataclass(frozen=True)
class Answer:
    """Any answer, errors included: what a readiness check looks at."""

    status: int
    text: str

    def json(self) -> Any:
        try:
            return json.loads(self.text)
        except ValueError:
            return None


@dataclass(frozen=True)
class Origin:
    """Who sent a body, for errors about it: the stack, the service and the URL's path only
    (a message never repeats a query, which could carry a token)."""

    stack: str
    service: str
    path: str

    def error(self, problem: str, *, status: int | None = None) -> ProbeError:
        return ProbeError(
            f"{self.service} {problem} (on {self.path})",
            hint=f"look at its log: python -m generator logs {self.stack} {self.service}",
            status=status,
        )


@dataclass(frozen=True)
class Reply:
    """A JSON object a service sent, read through typed accessors that fail naming the key."""

    body: dict[str, Any]
    origin: Origin
    headers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str, origin: Origin, headers: Mapping[str, str] | None = None) -> Reply:
        try:
            body = json.loads(text)
        except ValueError as exc:
            raise origin.error(f"sent a body that is not JSON: {text[:80]!r}") from exc
        if not isinstance(body, dict):
            raise origin.error(f"sent JSON {type(body).__name__}, not an object")
        return cls(body, origin, headers or {})

    def require(self, key: str, kind: type[_T]) -> _T:
        """``body[key]``, which must be a ``kind`` (a bool is no int here)."""
        value = self.body.get(key)
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            shown = type(value).__name__ if key in self.body else "nothing"
            raise self.origin.error(f"sent {shown} as {key!r}, not a {kind.__name__}")
        return value

    def number(self, key: str) -> float:
        """``body[key]``, an int or a float (never a bool), as a float."""
        value = self.body.get(key)
        if not isinstance(value, int | float) or isinstance(value, bool):
            shown = type(value).__name__ if key in self.body else "nothing"
            raise self.origin.error(f"sent {shown} as {key!r}, not a number")
        return float(value)

    def part(self, key: str) -> Reply:
        """The object under ``key``, read the same way."""
        return Reply(self.require(key, dict), self.origin)


class ProbeClient:
    """HTTP to the services of ``stack``; every error a ``ProbeError`` naming the service."""

    def __init__(
        self, stack: str, *, timeout_s: float = 30.0, transport: Transport | None = None
    ) -> None:
        self.stack = stack
        self._client = httpx.Client(timeout=timeout_s, transport=transport)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def answer(self, url: str) -> Answer | None:
        """A GET's status and body; None when nothing answered (not up yet)."""
        try:
            response = self._client.get(url)
        except httpx.TransportError:
            return None
        return Answer(response.status_code, response.text)

    def get_text(self, service: str, url: str) -> str:
        return self._checked(service, "GET", url).text

    def get_json(self, service: str, url: str) -> Reply:
        response = self._checked(service, "GET", url)
        return Reply.parse(response.text, self.origin(service, url), response.headers)

    def post_json(
        self,
        service: str,
        url: str,
        body: Mapping[str, Any],
        *,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        response = self._checked(service, "POST", url, json=body, headers=headers)
        return Reply.parse(response.text, self.origin(service, url), response.headers)

    def stream_lines(
        self,
        service: str,
        url: str,
        body: Mapping[str, Any],
        *,
        headers: Mapping[str, str] | None = None,
    ) -> Iterator[str]:
        """The lines of a streamed POST (server-sent events)."""
        try:
            with self._client.stream("POST", url, json=body, headers=headers) as response:
                if response.is_error:
                    response.read()
                    raise self.status_error(service, url, response.status_code, response.text)
                yield from response.iter_lines()
        except httpx.HTTPError as exc:
            raise self.unreachable(service, url, exc) from exc

    def scrape(self, service: str, url: str) -> MetricSamples:
        """Every sample of a Prometheus endpoint, keyed by (name, sorted labels)."""
        try:
            return parse_samples(self.get_text(service, url))
        except ValueError as exc:
            raise self.error(service, url, f"sent metrics that do not parse ({exc})") from exc

    def origin(self, service: str, url: str) -> Origin:
        return Origin(self.stack, service, httpx.URL(url).path)

    def error(self, service: str, url: str, problem: str) -> ProbeError:
        return self.origin(service, url).error(problem)

    def status_error(self, service: str, url: str, status: int, text: str) -> ProbeError:
        problem = f"answered HTTP {status}: {backend_message(text)}"
        return self.origin(service, url).error(problem, status=status)

    def unreachable(self, service: str, url: str, exc: httpx.HTTPError) -> ProbeError:
        return self.error(service, url, f"did not answer ({type(exc).__name__}: {exc})")

    def _checked(self, service: str, method: str, url: str, **options: Any) -> httpx.Response:
        try:
            response = self._client.request(method, url, **options)
        except httpx.HTTPError as exc:
            raise self.unreachable(service, url, exc) from exc
        if response.is_error:
            raise self.status_error(service, url, response.status_code, response.text)
        return response


def backend_message(text: str) -> str:
    """The backend's own words: OpenAI's ``{"error": {"message": ...}}`` (our proxy, vLLM),
    vLLM's older ``{"message": ...}``, FastAPI's ``{"detail": ...}``, else the body's start."""
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        for key in ("error", "message", "detail"):
            if isinstance(body.get(key), str):
                return str(body[key])
    return text.strip()[:_BODY_SHOWN] or "(empty body)"


def read_here(service: str, url: str) -> str:
    """A ``read_inside`` for services whose loopback is this machine's (processes started
    here; bridge containers reached on their 127.0.0.1-published ports)."""
    with ProbeClient("<stack>", timeout_s=10.0) as client:
        return client.get_text(service, url)


def parse_samples(text: str) -> MetricSamples:
    """Every sample of a Prometheus text page, keyed by (name, sorted labels); ValueError if
    it does not parse."""
    samples: MetricSamples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = float(sample.value)
    return samples


def metric_sum(samples: MetricSamples, name: str, labels: Mapping[str, str] | None = None) -> float:
    """Sum of ``name`` over all label sets that contain ``labels``."""
    wanted = set((labels or {}).items())
    return sum(
        value
        for (sample, sample_labels), value in samples.items()
        if sample == name and wanted <= set(sample_labels)
    )


_LOOPBACK = ("127.0.0.1", "localhost")


class NetworkNames(httpx.BaseTransport):
    """Sends a request for a loopback port to that port's owner by its name on the network:
    the probes dial a bridge stack's ports on loopback, as ``up`` reaches them published; a
    probe inside the network (the Kubernetes verdict Job) reaches each owner by name."""

    def __init__(self, names: Mapping[int, str], inner: httpx.BaseTransport | None = None):
        self.names, self.inner = dict(names), inner or httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        name = self.names.get(url.port) if url.host in _LOOPBACK and url.port else None
        if name is not None:
            headers = httpx.Headers(request.headers)
            headers["host"] = f"{name}:{url.port}"
            request = httpx.Request(
                request.method,
                url.copy_with(host=name),
                headers=headers,
                stream=request.stream,
                extensions=request.extensions,
            )
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()
