"""The one error tree of xpyd-stacks.

::

    XpydError                 what happened + what to do (``hint``); the CLI prints it and exits 1
    ├── SpecError             the stack file is invalid (one or more ``SpecIssue``)
    ├── PlanError             the stack does not fit its hosts (GPUs, cores, ports)
    ├── RenderError           a template or rendered file is wrong (a bug or a bad template edit)
    ├── DriftError            ``render --check``: committed output differs from a fresh render
    ├── DockerError           a docker / docker compose call failed (what ran and what it printed)
    └── StackError            a running stack misbehaved (unhealthy service, failed smoke verdict)
        └── ProbeError        a service's HTTP answer was an error or not what it must send

Third-party exceptions are translated into these in exactly one place each (pydantic in
``generator/spec/load.py``, python-on-whales in ``generator/docker/endpoint.py``, httpx in
``generator/probes/http.py``), always
``raise ... from exc``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "DockerError",
    "DriftError",
    "PlanError",
    "ProbeError",
    "RenderError",
    "SpecError",
    "SpecIssue",
    "StackError",
    "XpydError",
    "dotted_field",
]


class XpydError(Exception):
    """An expected failure: ``message`` says what happened, ``hint`` what to do next."""

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}\n  fix: {self.hint}" if self.hint else self.message


@dataclass(frozen=True)
class SpecIssue:
    """One problem in a stack file: the dotted field, what is wrong, and how to fix it."""

    field: str
    problem: str
    fix: str

    def __str__(self) -> str:
        return f"{self.field}: {self.problem}\n    fix: {self.fix}"


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")


def dotted_field(parts: Iterable[int | str]) -> str:
    """``SpecIssue.field`` for a path into the spec: ``hosts[0].gpus``. A key that is not a
    plain word is shown quoted (``env['a b']``): field names come from the user's file and
    must not carry line breaks or escape sequences into a message."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _PLAIN_KEY.fullmatch(part):
            text += f".{part}" if text else part
        else:
            text += f"[{part!r}]"
    return text or "<spec>"


class SpecError(XpydError):
    def __init__(self, source: str, issues: list[SpecIssue]) -> None:
        self.source = source
        self.issues = issues
        noun = "problem" if len(issues) == 1 else "problems"
        body = "\n".join(f"  - {issue}" for issue in issues)
        super().__init__(f"{source}: {len(issues)} {noun} in the stack spec\n{body}")


class PlanError(XpydError):
    """The spec is well-formed but cannot be placed: not enough GPUs, colliding ports, ..."""

    def __init__(self, field: str, problem: str, *, fix: str) -> None:
        self.field = field
        super().__init__(f"{field}: {problem}", hint=fix)


class RenderError(XpydError):
    pass


class DriftError(XpydError):
    pass


class DockerError(XpydError):
    """A docker call failed; ``command`` is what ran and ``output`` what it printed."""

    def __init__(self, message: str, *, command: list[str], output: str, hint: str = "") -> None:
        self.command = command
        self.output = output
        super().__init__(message, hint=hint)


class StackError(XpydError):
    pass


class ProbeError(StackError):
    """An HTTP probe of a service failed: the message names the service, the URL path and the
    backend's own error message; the hint, the ``logs`` command for that service. ``status``:
    the HTTP status it answered with (None: it did not answer)."""

    def __init__(self, message: str, *, hint: str = "", status: int | None = None) -> None:
        self.status = status
        super().__init__(message, hint=hint)
