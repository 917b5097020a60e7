"""The task graph `up` runs, per host of the stack, in dependency order:

render -> preflight (every host's engine answers) -> wheels -> build-engines || build-router
  -> ship@<host> (images to each host's own engine, where that is not this machine's)
  -> [start-lmcache@<host> -> wait-lmcache@<host>] (the plan's sidecars: nixl-mp's servers and
     the P2P coordinator, which compose starts first)
  -> start-engines@<host> -> wait-<engine> (all in parallel)
  -> start-router -> wait-router -> smoke -> [bench] -> [down]

Single-host stacks drop the ``@<host>`` suffixes. Each task is declared once, with its limit.
What comes between preflight and the first start is the runtime's (its driver, under
generator/workflow/runtimes/): compose's wheels, builds and shipping above; the process
runtime's ``prepare-env`` (the services' Pythons made or found, the synthetic model).
"""

from __future__ import annotations

from collections.abc import Sequence

from generator.plan import EnginePlan, Plan
from generator.plan.observe import OTEL_SERVICE
from generator.plan.start_order import gpus_started_alone
from generator.workflow.builder import MINUTE, GraphBuilder
from generator.workflow.context import RunContext, RunOptions
from generator.workflow.graph import Graph
from generator.workflow.runtimes import RuntimeDriver, runtime_driver
from generator.workflow.steps import prepare, services, verdict
from generator.workflow.task import Task

__all__ = ["build_graph", "default_selection", "start_waves"]

_START_LIMIT_S = 10 * MINUTE


def build_graph(plan: Plan, options: RunOptions | None = None) -> Graph:
    g = GraphBuilder(plan, options or RunOptions())
    driver = runtime_driver(plan.runtime)
    render = g.add("render", prepare.render_files, "write compose/ and images/", MINUTE)
    preflight = g.add(
        "preflight",
        driver.preflight,
        "what each host's runtime needs answers (compose: its Docker engine), then doctor's "
        "cheap checks (ports, GPUs, shm, disk) where they can run",
        5 * MINUTE,
        render,
    )
    engines, router = driver.prepare(g, preflight)
    waits = [w for host in plan.hosts for w in _engine_part(g, driver, host.name, engines, router)]
    _router_part(g, driver, waits, router)
    return Graph(g.tasks)


def _engine_part(
    g: GraphBuilder, driver: RuntimeDriver, host: str, engines_built: Task, router_built: Task
) -> list[Task]:
    engines = g.plan.engines_on(host)
    # Nodes of engines over several hosts start with the first wave; their leader's wait
    # covers them (it serves only once every node joined).
    followers = [f.name for f in g.plan.followers if f.host == host]
    if not engines and not followers:
        return []
    ready = driver.deliver(g, host, [engines_built, router_built]) or engines_built
    ready = _sidecar_part(g, host, ready)
    limit = g.wait_limit_s(services.engine_deadline_s(g.plan))
    waits: list[Task] = []
    after: list[Task] = [ready]
    for number, wave in enumerate(start_waves(g.plan, engines) or [[]]):
        names = [*(followers if number == 0 else []), *(engine.name for engine in wave)]
        started = g.add(
            g.on("start-engines" if number == 0 else f"start-engines-{number + 1}", host),
            services.start_services(host, names),
            f"{host}: start {', '.join(names)}",
            _START_LIMIT_S,
            *after,
        )
        wave_waits = [
            g.add(
                f"wait-{engine.name}",
                services.wait_engine(engine),
                f"{engine.name}: /health, then /v1/models lists the model",
                limit,
                started,
            )
            for engine in wave
        ]
        waits += wave_waits
        after = wave_waits
    return waits


