"""The task graph `up` runs, per host of the stack, in dependency order:

render -> preflight (every host's engine answers) -> wheels -> build-engines || build-router
  -> ship@<host> (images to each host's own engine, where that is not this machine's)
  -> [start-lmcache@<host> -> wait-lmcache@<host>] (the plan's sidecars: nixl-mp's servers and
     the P2P coordinator, which compose starts first)
  -> start-engines@<host> -> wait-<engine> (all in parallel)
  -> start-router -> wait-router -> smoke -> [bench] -> [down]

Single-host stacks drop the ``@<host>`` suffixes. Each task is declared once, with its limit.
Under the process runtime, ``prepare-env`` (the services' Pythons answer, the synthetic model
is made) takes the place of wheels, builds and shipping.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from generator.plan import EnginePlan, Plan
from generator.plan.observe import OTEL_SERVICE
from generator.spec import Profile, Runtime
from generator.workflow.context import RunContext, RunOptions
from generator.workflow.graph import Graph
from generator.workflow.steps import prepare, services, verdict
from generator.workflow.task import Task

__all__ = ["build_graph", "default_selection", "start_waves"]

_MINUTE = 60.0
_BUILD_LIMIT_S = {Profile.GPU: 120 * _MINUTE, Profile.CPU: 45 * _MINUTE}
_SHIP_LIMIT_S = 60 * _MINUTE  # a GPU engine image is ~20 GB over ssh
_START_LIMIT_S = 10 * _MINUTE
_SLACK_S = _MINUTE  # a wait's task outlives the wait's own deadline by this much


class _Builder:
    """Tasks made and wired (``>>``) where they are declared, each once."""

    def __init__(self, plan: Plan, options: RunOptions) -> None:
        self.plan, self.options = plan, options
        self.tasks: list[Task] = []

    def add(
        self,
        name: str,
        function: Callable[[RunContext], str | None],
        description: str,
        limit_s: float,
        *after: Task | None,
        teardown: bool = False,
    ) -> Task:
        task = Task(name, function, description, timeout_s=limit_s, teardown=teardown)
        for upstream in after:
            if upstream is not None:
                upstream >> task
        self.tasks.append(task)
        return task

    def on(self, base: str, host: str) -> str:
        return f"{base}@{host}" if self.plan.is_multi_host else base

    def wait_limit_s(self, deadline_s: float) -> float:
        return deadline_s * self.options.wait_scale + _SLACK_S


def build_graph(plan: Plan, options: RunOptions | None = None) -> Graph:
    g = _Builder(plan, options or RunOptions())
    render = g.add("render", prepare.render_files, "write compose/ and images/", _MINUTE)
    preflight = g.add(
        "preflight",
        prepare.check_hosts,
        "each host's Docker engine answers, then doctor's "
        "cheap checks (ports, GPUs, shm, disk) where they can run",
        5 * _MINUTE,
        render,
    )
    if plan.runtime is Runtime.PROCESS:
        # Nothing to build or ship: the services run from the process runtime's Pythons.
        ready = g.add(
            "prepare-env",
            prepare.check_pythons,
            "the Pythons the services run with, made where missing (what env does), answer; the "
            "synthetic model, made once",
            30 * _MINUTE,
            preflight,
        )
        waits = [w for host in plan.hosts for w in _engine_part(g, host.name, ready, ready)]
        _router_part(g, waits, ready)
        return Graph(g.tasks)
    wheels = g.add(
        "wheels",
        prepare.fetch_wheels,
        "download the wheels the images install",
        30 * _MINUTE,
        preflight,
    )
    limit = _BUILD_LIMIT_S[plan.profile]
    engines = g.add(
        "build-engines",
        prepare.build_engine_images,
        "build the prefill/decode/lmcache images on this machine's engine",
        limit,
        wheels,
    )
    built_here = "the router image" + (" and Prometheus's" if _builds_prometheus(plan) else "")
    router = g.add("build-router", prepare.build_router_image, f"build {built_here}", limit, wheels)
    waits = [w for host in plan.hosts for w in _engine_part(g, host.name, engines, router)]
    _router_part(g, waits, router)
    return Graph(g.tasks)


def _builds_prometheus(plan: Plan) -> bool:
    return plan.observe is not None and plan.profile is Profile.CPU


def _ship(g: _Builder, host: str, built: list[Task]) -> Task | None:
    """Images to a host whose engine is not this machine's (no registry: save | load)."""
    if not g.plan.host(host).services or not prepare.needs_shipping(g.plan, host):
        return None
    return g.add(
        g.on("ship", host),
        prepare.ship_images_to(host),
        f"{host}: copy the images its services use to its Docker engine",
        _SHIP_LIMIT_S,
        *built,
    )


def _engine_part(g: _Builder, host: str, engines_built: Task, router_built: Task) -> list[Task]:
    engines = g.plan.engines_on(host)
    if not engines:
        return []
    ready = _ship(g, host, [engines_built, router_built]) or engines_built
    ready = _sidecar_part(g, host, ready)
    limit = g.wait_limit_s(services.engine_deadline_s(g.plan))
    waits: list[Task] = []
    after: list[Task] = [ready]
    for number, wave in enumerate(start_waves(engines)):
        names = [engine.name for engine in wave]
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


def start_waves(engines: Sequence[EnginePlan]) -> list[list[EnginePlan]]:
    """Engines that share a GPU (gpu.share) start one after another, each once the one before
    it is ready: vLLM sizes its KV cache from the GPU memory it sees used while it profiles,
    so a neighbour loading at the same time is counted as its own (measured on one H200: the
    second of two 0.4 engines got 0.92 GiB of KV cache and refused max_model_len). Engines on
    GPUs of their own all start in the first wave."""
    waves: list[list[EnginePlan]] = []
    wave_of_gpu: dict[int, int] = {}
    for engine in engines:
        number = max((wave_of_gpu[gpu] + 1 for gpu in engine.gpus if gpu in wave_of_gpu), default=0)
        for gpu in engine.gpus:
            wave_of_gpu[gpu] = number
        if number == len(waves):
            waves.append([])
        waves[number].append(engine)
    return waves


def _sidecar_part(g: _Builder, host: str, ready: Task) -> Task:
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


def _router_part(g: _Builder, waits: list[Task], router_built: Task) -> None:
    host = g.plan.router.host
    shipped = _ship(g, host, [router_built]) if not g.plan.engines_on(host) else None
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
        15 * _MINUTE,
        wait,
    )
    observed = _observe_part(g, wait)
    bench = g.add(
        "bench",
        verdict.bench,
        "vLLM's serving benchmark through the router (optional)",
        120 * _MINUTE,
        smoke,
        observed,
    )
    g.add(
        "down",
        verdict.down,
        "remove the stack on every host (--down or --teardown-on-failure)",
        10 * _MINUTE,
        bench,
        teardown=True,
    )


def _observe_part(g: _Builder, after: Task) -> Task | None:
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
        services.wait_healthy(host, checked),
        f"{host}: {', '.join(checked)} healthy",
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
