"""A fault drill: the stack up (its verdict in), load through the router, one fault injected
at its time, the stack watched every second (the service's state and restarts; the router's
view of it), then the smoke verdict again once the service is back. A link cut is watched
through every engine: whole once each runs, is healthy and is in the router's rotation.

What it measures, against the fault's time:
- failed requests, split by whether any of their answer had reached the client;
- the longest request against its deadline (none may wait past it);
- time to ejection: until the router's metrics say the service is out of rotation (our
  proxy's xpyd_proxy_backend_healthy, vllm-router's vllm_router_worker_health), and until the
  last failure;
- time to recovery: until the service is running and healthy again (and back in our proxy's
  rotation), and until the smoke verdict passes again.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from generator.bench.engine_settings import engine_settings
from generator.bench.fault_load import LoadSettings, Outcome, run_load
from generator.bench.faults import LOOK_EVERY_S, Fault, FaultAction, signal_service
from generator.bench.link_cut import cut_link, restore_link
from generator.errors import StackError, XpydError
from generator.paths import Workspace
from generator.plan import Plan
from generator.probes.http import ProbeClient, metric_sum
from generator.routers import router_of
from generator.runtimes.base import ServiceState
from generator.stack_lock import holding
from generator.supervise import Reach
from generator.workflow.context import RunContext, RunOptions
from generator.workflow.report import EventLevel, Reporter
from generator.workflow.run import make_context, up_stack
from generator.workflow.steps.verdict import smoke

__all__ = [
    "DrillResult",
    "Sample",
    "combined_sample",
    "fault_wall_time",
    "followers_back_of",
    "run_drill",
]

_RECOVERY_LIMIT_S = 300.0  # a restarted vLLM on a busy CPU takes minutes (x --wait-scale)
_RESTORING = threading.Lock()  # the injector and an interrupted drill may both end a cut


@dataclass(frozen=True)
class Sample:
    """One look at the faulted service (services: a link cut's, all of them taken together:
    the first that is not running gives the status, restarts are summed), ``at_s`` after the
    load started."""

    at_s: float
    status: str  # the runtime's: running, exited, restarting, ...
    health: str | None
    restarts: int
    in_rotation: bool | None  # the router's view; None: no router routes to it
    # Engines registered with the faulted service (its LMCache server): healthy again, and
    # started since it did (their supervisor restarts them). None: no such engine.
    followers_back: bool | None = None
    # The router's metrics page did not answer this look (a 2 s limit, on a busy machine):
    # the look says nothing of rotation, so it neither ends nor starts an outage (counted
    # as in rotation, it would make a cut prefiller "whole" while it is still cut).
    router_silent: bool = False

    def look(self) -> str:
        """Whole, or the first reason it is not (for the report's per-second table)."""
        if self.router_silent:
            return "router did not answer"
        if self.status != "running":
            return self.status
        if self.health not in (None, "healthy"):
            return self.health
        if self.in_rotation is False:
            return "out of rotation"
        if self.followers_back is False:
            return "its followers not back"
        return "whole"


@dataclass
class DrillResult:
    stack: str
    router: str
    fault: str
    fault_at_s: float
    load: LoadSettings
    outcomes: list[Outcome] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    verdict_after: bool | None = None  # the smoke verdict once the service was back
    verdict_after_s: float | None = None  # since the fault
    verdict_after_rows: list[dict[str, Any]] = field(default_factory=list)
    # The verdict as the load ends, while the service may still be coming back: does the
    # stack serve without it?
    verdict_during: bool | None = None
    verdict_during_s: float | None = None  # since the fault
    # It failed, and the service was whole again by its end: a router that took the engine
    # back meanwhile sent it a request the verdict's view (without it) could not judge.
    verdict_during_void: bool = False
    last_exit: str | None = None  # the service's, from `status`
    injected: str = ""  # what the signal step printed
    injected_in_s: float | None = None  # how long the signal step took (docker exec)
    # When that step ended, since the load began. The figures after the fault count from here:
    # under load a `docker exec` took 9.5 s to deliver a kill planned at 10 s (cpu, CI).
    landed_at_s: float | None = None
    link_restored: bool | None = None  # a link cut's end: None, no cut
    fault_for_s: float | None = None  # a cut's or a stop's length
    # What changes how long a start takes and how KV moves (bench.engine_settings): CUDA
    # graphs or eager, block size, GPU share or KV cache size, transfer mode.
    engine_settings: dict[str, str] = field(default_factory=dict)

    @property
    def fault_took_effect_s(self) -> float:
        """When the fault took effect: its step's end (planned time where none ended)."""
        return self.landed_at_s if self.landed_at_s is not None else self.fault_at_s

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["summary"] = self.summary()
        return data

    def summary(self) -> dict[str, float | int | None]:
        fault = self.fault_took_effect_s
        failed = [o for o in self.outcomes if not o.ok]
        out = next(
            (s.at_s for s in self.samples if s.at_s >= fault and s.in_rotation is False), None
        )
        back = self.back_at()
        return {
            "requests": len(self.outcomes),
            "succeeded": len(self.outcomes) - len(failed),
            "failed": len(failed),
            "failed_after_answer_started": sum(o.started for o in failed),
            "failed_before_answer_started": sum(not o.started for o in failed),
            "longest_request_s": max((o.end_s - o.start_s for o in self.outcomes), default=0.0),
            "deadline_s": self.load.deadline_s,
            "ejected_after_s": _after(out, fault),
            "last_failure_after_s": max((o.end_s for o in failed), default=fault) - fault
            if failed
            else None,
            "recovered_after_s": _after(back, fault),
            "out_again_after_s": _after(self.out_again_at(), fault),
            "served_again_after_s": _after(self.served_again_at(), fault),
            "never_out": self.never_out(),
            "verdict_after_s": self.verdict_after_s,
            "verdict_during_s": self.verdict_during_s,
            "restarts": max((s.restarts for s in self.samples), default=0)
            - self._restarts_before(),
        }

    def _restarts_before(self) -> int:
        before = [s.restarts for s in self.samples if s.at_s < self.fault_took_effect_s]
        return before[-1] if before else 0

    def back_at(self) -> float | None:
        """The first look after the fault at which the service was whole again, having been
        out since (down, unhealthy, out of rotation, or restarted between two looks)."""
        restarts = self._restarts_before()
        after = self.told(self.fault_took_effect_s)
        left = next(
            (i for i, s in enumerate(after) if not _whole(s) or s.restarts > restarts), None
        )
        if left is None:
            return None
        return next((s.at_s for s in after[left:] if _whole(s)), None)

    def out_again_at(self) -> float | None:
        """The first look after ``back_at`` at which the service was out again (down,
        unhealthy, out of rotation, or restarted since): whole again was not for good (on an
        H100 the restarted pair served again and its first requests ended the decoder)."""
        back = self.back_at()
        if back is None:
            return None
        after = self.told(back)
        restarts = after[0].restarts
        return next((s.at_s for s in after if not _whole(s) or s.restarts > restarts), None)

    def served_again_at(self) -> float | None:
        """When the first request sent after the fault ended well: the stack serving again,
        what a user sees (None: no such request; a service may be whole and serve nothing)."""
        served = [o.end_s for o in self.outcomes if o.ok and o.start_s >= self.fault_took_effect_s]
        return min(served, default=None)

    def told(self, since_s: float = 0.0) -> list[Sample]:
        """The looks from ``since_s`` on that said something (the router answered)."""
        return [s for s in self.samples if s.at_s >= since_s and not s.router_silent]

    def never_out(self) -> bool:
        """Whole at every look from the fault through its end and a look past it: nothing
        came back because nothing left (a router that never noticed a short cut)."""
        end = self.fault_at_s + (self.fault_for_s or 0.0)  # a cut ends when planned
        after = self.told(self.fault_took_effect_s)
        restarts = self._restarts_before()
        return any(s.at_s > end + LOOK_EVERY_S for s in after) and all(
            _whole(s) and s.restarts <= restarts for s in after
        )


def _after(moment: float | None, fault_at_s: float) -> float | None:
    return None if moment is None else moment - fault_at_s


def _whole(sample: Sample) -> bool:
    return sample.look() == "whole"


def run_drill(
    plan: Plan,
    fault: Fault,
    load: LoadSettings,
    *,
    workspace: Workspace,
    folder: Path,
    reporter: Reporter,
    wait_scale: float = 1.0,
    rebuild: bool = False,
) -> DrillResult:
    """The drill, holding the stack's lock throughout (its `up` inside takes it again)."""
    options = RunOptions(wait_scale=wait_scale, rebuild=rebuild)
    with holding(workspace.root, plan.stack, f"bench {plan.stack} --fault {fault.label}"):
        return _drill(
            plan, fault, load, workspace=workspace, folder=folder, reporter=reporter,
            options=options,
        )  # fmt: skip


def _drill(
    plan: Plan,
    fault: Fault,
    load: LoadSettings,
    *,
    workspace: Workspace,
    folder: Path,
    reporter: Reporter,
    options: RunOptions,
) -> DrillResult:
    context = make_context(plan, workspace, options, None, reporter, directory=folder / "up")
    up_stack(context)  # a stack that does not come up, or fails its verdict: nothing to drill
    result = DrillResult(
        plan.stack,
        plan.router.kind.value,
        fault.label,
        fault.at_s,
        load,
        fault_for_s=fault.for_s,
        engine_settings=engine_settings(plan),
    )
    watched = fault.watched(plan)
    origin = time.monotonic()
    stop = threading.Event()
    watcher = threading.Thread(
        target=_watch,
        args=(context, watched, origin, stop, result.samples),
        kwargs={"fault_at_s": fault.at_s},
        daemon=True,
    )
    injector = threading.Thread(target=_inject, args=(context, fault, origin, result), daemon=True)
    watcher.start()
    injector.start()
    reporter.event(
        EventLevel.INFO,
        f"{plan.stack}: load for {load.duration_s:g} s ({load.concurrency} clients), "
        f"fault {fault.label}",
    )
    try:
        result.outcomes = run_load(load)
        injector.join()
    finally:
        if fault.action is FaultAction.CUT:  # also when interrupted: a cut never outlives us
            _restore(context, result)
    if not _whole_now(result):
        # The stack serves without the faulted service: the verdict reads the rest.
        result.verdict_during, result.verdict_during_s = _verdict(
            context, reporter, "during-recovery", origin, result.fault_took_effect_s, down=watched
        )
        result.verdict_during_void = not result.verdict_during and _whole_now(result)
    _await_recovery(
        result, origin, context, reporter, limit_s=_RECOVERY_LIMIT_S * options.wait_scale
    )
    stop.set()
    watcher.join()
    if fault.action is not FaultAction.CUT:
        states = context.host_of(fault.target).runtime.ps()
        result.last_exit = next((s.last_exit for s in states if s.service == fault.target), None)
    return result


def _inject(context: RunContext, fault: Fault, origin: float, result: DrillResult) -> None:
    _sleep_until(origin + fault.at_s)
    context.progress(f"fault: {fault.label}")
    started = time.monotonic()
    try:
        if fault.action is FaultAction.CUT:
            result.injected = cut_link(context.hosts, fault.target)
            _landed(result, started, origin)
            _sleep_until(origin + fault.at_s + (fault.for_s or 0.0))
            _restore(context, result)
            return
        runtime = context.host_of(fault.target).runtime
        if fault.action in (FaultAction.STOP, FaultAction.HANG):
            # hang: its API server goes on answering
            reach: Reach = "tree" if fault.action is FaultAction.STOP else "under"
            result.injected = signal_service(runtime, fault.target, "STOP", reach)
            _landed(result, started, origin)
            _sleep_until(origin + fault.at_s + (fault.for_s or 0.0))
            result.injected += signal_service(runtime, fault.target, "CONT", reach)
        else:
            signame = "KILL" if fault.action is FaultAction.KILL else "TERM"
            result.injected = signal_service(runtime, fault.target, signame)
            _landed(result, started, origin)
    except XpydError as error:  # recorded: the report says the fault never happened
        result.injected = f"failed: {error.message}"


def _landed(result: DrillResult, started: float, origin: float) -> None:
    ended = time.monotonic()
    result.injected_in_s, result.landed_at_s = ended - started, ended - origin


def _restore(context: RunContext, result: DrillResult) -> None:
    """Ends a link cut (again, harmlessly, if it is over); a host it fails on is reported."""
    with _RESTORING:
        if result.link_restored:
            return
        failed = restore_link(context.hosts)
        result.link_restored = not failed
    if failed:
        context.progress(f"the link cut is still in place: {failed}", EventLevel.FAILED)


def _watch(
    context: RunContext,
    services: list[str],
    origin: float,
    stop: threading.Event,
    out: list[Sample],
    *,
    fault_at_s: float,
) -> None:
    followers = {s: _followers(context, s) for s in services}
    # Followers that the service follows in turn (a GPU engine and its lmcache server end
    # with each other): either may start last, so theirs is judged against the fault's time.
    mutual = {
        s: frozenset(f for f in followers[s] if s in _followers(context, f)) for s in services
    }
    looked_at = {*services, *(f for names in followers.values() for f in names)}
    runtimes = {id(r): r for r in (context.host_of(s).runtime for s in looked_at)}
    in_rotation = _rotation_reader(context.plan, services)
    while not stop.is_set():
        began = time.monotonic()
        states: dict[str, ServiceState] = {}
        for runtime in runtimes.values():
            with contextlib.suppress(XpydError):  # an engine that does not answer: "missing"
                states |= {s.service: s for s in runtime.ps()}
        try:
            rotation, silent = in_rotation(), False
        except XpydError:
            rotation, silent = None, True
        # Dated once both were read: a look whose status and health checks took seconds (on a
        # busy machine, two Docker engines) saw the router's rotation at its end, and dated at
        # its start it put a cut prefiller back in rotation before the cut ended (CI,
        # 2026-12-06: 15.7 s into a 16 s cut).
        looked, looked_wall = time.monotonic(), time.time()
        at_s = looked - origin
        faulted_at = fault_wall_time(looked_wall, at_s, fault_at_s)
        sample = combined_sample(
            at_s, states, services, rotation, followers, faulted_at=faulted_at, mutual=mutual
        )
        out.append(replace(sample, router_silent=silent))
        stop.wait(max(0.0, LOOK_EVERY_S - (time.monotonic() - began)))


def fault_wall_time(looked_wall: float, at_s: float, fault_at_s: float) -> float | None:
    """The fault's time in unix seconds, as the runtimes give start times (None before it:
    its followers have nothing to redo), from a look's monotonic and wall times read at the
    same moment: the wall clock read after the look's health checks (a starting engine's take
    seconds) and its monotonic one before them put the fault that much later, past the killed
    service's restart, which then counted as started before the fault and its followers as
    not needed (an H100 drill read "whole" while the decoder still started)."""
    return looked_wall - (at_s - fault_at_s) if at_s >= fault_at_s else None


def combined_sample(
    at_s: float,
    states: Mapping[str, ServiceState],
    services: list[str],
    in_rotation: bool | None,
    followers: Mapping[str, list[str]],
    *,
    faulted_at: float | None = None,
    mutual: Mapping[str, frozenset[str]] | None = None,
) -> Sample:
    """``faulted_at``: the fault's unix time, None before it (followers are not judged then);
    ``mutual``: each service's followers that follow each other with it."""
    found = [state for s in services if (state := states.get(s)) is not None]
    statuses = [s.status for s in found] + ["missing"] * (len(services) - len(found))
    healths = [s.health for s in found if s.health is not None]
    backs = [
        back
        for s in services
        if faulted_at is not None
        and (
            back := followers_back_of(
                states, s, followers[s], faulted_at=faulted_at, mutual=(mutual or {}).get(s)
            )
        )
        is not None
    ]
    return Sample(
        at_s=at_s,
        status=next((status for status in statuses if status != "running"), "running"),
        health=next((h for h in healths if h != "healthy"), healths[0] if healths else None),
        restarts=sum(s.restarts for s in found),
        in_rotation=in_rotation,
        followers_back=all(backs) if backs else None,
    )


def _followers(context: RunContext, service: str) -> list[str]:
    """The services whose supervisors restart them after ``service`` restarts: those that
    registered with it at their start (Service.registered_at: a nixl-mp engine and its LMCache
    server) and those that watch its process (Service.restarts_with: an lmcache-pd prefiller
    and its decoders, on any host; a GPU process that maps its memory: Service.restarts_with
    with maps_memory)."""
    followers: list[str] = []
    for host in context.hosts.values():
        for s in host.services.services:
            registered = s.registered_at and service in {d.service for d in s.depends_on}
            if registered or service in {peer.service for peer in s.restarts_with}:
                followers.append(s.name)
    return followers


def followers_back_of(
    states: Mapping[str, ServiceState],
    service: str,
    followers: list[str],
    *,
    faulted_at: float | None = None,
    mutual: frozenset[str] | None = None,
) -> bool | None:
    """Whether the services that start again after ``service`` did: healthy, and started
    after it (what they kept of its process is stale). A follower in ``mutual`` (``service``
    follows it too) may start before ``service``'s last start: it counts once started after
    ``faulted_at``. None: nothing to wait for: no followers, or a service that has kept its
    process since the fault (stopped and continued, or cut off): they have nothing to redo."""
    if not followers:
        return None
    own = states.get(service)
    if own is None or own.started_at is None:
        return False
    own_start = own.started_at
    if faulted_at is not None and own_start <= faulted_at:
        return None

    def since(name: str) -> float:
        return faulted_at if faulted_at is not None and name in (mutual or ()) else own_start

    return all(
        (follower := states.get(name)) is not None
        and follower.health in (None, "healthy")
        and (follower.started_at or 0.0) > since(name)
        for name in followers
    )


def _rotation_reader(plan: Plan, services: list[str]) -> Callable[[], bool | None]:
    """The router says which engines are in rotation (its ``rotation_series``): all of them?
    None: no router routes to them; XpydError: its metrics page did not answer."""
    engines = {engine.name for engine in plan.engines}
    if not set(services) <= engines:
        return lambda: None  # a router routes to engines only
    router = router_of(plan)
    page = router.metrics_page(plan)
    url = f"http://{plan.reach_address(page.host)}:{page.port}{page.path}"
    series = [router.rotation_series(plan, service) for service in services]

    def read() -> bool:
        with ProbeClient(plan.stack, timeout_s=2.0) as client:
            samples = client.scrape(plan.router.service, url)  # XpydError: it did not answer
        return all(metric_sum(samples, metric, labels) > 0 for metric, labels in series)

    return read


def _await_recovery(
    result: DrillResult, origin: float, context: RunContext, reporter: Reporter, *, limit_s: float
) -> None:
    """Waits (bounded) until the service is whole again, then asks for the verdict."""
    deadline = time.monotonic() + limit_s
    while not _over(result) and time.monotonic() < deadline:
        time.sleep(LOOK_EVERY_S)
    if not _over(result):
        reporter.event(EventLevel.FAILED, f"{result.fault}: the service is not back")
        return
    result.verdict_after, result.verdict_after_s = _verdict(
        context, reporter, "after-fault", origin, result.fault_took_effect_s
    )
    if context.verdict is not None:
        result.verdict_after_rows = context.verdict.as_dict().get("rows", [])
        reporter.verdict(context.plan, context.verdict)


def _over(result: DrillResult) -> bool:
    """The service is back, or never left."""
    return result.back_at() is not None or result.never_out()


def _whole_now(result: DrillResult) -> bool:
    told = result.told()
    return bool(told) and _whole(told[-1]) and _over(result)


def _verdict(
    context: RunContext,
    reporter: Reporter,
    name: str,
    origin: float,
    fault_at_s: float,
    *,
    down: list[str] | None = None,
) -> tuple[bool, float]:
    """The smoke verdict with a prompt of its own: passed, and when (since the fault)."""
    try:
        smoke(context, again=name, down=down or ())
        passed = True
    except StackError as error:
        reporter.event(EventLevel.WARN, f"verdict ({name}): {error.message}")
        passed = False
    return passed, time.monotonic() - origin - fault_at_s


def _sleep_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.monotonic()))
