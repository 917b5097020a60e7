"""The task graph that brings a stack up, and the functions of its tasks.

render -> preflight -> wheels -> build-engines || build-router -> start-lmcache
  -> wait-lmcache -> start-engines -> wait-<engine> (in parallel) -> start-router
  -> wait-router -> smoke -> [bench] -> [down]
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from generator.docker import ServiceState
from generator.doctor.report import Verdict
from generator.errors import StackError
from generator.plan import EnginePlan, Plan
from generator.probes import run_smoke, wait_until_ready
from generator.probes.readiness import engine_checks, routed_request, router_checks, sidecar_checks
from generator.render.writer import write_rendered
from generator.spec import Profile
from generator.workflow.context import RunContext
from generator.workflow.graph import Graph
from generator.workflow.task import SkipTask, Task

__all__ = ["build_graph", "default_selection"]

_ENGINE_DEADLINE_S = {Profile.GPU: 1800.0, Profile.CPU: 300.0}
_LMCACHE_DEADLINE_S = 120.0
_ROUTER_DEADLINE_S = 120.0
_LOG_TAIL = 40
_ALIVE_EVERY_S = 4.0  # how stale a "still running?" answer may be while waiting


def build_graph(plan: Plan) -> Graph:
    t = _tasks()
    waits = [_engine_wait(engine) for engine in plan.engines]
    t["render"] >> t["preflight"] >> t["wheels"] >> [t["build-engines"], t["build-router"]]
    chain = [t["render"], t["preflight"], t["wheels"], t["build-engines"], t["build-router"]]
    if plan.sidecars:  # services the engines need first (nixl-mp: the LMCache servers)
        t["build-engines"] >> t["start-lmcache"] >> t["wait-lmcache"] >> t["start-engines"]
        chain += [t["start-lmcache"], t["wait-lmcache"]]
    else:
        t["build-engines"] >> t["start-engines"]
    t["start-engines"] >> waits
    [*waits, t["build-router"]] >> t["start-router"]
    t["start-router"] >> t["wait-router"] >> t["smoke"] >> t["bench"] >> t["down"]
    tail = ["start-router", "wait-router", "smoke", "bench", "down"]
    return Graph([*chain, t["start-engines"], *waits, *(t[name] for name in tail)])


def _tasks() -> dict[str, Task]:
    tasks = [
        Task("render", render_files, "write compose/ and images/ for this stack"),
        Task("preflight", check_host, "doctor's cheap checks: Docker, GPUs, ports, shm, disk"),
        Task("wheels", fetch_wheels, "download the wheels the images install (wheelhouse stacks)"),
        Task("build-engines", build_engine_images, "build the prefill/decode/lmcache images"),
        Task("build-router", build_router_image, "build the router image"),
        Task("start-lmcache", start_lmcache_fn, "start one `lmcache server` per engine"),
        Task("wait-lmcache", wait_lmcache_fn, "LMCache /healthcheck of every server"),
        Task("start-engines", start_engines_fn, "start every prefill and decode engine"),
        Task("start-router", start_router_fn, "start the router"),
        Task("wait-router", wait_router_fn, "router /health, then one routed request"),
        Task("smoke", smoke_fn, "completion + streaming chat; verdict from decode metrics"),
        Task("bench", bench_fn, "vLLM's serving benchmark through the router (optional)"),
        Task("down", down_fn, "remove the stack (--down or --teardown-on-failure)", teardown=True),
    ]
    return {task.name: task for task in tasks}


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


def _engine_wait(engine: EnginePlan) -> Task:
    def wait(context: RunContext) -> str:
        return wait_engine(context, engine)

    return Task(
        f"wait-{engine.name}", wait, f"{engine.name}: /health, then /v1/models lists the model"
    )


def render_files(context: RunContext) -> str:
    written = write_rendered(context.rendered, context.workspace.root)
    return f"{len(written)} files"


def check_host(context: RunContext) -> str:
    """doctor's cheap checks of this host; the first blocking ones fail the run."""
    from generator.docker import ensure_image
    from generator.doctor import check_host as doctor_checks

    for image in context.rendered.images:
        ensure_image(image.from_image)
    running = frozenset(s.service for s in context.stack.ps() if s.status == "running")
    _, report = doctor_checks(
        context.plan,
        context.rendered,
        context.workspace,
        host=context.project.host,
        running=running,
    )
    context.record.add_result("preflight", report.as_dict())
    for row in report.rows:
        if row.verdict is Verdict.WARN:
            context.progress(f"[yellow]warning[/yellow] {row.check}: {row.found} ({row.fix})")
    blocking = [row for row in report.rows if row.blocking]
    if blocking:
        lines = "\n".join(
            f"  {row.check}: {row.found} (expected {row.expected})" for row in blocking
        )
        raise StackError(
            f"{len(blocking)} preflight check(s) failed on this host:\n{lines}",
            hint=blocking[0].fix + f" (python -m generator doctor {context.plan.stack} shows all)",
        )
    counts = f"{len(report.rows)} checks passed"
    return counts + (f", {len(running)} services already running" if running else "")


def fetch_wheels(context: RunContext) -> str:
    from generator.wheelhouse import fill_wheelhouse

    last = [time.monotonic()]

    def on_line(line: str) -> None:
        if time.monotonic() - last[0] > 15:
            last[0] = time.monotonic()
            context.progress(f"wheels: {line[:100]}")

    return fill_wheelhouse(context.plan, context.workspace, on_line)


