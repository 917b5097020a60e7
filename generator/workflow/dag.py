"""The task graph `up` runs, per host of the stack, in dependency order:

render -> preflight (every host's engine answers) -> wheels -> build-engines || build-router
  -> ship@<host> (images to each host's own engine)
  -> [start-sidecars@<host> -> wait-sidecars@<host>] (nixl-mp's LMCache servers)
  -> start-engines@<host>
  -> wait-<engine> (all in parallel) -> start-router -> wait-router -> smoke -> [bench] -> [down]

Single-host stacks drop the ``@<host>`` suffixes. Each task is declared once, with its limit.
"""

from __future__ import annotations

from generator.plan import Plan
from generator.spec import Profile
from generator.workflow.context import RunContext, RunOptions
from generator.workflow.graph import Graph
from generator.workflow.steps import prepare, services, verdict
from generator.workflow.task import Task

__all__ = ["build_graph", "default_selection"]

_MINUTE = 60.0
_BUILD_LIMIT_S = {Profile.GPU: 120 * _MINUTE, Profile.CPU: 45 * _MINUTE}
_SHIP_LIMIT_S = 60 * _MINUTE  # a GPU engine image is ~20 GB over ssh
_START_LIMIT_S = 10 * _MINUTE
_SLACK_S = _MINUTE  # a wait's task outlives the wait's own deadline by this much


class _Builder:
    """Tasks added once each, wired with ``>>`` as they are added."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.tasks: list[Task] = []

    def add(self, task: Task, *after: Task | None) -> Task:
        for upstream in after:
            if upstream is not None:
                upstream >> task
        self.tasks.append(task)
        return task

    def name(self, base: str, host: str) -> str:
        return f"{base}@{host}" if self.plan.is_multi_host else base


def build_graph(plan: Plan, options: RunOptions | None = None) -> Graph:
    options = options or RunOptions()
    g = _Builder(plan)
    render = g.add(
        Task("render", prepare.render_files, "write compose/ and images/", timeout_s=120)
    )
    preflight = g.add(
        Task(
            "preflight",
            prepare.check_hosts,
            "each host's Docker engine, then doctor's cheap "
            "checks (ports, GPUs, shm, disk) where they can run",
            timeout_s=5 * _MINUTE,
        ),
        render,
    )
    wheels = g.add(
        Task(
            "wheels",
            prepare.fetch_wheels,
            "download the wheels the images install",
            timeout_s=30 * _MINUTE,
        ),
        preflight,
    )
    build_limit = _BUILD_LIMIT_S[plan.profile]
    engines_built = g.add(
        Task(
            "build-engines",
            prepare.build_engine_images,
            "build the prefill/decode/lmcache images (on this machine's engine)",
            timeout_s=build_limit,
        ),
        wheels,
    )
    router_built = g.add(
        Task(
            "build-router",
            prepare.build_router_image,
            "build the router image",
            timeout_s=build_limit,
        ),
        wheels,
    )
    waits = [
        _engine_part(g, options, host.name, engines_built, router_built) for host in plan.hosts
    ]
    _router_part(g, options, [w for host_waits in waits for w in host_waits], router_built)
    return Graph(g.tasks)


def _ship(g: _Builder, host: str, built: list[Task]) -> Task | None:
    """Images to a host whose engine is not this machine's (no registry: save | load)."""
    if not g.plan.host(host).services or not prepare.needs_shipping(g.plan, host):
        return None
    task = Task(
        g.name("ship", host),
        prepare.ship_images_to(host),
        f"{host}: copy the images its services use to its Docker engine",
        timeout_s=_SHIP_LIMIT_S,
    )
    return g.add(task, *built)


def _engine_part(
    g: _Builder, options: RunOptions, host: str, engines_built: Task, router_built: Task
) -> list[Task]:
    engines = g.plan.engines_on(host)
    if not engines:
        return []
    ready: Task = _ship(g, host, [engines_built, router_built]) or engines_built
    sidecars = services.sidecars_on(g.plan, host)
    if sidecars:  # nixl-mp: one `lmcache server` per engine, healthy before the engines
        kind = "-".join(sorted({s.role for s in g.plan.sidecars if s.service in sidecars}))
        start = Task(
            g.name(f"start-{kind}", host),
            services.start_services(host, sidecars),
            f"{host}: start {', '.join(sidecars)}",
            timeout_s=_START_LIMIT_S,
        )
        limit = services.SIDECAR_DEADLINE_S * options.wait_scale + _SLACK_S
        wait = Task(
            g.name(f"wait-{kind}", host),
            services.wait_healthy(host, sidecars),
            f"{host}: their own health checks (Docker's health state)",
            timeout_s=limit,
        )
        ready = g.add(wait, g.add(start, ready))
    names = [engine.name for engine in engines]
    start_engines = g.add(
        Task(
            g.name("start-engines", host),
            services.start_services(host, names),
            f"{host}: start {', '.join(names)}",
            timeout_s=_START_LIMIT_S,
        ),
        ready,
    )
    limit = services.engine_deadline_s(g.plan) * options.wait_scale + _SLACK_S
    return [
        g.add(
            Task(
                f"wait-{engine.name}",
                services.wait_engine(engine),
                f"{engine.name}: /health, then /v1/models lists the model",
                timeout_s=limit,
            ),
            start_engines,
        )
        for engine in engines
    ]


def _router_part(g: _Builder, options: RunOptions, waits: list[Task], router_built: Task) -> None:
    host = g.plan.router.host
    built = _ship(g, host, [router_built]) if not g.plan.engines_on(host) else None
    start = g.add(
        Task("start-router", services.start_router, "start the router", timeout_s=_START_LIMIT_S),
        *waits,
        router_built,
        built,
    )
    limit = services.ROUTER_DEADLINE_S * options.wait_scale + _SLACK_S
    wait = g.add(
        Task(
            "wait-router",
            services.wait_router,
            "router /health, then one routed request",
            timeout_s=limit,
        ),
        start,
    )
    smoke = g.add(
        Task(
            "smoke",
            verdict.smoke,
            "completion + streaming chat; verdict from the engines' own counters",
            timeout_s=15 * _MINUTE,
        ),
        wait,
    )
    bench = g.add(
        Task(
            "bench",
            verdict.bench,
            "vLLM's serving benchmark through the router (optional)",
            timeout_s=120 * _MINUTE,
        ),
        smoke,
    )
    g.add(
        Task(
            "down",
            verdict.down,
            "remove the stack on every host (--down or --teardown-on-failure)",
            teardown=True,
            timeout_s=10 * _MINUTE,
        ),
        bench,
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
