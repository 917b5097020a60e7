"""`bench --fault ACTION:SERVICE@T[+D]`: what to do to which service, when, and for how long;
and doing it, from inside the service's container (the supervisor's --signal mode,
generator/supervise.py), so that the runtime sees a crash and not a stop it was asked for.

    kill:decode-0@10       SIGKILL to decode-0's command 10 s into the load (a crash)
    term:lmcache-decode-0@10   SIGTERM (vLLM and LMCache shut down cleanly, then exit 0)
    stop:prefill-0@10+15   SIGSTOP to the command and all its processes for 15 s, then SIGCONT
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from generator.errors import XpydError
from generator.plan import Plan
from generator.runtimes import ServiceRuntime
from generator.supervise import IN_IMAGE as SUPERVISOR_IN_IMAGE

__all__ = ["Fault", "FaultAction", "FaultError", "parse_fault", "signal_service"]

_FAULT = re.compile(
    r"(?P<action>[a-z]+):(?P<service>[a-z0-9][a-z0-9-]{0,62})@(?P<at>[0-9]{1,5}(?:\.[0-9]{1,3})?)"
    r"(?:\+(?P<for>[0-9]{1,5}(?:\.[0-9]{1,3})?))?"
)
_MAX_AT_S = 3600.0


class FaultError(XpydError):
    """A --fault the stack cannot take: says which part and what would do."""

    def __init__(self, problem: str, *, fix: str) -> None:
        super().__init__(f"--fault: {problem}", hint=fix)


class FaultAction(StrEnum):
    KILL = "kill"
    TERM = "term"
    STOP = "stop"


@dataclass(frozen=True)
class Fault:
    action: FaultAction
    service: str
    at_s: float  # seconds after the load starts
    for_s: float | None = None  # stop: how long it stays stopped

    @property
    def label(self) -> str:
        lasting = f"+{self.for_s:g}" if self.for_s is not None else ""
        return f"{self.action.value}:{self.service}@{self.at_s:g}{lasting}"


def parse_fault(text: str, plan: Plan) -> Fault:
    match = _FAULT.fullmatch(text.strip())
    if match is None:
        raise FaultError(
            f"{text!r} is not ACTION:SERVICE@T[+D]",
            fix="e.g. kill:decode-0@10, term:lmcache-decode-0@10 or stop:prefill-0@10+15",
        )
    try:
        action = FaultAction(match["action"])
    except ValueError:
        choices = ", ".join(a.value for a in FaultAction)
        raise FaultError(f"{match['action']!r} is not an action", fix=choices) from None
    service, at_s = match["service"], float(match["at"])
    services = _restarted_services(plan)
    if service not in services:
        raise FaultError(
            f"{plan.stack} has no service {service!r} that a fault can hit",
            fix=f"one of {', '.join(services)}",
        )
    if at_s > _MAX_AT_S:
        raise FaultError(f"{at_s:g} s is too late", fix=f"at most {_MAX_AT_S:g} s")
    for_s = float(match["for"]) if match["for"] is not None else None
    if (for_s is None) != (action is not FaultAction.STOP):
        raise FaultError(
            "only stop lasts (+D)" if for_s is not None else "stop needs how long (+D)",
            fix="kill:SERVICE@T, term:SERVICE@T, stop:SERVICE@T+D",
        )
    return Fault(action, service, at_s, for_s)


def _restarted_services(plan: Plan) -> list[str]:
    """Engines, LMCache servers and the router: everything `up` starts."""
    names = [engine.name for engine in plan.engines]
    return [*names, *(sidecar.service for sidecar in plan.sidecars), plan.router.service]


def signal_service(runtime: ServiceRuntime, service: str, signame: str, *, tree: bool) -> str:
    """Sends SIG``signame`` to the service's supervised command (and, with ``tree``, every
    process under it) from inside its container."""
    command = ["python3", SUPERVISOR_IN_IMAGE, "--signal", signame, service]
    return runtime.execute(service, command + (["--tree"] if tree else []))