def _build(context: RunContext, services: list[str], log_name: str) -> str:
    log_path = context.record.logs_dir / log_name
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    last = [started]
    with log_path.open("w", encoding="utf-8") as log:

        def on_line(line: str) -> None:
            log.write(line + "\n")
            if time.monotonic() - last[0] > 20:
                last[0] = time.monotonic()
                context.progress(f"building {', '.join(services)}: {line[:100]}")

        context.stack.build(services, on_line)
    return f"{time.monotonic() - started:.0f} s, log {log_path.relative_to(context.run_dir)}"


def _skip_if_present(context: RunContext, services: list[str]) -> None:
    """Tags are content-addressed (a hash of the Dockerfile and what it copies): a tag that
    exists is the image these inputs build, so there is nothing to do (--rebuild forces it)."""
    from generator.docker import image_exists

    tags = [context.project.document["services"][name]["image"] for name in services]
    if not context.options.rebuild and all(image_exists(tag) for tag in tags):
        raise SkipTask(f"present: {', '.join(tags)}")


def build_engine_images(context: RunContext) -> str:
    # One service per image is enough: compose builds by service, the tag is shared. The
    # images share their engine base stages, which the build cache makes once.
    wanted = {"prefill", "decode", "lmcache"}
    services, seen = [], set()
    for name, service in context.project.document["services"].items():
        role = service.get("labels", {}).get("org.xpyd.role")
        if role in wanted and service["image"] not in seen:
            services.append(name)
            seen.add(service["image"])
    _skip_if_present(context, services)
    return _build(context, services, "build-engines.log")


def build_router_image(context: RunContext) -> str:
    _skip_if_present(context, [context.plan.router.service])
    return _build(context, [context.plan.router.service], "build-router.log")


def _lmcache_services(plan: Plan) -> list[str]:
    return [sidecar.service for sidecar in plan.sidecars]


def start_lmcache_fn(context: RunContext) -> str:
    services = _lmcache_services(context.plan)
    context.stack.up(services)
    return ", ".join(services)


def _state_of(context: RunContext, service: str, *, max_age_s: float) -> ServiceState | None:
    return next((s for s in context.stack.ps(max_age_s=max_age_s) if s.service == service), None)


def _alive(context: RunContext, service: str) -> Callable[[], None]:
    def assert_alive() -> None:
        state = _state_of(context, service, max_age_s=_ALIVE_EVERY_S)
        if state is None or state.exited:
            state = _state_of(context, service, max_age_s=0.0)  # bad news is confirmed fresh
        if state is None or state.exited:
            code = state.exit_code if state else None
            tail = context.stack.logs(service, tail=_LOG_TAIL)
            stack = context.plan.stack
            raise StackError(
                f"{service} exited (code {code}) while we waited for it; last log lines:\n{tail}",
                hint=f"fix the cause (stack kept; python -m generator logs {stack} {service})",
            )

    return assert_alive


def wait_lmcache_fn(context: RunContext) -> str:
    waited = []
    for sidecar in context.plan.sidecars:
        seconds = wait_until_ready(
            sidecar.service,
            sidecar_checks(sidecar),
            deadline_s=_LMCACHE_DEADLINE_S * context.options.wait_scale,
            assert_alive=_alive(context, sidecar.service),
            progress=context.progress,
        )
        waited.append(f"{sidecar.service} {seconds:.0f} s")
    return ", ".join(waited)


def start_engines_fn(context: RunContext) -> str:
    names = [engine.name for engine in context.plan.engines]
    context.stack.up(names)
    return ", ".join(names)


def wait_engine(context: RunContext, engine: EnginePlan) -> str:
    seconds = wait_until_ready(
        engine.name,
        engine_checks(context.plan, engine),
        deadline_s=_ENGINE_DEADLINE_S[context.plan.profile] * context.options.wait_scale,
        assert_alive=_alive(context, engine.name),
        progress=context.progress,
    )
    return f"ready in {seconds:.0f} s"


def start_router_fn(context: RunContext) -> str:
    context.stack.up([context.plan.router.service])
    return context.plan.router.kind.value


def wait_router_fn(context: RunContext) -> str:
    service = context.plan.router.service
    seconds = wait_until_ready(
        service,
        router_checks(context.plan),
        deadline_s=_ROUTER_DEADLINE_S * context.options.wait_scale,
        assert_alive=_alive(context, service),
        progress=context.progress,
    )
    routed_request(context.plan)
    return f"healthy in {seconds:.0f} s, routed request OK"


def smoke_fn(context: RunContext) -> str:
    def logs(services: list[str]) -> str:
        return "\n".join(context.stack.logs(service) for service in services)

    result = run_smoke(context.plan, nonce=context.record.run_id, logs=logs)
    context.record.add_result("smoke", result.as_dict())
    context.verdict = result
    if not result.passed:
        failed = [row.check for row in result.rows if row.passed is False]
        raise StackError(
            "smoke verdict FAILED: "
            + "; ".join(failed)
            + " (P/D answered, but the KV path is not proven)",
            hint="read the verdict table above and the decode logs (KV Transfer metrics lines)",
        )
    return f"verdict PASS, {result.prompt_tokens}-token prompt"


def bench_fn(context: RunContext) -> str:
    from generator.workflow.bench import run_bench

    summary = run_bench(context)
    context.record.add_result("bench", summary)
    return json.dumps(summary)[:120]


def down_fn(context: RunContext) -> str:
    if not context.options.down and not context.failed():
        raise SkipTask("nothing failed; stack kept (use --down to remove it)")
    context.stack.down()
    return "containers and networks removed"
