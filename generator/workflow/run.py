"""Entry points the CLI calls: up (run the graph), down, and the graph itself for `dag`."""

from __future__ import annotations

import re

from rich.text import Text

from generator.console import error, info, stderr
from generator.errors import StackError, XpydError
from generator.paths import Workspace
from generator.plan import Plan
from generator.render import render_stack
from generator.workflow.context import RunContext, RunOptions
from generator.workflow.graph import Graph
from generator.workflow.records import RunRecord, new_run_id
from generator.workflow.runner import TaskFailure, run_graph
from generator.workflow.stack import build_graph, default_selection

__all__ = ["dag_of", "make_context", "up_stack"]

_LOG_TAIL = 30


_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def dag_of(plan: Plan) -> Graph:
    return build_graph(plan)


def make_context(
    plan: Plan, workspace: Workspace, options: RunOptions, run_id: str | None
) -> RunContext:
    if plan.is_multi_host:
        raise XpydError(
            f"{plan.stack} spans {len(plan.hosts)} hosts; `up` drives one Docker engine",
            hint=f"run each compose/{plan.stack}/<host>/ on its host (multi-host up comes later)",
        )
    if run_id is not None and not _RUN_ID.fullmatch(run_id):
        raise XpydError(
            f"--run-id {run_id!r} is not a plain folder name (it names runs/<run-id>/)",
            hint="use letters, digits, '.', '_' and '-' (at most 100, not starting with '.')",
        )
    rendered = render_stack(plan, workspace)
    run_id = run_id or new_run_id(plan.stack)
    record = RunRecord(
        run_id=run_id,
        stack=plan.stack,
        directory=workspace.runs_dir / run_id,
        plan=plan.model_dump(mode="json"),
        options={
            "bench": options.bench,
            "down": options.down,
            "teardown_on_failure": options.teardown_on_failure,
        },
    )
    return RunContext(plan, workspace, rendered, options, record)


def up_stack(context: RunContext, *, start_from: str | None = None) -> None:
    graph = build_graph(context.plan)
    selected = default_selection(graph, context, start_from)
    info(
        f"run {context.record.run_id}: {len(selected)} tasks, record in {context.run_dir}/run.json"
    )
    try:
        run_graph(graph, context, selected=selected, on_interrupt=lambda: _interrupted(context))
    except TaskFailure as failure:
        _report_failure(context, failure)
        raise
    finally:
        _save_logs(context)
        if context.verdict is not None:
            from generator.cli.tables import print_verdict

            print_verdict(context.plan, context.verdict)


def _interrupted(context: RunContext) -> None:
    error("interrupted: removing the stack's containers so nothing is left running")
    context.stack.down()


def _report_failure(context: RunContext, failure: TaskFailure) -> None:
    cause = failure.__cause__
    if isinstance(cause, StackError):
        return  # its message already holds the failing service's log tail
    for state in context.stack.ps():
        if state.exited or state.health == "unhealthy":
            health = state.health or "no health"
            line = f" is {state.status} ({health}); last lines:"
            stderr.print(Text.assemble((state.service, "red"), line))
            stderr.print(
                context.stack.logs(state.service, tail=_LOG_TAIL), markup=False, highlight=False
            )


def _save_logs(context: RunContext) -> None:
    """Every service's full log beside run.json (kept for CI artifacts and post-mortems)."""
    try:
        states = context.stack.ps()
    except XpydError:
        return
    context.record.logs_dir.mkdir(parents=True, exist_ok=True)
    for state in states:
        text = context.stack.logs(state.service)
        (context.record.logs_dir / f"{state.service}.log").write_text(text, encoding="utf-8")