def start_waves(plan: Plan, engines: Sequence[EnginePlan]) -> list[list[EnginePlan]]:
    """Engines that share a GPU while one of them measures its KV cache start one after
    another, each once the one before it is ready (``gpus_started_alone``: vLLM counts a
    neighbour loading meanwhile as its own memory). Engines on GPUs of their own, or sharing
    one with every KV cache's size given, all start in the first wave."""
    alone = gpus_started_alone(plan, engines)
    waves: list[list[EnginePlan]] = []
    wave_of_gpu: dict[int, int] = {}
    for engine in engines:
        serialized = [gpu for gpu in engine.gpus if gpu in alone]
        number = max((wave_of_gpu[gpu] + 1 for gpu in serialized if gpu in wave_of_gpu), default=0)
        for gpu in serialized:
            wave_of_gpu[gpu] = number
        if number == len(waves):
            waves.append([])
        waves[number].append(engine)
    return waves


def _sidecar_part(g: GraphBuilder, host: str, ready: Task) -> Task:
    """nixl-mp: one `lmcache server` per engine, healthy before the engines start."""
    sidecars = services.sidecars_on(g.plan, host)
    if not sidecars:
        return ready
    kind = "-".join(sorted({s.role for s in g.plan.sidecars if s.service in sidecars}))
    start = g.add(
        g.on(f"start-{kind}", host),
        services.start_services(host, sidecars),
        f"{host}: start {', '.join(sidecars)}",
        _START_LIMIT_S,
        ready,
    )
    return g.add(
        g.on(f"wait-{kind}", host),
        services.wait_healthy(host, sidecars),
        f"{host}: their own health checks (Docker's health state)",
        g.wait_limit_s(services.SIDECAR_DEADLINE_S),
        start,
    )


def _router_part(
    g: GraphBuilder, driver: RuntimeDriver, waits: list[Task], router_built: Task
) -> None:
    host = g.plan.router.host
    shipped = driver.deliver(g, host, [router_built]) if not g.plan.engines_on(host) else None
    start = g.add(
        "start-router",
        services.start_router,
        "start the router",
        _START_LIMIT_S,
        *waits,
        router_built,
        shipped,
    )
    wait = g.add(
        "wait-router",
        services.wait_router,
        "router /health, then one routed request",
        g.wait_limit_s(services.ROUTER_DEADLINE_S),
        start,
    )
    smoke = g.add(
        "smoke",
        verdict.smoke,
        "completion + streaming chat; verdict from the engines' own counters",
        15 * MINUTE,
        wait,
    )
    observed = _observe_part(g, wait)
    bench = g.add(
        "bench",
        verdict.bench,
        "vLLM's serving benchmark through the router (optional)",
        120 * MINUTE,
        smoke,
        observed,
    )
    g.add(
        "down",
        verdict.down,
        "remove the stack on every host (--down or --teardown-on-failure)",
        10 * MINUTE,
        bench,
        teardown=True,
    )


def _observe_part(g: GraphBuilder, after: Task) -> Task | None:
    """observe's services once every part they scrape is up (a bench then runs observed)."""
    observe = g.plan.observe
    if observe is None:
        return None
    host, names = observe.host, list(observe.services)
    start = g.add(
        g.on("start-observe", host),
        services.start_services(host, names),
        f"{host}: start {', '.join(names)}",
        _START_LIMIT_S,
        after,
    )
    # The OTLP collector's upstream image has no shell, so no health check: running is all.
    checked = [name for name in names if name != OTEL_SERVICE]
    return g.add(
        g.on("wait-observe", host),
        services.wait_observed(host, checked),
        f"{host}: {', '.join(checked)} healthy, every target scraped once",
        g.wait_limit_s(services.SIDECAR_DEADLINE_S),
        start,
    )


def default_selection(graph: Graph, context: RunContext, start_from: str | None) -> set[str]:
    names = set(graph.order)
    if start_from is not None:
        graph.task(start_from)  # a clear error for an unknown name
        names = graph.downstream_of(start_from)
    if not context.options.bench:
        names.discard("bench")
    if not (context.options.down or context.options.teardown_on_failure):
        names.discard("down")
    return names
