"""Tasks before anything starts that every runtime runs: render, and doctor's cheap checks, which
each runtime's preflight runs on the hosts this machine is (generator/workflow/runtimes/). What
comes between preflight and the first start is the runtime driver's too: compose's wheels,
builds and shipping (steps/images.py), the process runtime's Pythons (steps/pythons.py)."""

from __future__ import annotations

import time
from collections.abc import Callable

from generator.errors import StackError
from generator.render.writer import write_rendered
from generator.workflow.context import RunContext
from generator.workflow.hosts import HostStack
from generator.workflow.report import EventLevel

__all__ = ["doctor_checks", "every", "render_files"]

_LINE_EVERY_S = 20.0  # how often a long build or copy prints a progress line


def render_files(context: RunContext) -> str:
    written = write_rendered(context.rendered, context.workspace.root)
    return f"{len(written)} files"


def doctor_checks(context: RunContext, stack: HostStack) -> str:
    """doctor's cheap checks of one host this machine is (its ports, GPUs, /dev/shm)."""
    from generator.doctor import check_host
    from generator.doctor.report import Verdict

    view, report = check_host(
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


def every(context: RunContext, what: str) -> Callable[[str], None]:
    """A line callback for long output: stops a given-up task, prints a line now and then."""
    last = [time.monotonic()]

    def on_line(line: str) -> None:
        context.raise_if_cancelled()
        if time.monotonic() - last[0] > _LINE_EVERY_S:
            last[0] = time.monotonic()
            context.progress(f"{what}: {line[:100]}")

    return on_line
