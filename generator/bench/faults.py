"""`bench --fault ACTION:TARGET@T[+D]`: what to do to which service (or host), when, and for
how long; and doing it. Signals come from inside the service's container (the supervisor's
--signal mode, generator/supervise.py), so that the runtime sees a crash and not a stop it was
asked for; a link cut from inside each host's network stack (generator/docker/netcut.py).

    kill:decode-0@10       SIGKILL to decode-0's command 10 s into the load (a crash)
    term:lmcache-decode-0@10   SIGTERM (vLLM and LMCache shut down cleanly, then exit 0)
    stop:prefill-0@10+15   SIGSTOP to the command and all its processes for 15 s, then SIGCONT
    hang:decode-0@10+30    SIGSTOP to an engine's processes under its command (vLLM's engine
                           core) for 30 s: its API server still answers /health, as a wedged
                           engine's does (what our proxy's stall check is for)
    cut:host-a@10+15       host-a and every other host of the stack drop each other's packets
                           for 15 s (multi-host stacks)
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from enum import StrEnum

from generator.errors import XpydError
from generator.plan import Plan
from generator.runtimes import ServiceRuntime
from generator.spec.identity import machine_address
from generator.supervise import IN_IMAGE as SUPERVISOR_IN_IMAGE
from generator.supervise import Reach

__all__ = ["LOOK_EVERY_S", "Fault", "FaultAction", "FaultError", "parse_fault", "signal_service"]

_FAULT = re.compile(
    r"(?P<action>[a-z]+):(?P<target>[a-z0-9][a-z0-9-]{0,62})@(?P<at>[0-9]{1,5}(?:\.[0-9]{1,3})?)"
    r"(?:\+(?P<for>[0-9]{1,5}(?:\.[0-9]{1,3})?))?"
)
_MAX_AT_S = 3600.0
# The drill looks at the stack once a second: a stop, hang or cut shorter than two looks may
# fall between them, and its report would say nothing of it.
LOOK_EVERY_S = 1.0
MIN_FOR_S = 2 * LOOK_EVERY_S


class FaultError(XpydError):
    """A --fault the stack cannot take: says which part and what would do."""

    def __init__(self, problem: str, *, fix: str) -> None:
        super().__init__(f"--fault: {problem}", hint=fix)


class FaultAction(StrEnum):
    KILL = "kill"
    TERM = "term"
    STOP = "stop"
    HANG = "hang"
    CUT = "cut"

    @property
    def lasts(self) -> bool:
        """Undone after +D seconds."""
        return self in (FaultAction.STOP, FaultAction.HANG, FaultAction.CUT)


@dataclass(frozen=True)
class Fault:
    action: FaultAction
    target: str  # a service; for a cut, a host
    at_s: float  # seconds after the load starts
    for_s: float | None = None  # stop, hang, cut: how long it lasts

    @property
    def label(self) -> str:
        lasting = f"+{self.for_s:g}" if self.for_s is not None else ""
        return f"{self.action.value}:{self.target}@{self.at_s:g}{lasting}"

    def watched(self, plan: Plan) -> list[str]:
        """The services whose recovery the drill waits for: the one hit; for a cut, every
        engine: those it separates from the router must be ejected and re-admitted, and the
        others lose their KV peers across it (a decoder whose pull broke may die)."""
        if self.action is not FaultAction.CUT:
            return [self.target]
        return [engine.name for engine in plan.engines]


def parse_fault(text: str, plan: Plan, *, addresses_known: bool = True) -> Fault:
    match = _FAULT.fullmatch(text.strip())
    if match is None:
        raise FaultError(
            f"{text!r} is not ACTION:TARGET@T[+D]",
            fix="e.g. kill:decode-0@10, term:lmcache-decode-0@10, stop:prefill-0@10+15, "
            "hang:decode-0@10+30 or cut:host-a@10+15",
        )
    try:
        action = FaultAction(match["action"])
    except ValueError:
        choices = ", ".join(a.value for a in FaultAction)
        raise FaultError(f"{match['action']!r} is not an action", fix=choices) from None
    target, at_s = match["target"], float(match["at"])
    if action is FaultAction.CUT:
        _check_cut(plan, target, addresses_known=addresses_known)
    else:
        _check_service(plan, action, target)
    if at_s > _MAX_AT_S:
        raise FaultError(f"{at_s:g} s is too late", fix=f"at most {_MAX_AT_S:g} s")
    fault = Fault(action, target, at_s, _lasting(action, match["for"]))
    if action is FaultAction.CUT and not fault.watched(plan):
        raise FaultError(
            f"cutting {target} leaves every engine on the router's side",
            fix="cut a host whose engines the router reaches across hosts",
        )
    return fault


def _check_service(plan: Plan, action: FaultAction, target: str) -> None:
    services = _restarted_services(plan)
    if target not in services:
        raise FaultError(
            f"{plan.stack} has no service {target!r} that a fault can hit",
            fix=f"one of {', '.join(services)}",
        )
    engines = [engine.name for engine in plan.engines]
    if action is FaultAction.HANG and target not in engines:
        raise FaultError(
            f"{target} is no engine: hang stops the engine core under a vLLM API server",
            fix=f"hang one of {', '.join(engines)}, or stop:{target}@T+D",
        )
    if not plan.recovery.max_restarts:
        # The signal goes through the service's supervisor, and only restarted services
        # run under one: with none, nothing would bring it back either.
        raise FaultError(
            f"{plan.stack} restarts nothing (recovery.max_restarts: 0), so {target} runs "
            "without the supervisor a fault is sent through",
            fix="--set recovery.max_restarts=5 (the default)",
        )


def _lasting(action: FaultAction, written: str | None) -> float | None:
    """How long a stop, hang or cut lasts (+D); None for the others."""
    if (written is None) == action.lasts:
        lasting = "only stop, hang and cut last"
        problem = f"{action.value} needs how long (+D)" if action.lasts else lasting
        raise FaultError(
            problem,
            fix="kill:SERVICE@T, term:SERVICE@T, stop:SERVICE@T+D, hang:ENGINE@T+D, cut:HOST@T+D",
        )
    for_s = float(written) if written is not None else None
    if for_s is not None and for_s < MIN_FOR_S:
        raise FaultError(
            f"{action.value} for {for_s:g} s is over before the drill can see it (it looks "
            f"every {LOOK_EVERY_S:g} s)",
            fix=f"give +D of at least {MIN_FOR_S:g} s",
        )
    return for_s


def _check_cut(plan: Plan, host: str, *, addresses_known: bool) -> None:
    """``addresses_known`` False: the hosts' addresses come later (a Slurm job's nodes), and
    are checked again then."""
    running = [h for h in plan.hosts if h.services]
    names = [h.name for h in running]
    if len(running) < 2:
        raise FaultError(
            f"{plan.stack} runs on one host: a link cut needs two",
            fix="cut:HOST@T+D is for multi-host stacks (hosts: with placement:)",
        )
    if host not in names:
        raise FaultError(f"{plan.stack} has no host {host!r}", fix=f"one of {', '.join(names)}")
    loopback = [h.name for h in running if _is_loopback(h.address)]
    if loopback and addresses_known:
        raise FaultError(
            f"host {loopback[0]} has a loopback address: its hosts share one network stack",
            fix="a link cut needs hosts with addresses of their own",
        )


def _is_loopback(address: str) -> bool:
    try:  # machine_address: `localhost` and its subdomains are 127.0.0.1
        return ipaddress.ip_address(machine_address(address)).is_loopback
    except ValueError:
        return False  # a host name: its own machine, as far as the spec says


def _restarted_services(plan: Plan) -> list[str]:
    """Engines (each node of one over several hosts), LMCache servers and the router:
    everything `up` starts."""
    names = [engine.name for engine in (*plan.engines, *plan.followers)]
    return [*names, *(sidecar.service for sidecar in plan.sidecars), plan.router.service]


def signal_service(
    runtime: ServiceRuntime, service: str, signame: str, reach: Reach = "command"
) -> str:
    """Sends SIG``signame`` to the service's supervised command (``tree``: and every process
    under it; ``under``: only those) from inside its container."""
    command = ["python3", SUPERVISOR_IN_IMAGE, "--signal", signame, service]
    return runtime.execute(service, command + ([] if reach == "command" else [f"--{reach}"]))
