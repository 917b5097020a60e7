"""Tasks that start services on their hosts and wait until they really work: health from the
plan's addresses (engines, router), or the container's own health check where a service
listens on its host's loopback only (LMCache servers)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from generator.docker import ServiceState
from generator.errors import StackError
from generator.plan import EnginePlan, Plan
from generator.probes import wait_until_ready
from generator.probes.prometheus import prometheus_url, unscraped_targets
from generator.probes.readiness import engine_checks, routed_request, router_checks
from generator.services.model import HostServices
from generator.spec import Profile
from generator.topologies import topology_of
from generator.workflow.context import RunContext
from generator.workflow.hosts import HostStack
from generator.workflow.runtimes import runtime_driver

__all__ = [
    "ROUTER_DEADLINE_S",
    "SIDECAR_DEADLINE_S",
    "engine_deadline_s",
    "outlived_dependencies",
    "sidecars_on",
    "start_router",
    "start_services",
    "wait_engine",
    "wait_healthy",
    "wait_router",
]

SIDECAR_DEADLINE_S = 120.0
ROUTER_DEADLINE_S = 120.0
_ENGINE_DEADLINE_S = {Profile.GPU: 1800.0, Profile.CPU: 300.0}
_LOG_TAIL = 40
_ALIVE_EVERY_S = 4.0  # how stale a "still running?" answer may be while waiting
_ALLOCATION_EVERY_S = 5.0  # how often a wait asks whether the stack's allocation ended
_HEALTH_POLL_S = 1.0
_FIRST_SCRAPE_S = 30.0  # Prometheus lists its static targets seconds after it is ready
_CLOCK_SLACK_S = 1.0  # Docker's StartedAt and this clock: one machine, rounding apart
# Mutual KV peers restarted together start seconds apart; more than this is a restart missed.
_MUTUAL_SLACK_S = 30.0


def engine_deadline_s(plan: Plan) -> float:
    return _ENGINE_DEADLINE_S[plan.profile]


def sidecars_on(plan: Plan, host: str) -> list[str]:
    """Services the engines of ``host`` need healthy first (nixl-mp: their LMCache servers)."""
    return [sidecar.service for sidecar in plan.sidecars if sidecar.host == host]


def start_services(host: str, names: list[str]) -> Callable[[RunContext], str]:
    def start(context: RunContext) -> str:
        runtime = context.hosts[host].runtime
        since = time.time() - _CLOCK_SLACK_S
        runtime.up(names)
        # Left running by an earlier `up` while a service it depends on was replaced since
        # (its LMCache server recreated for a new setting, say), or a KV peer restarted: it
        # still talks to the old process (an engine whose server went away hangs on every
        # request; an lmcache-pd sender never hears from a restarted decoder). Restarted.
        services = context.hosts[host].services
        peers = topology_of(context.plan).stale_after(context.plan)
        stale = outlived_dependencies(runtime.ps(), services, names, peers, since=since)
        if stale:
            runtime.restart(stale)
            return f"{', '.join(names)} (restarted {', '.join(stale)}: older than what they need)"
        return ", ".join(names)

    return start


def outlived_dependencies(
    states: Sequence[ServiceState],
    services: HostServices,
    names: Sequence[str],
    peers: Mapping[str, Sequence[str]],
    *,
    since: float,
) -> list[str]:
    """Of ``names``, those running since before ``since`` (not started by this step) and
    since before a dependency of theirs (on the same host) or a KV peer (``peers``: the
    topology's ``stale_after``) last started. Mutual peers go together, so that both start
    anew at once; one that started within a few seconds of the other is no restart missed."""
    started = {state.service: state.started_at for state in states if state.started_at}
    needs = {service.name: [d.service for d in service.depends_on] for service in services.services}

    def mutual(name: str, peer: str) -> bool:
        return name in peers.get(peer, ())

    def newer(name: str, other: str, slack: float) -> bool:
        return started.get(other, 0.0) > started[name] + slack

    def stale(name: str) -> bool:
        if started[name] >= since:
            return False
        return any(newer(name, need, 0.0) for need in needs.get(name, ())) or any(
            newer(name, peer, _MUTUAL_SLACK_S if mutual(name, peer) else 0.0)
            for peer in peers.get(name, ())
        )

    found = {name for name in names if name in started and stale(name)}
    together = {
        peer
        for name in found
        for peer in peers.get(name, ())
        if peer in names and peer in started and mutual(name, peer)
    }
    return [name for name in names if name in found | together]


def _state_of(stack: HostStack, service: str, *, max_age_s: float) -> ServiceState | None:
    return next((s for s in stack.runtime.ps(max_age_s=max_age_s) if s.service == service), None)


def _allocation(context: RunContext) -> Callable[[bool], None]:
    """A check that raises, with the runtime's one line, once what the stack runs in ended
    under it (a Slurm job its time limit or scancel ended): asked every few seconds, or at
    once (``now``) when a service exited, which is how such an end shows first."""
    driver = runtime_driver(context.plan.runtime)
    asked = [-_ALLOCATION_EVERY_S]

    def check(now: bool) -> None:
        if not now and time.monotonic() - asked[0] < _ALLOCATION_EVERY_S:
            return
        asked[0] = time.monotonic()
        if ended := driver.allocation_ended(context.plan.stack, context.workspace):
            raise StackError(ended)

    return check


def _alive(context: RunContext, service: str) -> Callable[[], None]:
    """A check to call while waiting for ``service``: it raises once the service exited, or
    exited and was restarted by its policy (a service that crashes while it starts crashes
    again: waiting out every restart only delays the same error), or once what the stack
    runs in ended (a Slurm job: its one line, not the exit it caused)."""
    stack = context.host_of(service)
    allocation_ended = _allocation(context)
    where = f" (host {stack.name})" if context.plan.is_multi_host else ""
    first_restarts: list[int] = []  # its count at the first look: a stack left running has some

    def restarted(state: ServiceState | None) -> bool:
        return state is not None and bool(first_restarts) and state.restarts > first_restarts[0]

    def assert_alive() -> None:
        context.raise_if_cancelled()
        allocation_ended(False)
        state = _state_of(stack, service, max_age_s=_ALIVE_EVERY_S)
        if state is None or state.exited or restarted(state):
            state = _state_of(stack, service, max_age_s=0.0)  # bad news is confirmed fresh
            allocation_ended(True)
        if state is not None and not first_restarts:
            first_restarts.append(state.restarts)
        if state is not None and not state.exited and not restarted(state):
            return
        if state is not None and not state.exited:
            count = state.restarts - first_restarts[0]
            how = (
                f"was restarted by its policy ({state.last_exit or 'it exited'}) while we "
                f"waited for it ({count} restart{'s' if count > 1 else ''} in the wait)"
            )
        else:
            how = f"exited (code {state.exit_code if state else None}) while we waited for it"
        tail = stack.runtime.logs(service, tail=_LOG_TAIL)
        raise StackError(
            f"{service}{where} {how}; last log lines:\n{tail}",
            hint=f"fix the cause (stack kept; python -m generator logs "
            f"{context.plan.stack} {service})",
        )

    return assert_alive


def wait_healthy(host: str, names: list[str]) -> Callable[[RunContext], str]:
    """Docker's own health state of each service (its check runs inside the container)."""

    def wait(context: RunContext) -> str:
        stack = context.hosts[host]
        deadline_s = SIDECAR_DEADLINE_S * context.options.wait_scale
        started = time.monotonic()
        pending = set(names)
        alive = {name: _alive(context, name) for name in names}
        while pending:
            for name in sorted(pending):
                alive[name]()
                state = _state_of(stack, name, max_age_s=_HEALTH_POLL_S)
                if state is not None and state.health == "healthy":
                    pending.discard(name)
            if pending and time.monotonic() - started > deadline_s:
                raise StackError(
                    f"{', '.join(sorted(pending))} not healthy after {deadline_s:.0f} s",
                    hint=f"python -m generator logs {context.plan.stack} {min(pending)}",
                )
            time.sleep(_HEALTH_POLL_S if pending else 0)
        return f"{len(names)} healthy in {time.monotonic() - started:.0f} s"

    return wait


def wait_observed(host: str, names: list[str]) -> Callable[[RunContext], str]:
    """observe's services healthy, then every planned target scraped once by Prometheus: it
    lists its static targets only seconds after it is ready, and an `observe` or a bench
    right after `up` would otherwise find none."""
    healthy = wait_healthy(host, names)

    def wait(context: RunContext) -> str:
        said = healthy(context)
        observe = context.plan.observe
        assert observe is not None  # the graph adds this task only with observe on
        deadline_s = (3 * observe.scrape_interval_s + _FIRST_SCRAPE_S) * context.options.wait_scale
        started = time.monotonic()
        try:
            unscraped = unscraped_targets(context.plan)
        except StackError:
            # Healthy by its own check, yet silent here: on another host's loopback
            # (observe.publish off) it is not reachable from this machine. Anywhere else
            # that silence is a fault.
            if "//127.0.0.1:" not in prometheus_url(context.plan):
                raise
            return f"{said}; Prometheus listens on {observe.host}'s loopback: scrapes not awaited"
        while unscraped:
            if time.monotonic() - started > deadline_s:
                raise StackError(
                    f"Prometheus has not scraped {', '.join(unscraped)} after {deadline_s:.0f} s",
                    hint=f"python -m generator logs {context.plan.stack} prometheus",
                )
            time.sleep(_HEALTH_POLL_S)
            unscraped = unscraped_targets(context.plan)
        return f"{said}; every target scraped in {time.monotonic() - started:.0f} s"

    return wait


def wait_engine(engine: EnginePlan) -> Callable[[RunContext], str]:
    def wait(context: RunContext) -> str:
        seconds = wait_until_ready(
            engine.name,
            engine_checks(context.plan, engine),
            deadline_s=engine_deadline_s(context.plan) * context.options.wait_scale,
            assert_alive=_alive(context, engine.name),
            progress=context.progress,
        )
        return f"ready in {seconds:.0f} s"

    return wait


def start_router(context: RunContext) -> str:
    context.router_host.runtime.up([context.plan.router.service])
    return context.plan.router.kind.value


def wait_router(context: RunContext) -> str:
    service = context.plan.router.service
    seconds = wait_until_ready(
        service,
        router_checks(context.plan),
        deadline_s=ROUTER_DEADLINE_S * context.options.wait_scale,
        assert_alive=_alive(context, service),
        progress=context.progress,
    )
    routed_request(context.plan)
    return f"healthy in {seconds:.0f} s, routed request OK"
