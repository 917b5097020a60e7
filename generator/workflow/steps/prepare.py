"""Tasks before anything starts: render, preflight of every host, wheels, image builds on
this machine's engine, and shipping images to the hosts' own engines."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from generator.errors import StackError
from generator.owned import append_descriptor, remove_file
from generator.plan import Plan
from generator.render.writer import write_rendered
from generator.runtimes.process import ProcessStack, Pythons
from generator.services.model import ImageRef
from generator.spec import Runtime
from generator.topologies import topology_of
from generator.workflow.context import RunContext
from generator.workflow.engines import host_endpoint
from generator.workflow.hosts import HostStack
from generator.workflow.report import EventLevel
from generator.workflow.task import SkipTask

__all__ = [
    "build_engine_images",
    "build_router_image",
    "check_hosts",
    "check_pythons",
    "fetch_wheels",
    "needs_shipping",
    "render_files",
    "ship_images_to",
]

_REACH_TIMEOUT_S = 20.0
_LINE_EVERY_S = 20.0  # how often a long build or copy prints a progress line


def render_files(context: RunContext) -> str:
    written = write_rendered(context.rendered, context.workspace.root)
    return f"{len(written)} files"


def check_hosts(context: RunContext) -> str:
    """Every host's engine answers (nothing starts otherwise), then doctor's cheap checks on
    the hosts this machine is (they read this machine's ports, GPUs and /dev/shm). The process
    runtime needs no engine: only the checks."""
    from generator.docker import check_reachable, ensure_image

    if context.plan.runtime is Runtime.PROCESS:
        stack = next(iter(context.hosts.values()))
        return "process runtime; " + _doctor_checks(context, stack)
    for stack in context.hosts.values():
        check_reachable(stack.endpoint, timeout_s=_REACH_TIMEOUT_S)
    for image in context.rendered.images:
        ensure_image(image.from_image)
    checked = [_doctor_checks(context, stack) for stack in context.hosts.values() if stack.local]
    remote = [name for name, stack in context.hosts.items() if not stack.local]
    summary = f"{len(context.hosts)} engine(s) answer; " + ", ".join(checked)
    if remote:
        context.progress(
            f"hosts {', '.join(remote)}: run `python -m generator doctor "
            f"{context.plan.stack} --host NAME` on each for its host checks",
            EventLevel.WARN,
        )
    return summary


def _doctor_checks(context: RunContext, stack: HostStack) -> str:
    from generator.doctor import check_host as doctor_checks
    from generator.doctor.report import Verdict

    view, report = doctor_checks(
        context.plan,
        context.rendered,
        context.workspace,
        host=stack.name,
        states=stack.runtime.ps(),
    )
    context.record.add_result(f"preflight-{stack.name}", report.as_dict())
    for row in report.rows:
        if row.verdict is Verdict.WARN:
            context.progress(f"{row.check}: {row.found} ({row.fix})", EventLevel.WARN)
    blocking = [row for row in report.rows if row.blocking]
    if blocking:
        lines = "\n".join(f"  {r.check}: {r.found} (expected {r.expected})" for r in blocking)
        raise StackError(
            f"{len(blocking)} preflight check(s) failed on host {stack.name}:\n{lines}",
            hint=blocking[0].fix + f" (python -m generator doctor {context.plan.stack} shows all)",
        )
    running = view.running
    busy = f", {len(running)} services already running" if running else ""
    return f"{stack.name}: {len(report.rows)} checks passed{busy}"


def check_pythons(context: RunContext) -> str:
    """The process runtime's Pythons: the engines' imports vLLM, the router's runs the router;
    then the synthetic model, where the stack uses one (the image build makes it otherwise).
    Where the default Pythons (what `python -m generator env` makes) are missing or lack what
    this stack needs, they are made first: `up` under compose builds what it needs, so `up
    --runtime process` does too. A Python the spec names (process.python) is the user's: it is
    checked, never made."""
    from generator.envs import make_synthetic_model

    stack = next(iter(context.hosts.values()))
    pythons = stack.runtime.pythons if isinstance(stack.runtime, ProcessStack) else None
    assert pythons is not None  # the DAG adds this task under the process runtime only
    try:
        found = _probe_pythons(context, pythons)
    except StackError:
        if not _default_pythons(context, pythons):
            raise
        found = [_make_envs(context), *_probe_pythons(context, pythons)]
    if context.plan.model.source == "synthetic":
        found.append(
            make_synthetic_model(
                context.plan, context.workspace, pythons.engine, _every(context, "model")
            )
        )
    return "; ".join(found)


def _probe_pythons(context: RunContext, pythons: Pythons) -> list[str]:
    probe = _ENGINE_PROBE
    if topology_of(context.plan).needs_cpu_connector(context.plan.profile):
        probe = "import xpyd_lmcache_cpu; " + probe  # LMCache's CPU connector (env installs it)
    return [
        _answers(pythons.engine, probe, "the engines' Python"),
        _answers(pythons.router, _ROUTER_PROBE, "the router's Python"),
    ]


def _default_pythons(context: RunContext, pythons: Pythons) -> bool:
    from generator.envs import default_pythons

    return pythons == default_pythons(context.workspace, context.plan.profile)


def _make_envs(context: RunContext) -> str:
    from generator.envs import make_envs

    context.progress("making the stack's Pythons (what `python -m generator env` does)")
    made = make_envs(context.plan, context.workspace, _every(context, "env"))
    return f"made {made.engine.parent.parent.name} and {made.router.parent.parent.name}"


_ENGINE_PROBE = (
    "import vllm, sys; print(f'vllm {vllm.__version__}, Python {sys.version.split()[0]}')"
)
_ROUTER_PROBE = "import aiohttp, sys; print(f'router env, Python {sys.version.split()[0]}')"


def _answers(python: Path, probe: str, what: str) -> str:
    if not python.exists():
        raise StackError(
            f"{what} {python} does not exist",
            hint="make it: python -m generator env <stack> (or set process.python / "
            "process.router_python to a Python with the stack's lock)",
        )
    done = subprocess.run(
        [str(python), "-c", probe], capture_output=True, text=True, timeout=300, check=False
    )
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise StackError(
            f"{what} {python} cannot import what it runs:\n{tail}",
            hint="install the stack's lock into it: python -m generator env <stack>",
        )
    return done.stdout.strip()


def fetch_wheels(context: RunContext) -> str:
    from generator.wheelhouse import fill_wheelhouse

    return fill_wheelhouse(context.plan, context.workspace, _every(context, "wheels"))


def _every(context: RunContext, what: str) -> Callable[[str], None]:
    """A line callback for long output: stops a given-up task, prints a line now and then."""
    last = [time.monotonic()]

    def on_line(line: str) -> None:
        context.raise_if_cancelled()
        if time.monotonic() - last[0] > _LINE_EVERY_S:
            last[0] = time.monotonic()
            context.progress(f"{what}: {line[:100]}")

    return on_line


def _images_of(context: RunContext, roles: set[str]) -> dict[str, tuple[HostStack, str]]:
    """Each image tag of these roles, with one (host, service) whose build section makes it."""
    found: dict[str, tuple[HostStack, str]] = {}
    for stack in context.hosts.values():
        for service in stack.project.host_services.services:
            if service.role in roles and service.image.tag not in found:
                found[service.image.tag] = (stack, service.name)
    return found


def _build(context: RunContext, roles: set[str], log_name: str) -> str:
    """Builds run on this machine's engine, whatever host the services go to (then shipped):
    the build cache and the base images are here."""
    from generator.docker import image_exists

    images = _images_of(context, roles)
    if not context.options.rebuild and all(image_exists(tag) for tag in images):
        raise SkipTask(f"present: {', '.join(images)}")  # tags hash their inputs
    log_path = context.record.logs_dir / log_name
    remove_file(context.run_dir, log_path)  # written anew, never through a link
    descriptor = append_descriptor(context.run_dir, log_path)
    started = time.monotonic()
    progress = _every(context, f"building {', '.join(sorted(roles))}")
    with open(descriptor, "w", encoding="utf-8") as log:

        def on_line(line: str) -> None:
            log.write(line + "\n")
            progress(line)

        for stack in {id(s): s for s, _ in images.values()}.values():
            services = [name for s, name in images.values() if s is stack]
            assert stack.builder is not None  # compose only: the process runtime builds nothing
            stack.builder.build(services, on_line)
    return f"{time.monotonic() - started:.0f} s, log {log_path.relative_to(context.run_dir)}"


def build_engine_images(context: RunContext) -> str:
    # One service per image is enough: the tag is shared; the roles share their base stages,
    # which the build cache makes once.
    return _build(context, {"prefill", "decode", "lmcache"}, "build-engines.log")


def build_router_image(context: RunContext) -> str:
    # And observe's Prometheus on cpu (Debian's package): small, and made with the router's base.
    return _build(context, {"router", "prometheus"}, "build-router.log")


def needs_shipping(plan: Plan, host: str) -> bool:
    """Images are built on this machine's engine: only other engines need a copy."""
    return not host_endpoint(plan.host(host)).is_local


def _pulled_by_host(image: ImageRef) -> bool:
    return image.build is None and image.pull_policy == "missing"


def ship_images_to(host: str) -> Callable[[RunContext], str]:
    def ship(context: RunContext) -> str:
        from generator.docker import LOCAL, transfer_images

        stack = context.hosts[host]
        # Not the images a host pulls itself (observe's, from their registries, pinned).
        services = stack.project.host_services.services
        tags = sorted({s.image.tag for s in services if not _pulled_by_host(s.image)})
        report = transfer_images(tags, LOCAL, stack.endpoint, _every(context, host))
        if not report.sent:
            raise SkipTask(f"already on {stack.endpoint.label}")
        size = f"{report.bytes_sent >> 20} MiB in {report.seconds:.0f} s"
        return f"{len(report.sent)} of {len(tags)} image(s), {size}"

    return ship
