"""Entry points the CLI calls: up (run the graph over every host) and the graph for `dag`."""

from __future__ import annotations

import re
from pathlib import Path

from generator.errors import StackError, XpydError
from generator.owned import write_text
from generator.paths import Workspace
from generator.plan import Plan
from generator.render import render_stack
from generator.stack_lock import holding
from generator.workflow.context import RunContext, RunOptions
from generator.workflow.dag import build_graph, default_selection
from generator.workflow.graph import Graph
from generator.workflow.records import RunRecord, claim_run_dir, new_run_id
from generator.workflow.report import EventLevel, Reporter
from generator.workflow.runner import TaskFailure, run_graph
from generator.workflow.runtimes import host_stacks, remove_hosts, runtime_driver

__all__ = ["check_run_id", "dag_of", "make_context", "up_stack"]

_LOG_TAIL = 30
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def check_run_id(run_id: str) -> None:
    """A run id names a folder under runs/: one plain name, never a path."""
    if not _RUN_ID.fullmatch(run_id):
        raise XpydError(
            f"--run-id {run_id!r} is not a plain folder name (it names runs/<run-id>/)",
            hint="use letters, digits, '.', '_' and '-' (at most 100, not starting with '.')",
        )


def dag_of(plan: Plan, options: RunOptions | None = None) -> Graph:
    return build_graph(plan, options)


def make_context(
    plan: Plan,
    workspace: Workspace,
    options: RunOptions,
    run_id: str | None,
    reporter: Reporter,
    *,
    directory: Path | None = None,
) -> RunContext:
    """``directory``: where the run's record goes (default: runs/<run-id>/, a new id's folder
    when none is given)."""
    if run_id is not None:
        check_run_id(run_id)
    rendered = render_stack(plan, workspace)
    if directory is None:
        directory = claim_run_dir(workspace.root, plan.stack, run_id)
        run_id = directory.name
    record = RunRecord(
        run_id=run_id or new_run_id(plan.stack),
        stack=plan.stack,
        directory=directory,
        plan=plan.model_dump(mode="json"),
        options={
            "bench": options.bench,
            "down": options.down,
            "teardown_on_failure": options.teardown_on_failure,
        },
    )
    hosts = host_stacks(plan, rendered, workspace)
    return RunContext(plan, workspace, rendered, options, record, reporter, hosts)


def up_stack(context: RunContext, *, start_from: str | None = None) -> None:
    """Runs the stack's task graph, holding the stack's lock (one writer per stack)."""
    with holding(context.workspace.root, context.plan.stack, f"up {context.plan.stack}"):
        _up_stack(context, start_from)


def _up_stack(context: RunContext, start_from: str | None) -> None:
    graph = build_graph(context.plan, context.options)
    selected = default_selection(graph, context, start_from)
    context.reporter.event(
        EventLevel.INFO,
        f"run {context.record.run_id}: {len(selected)} tasks on {len(context.hosts)} host(s), "
        f"record in {context.run_dir}/run.json",
    )
    try:
        run_graph(graph, context, selected=selected, on_interrupt=lambda: _interrupted(context))
    except TaskFailure as failure:
        if (ended := _allocation_ended(context)) and ended not in failure.message:
            # A Slurm job that ended under the run fails whichever task ran then (the smoke's
            # step: "Job/step already completing"): its end is the cause, in its one line.
            raise TaskFailure(failure.task, StackError(ended)) from failure
        _report_failure(context, failure)
        raise
    finally:
        _save_logs(context)
        if context.verdict is not None:
            context.reporter.verdict(context.plan, context.verdict)


def _allocation_ended(context: RunContext) -> str | None:
    """The runtime's line when what the stack runs in ended (None: it runs, or none is known)."""
    try:
        return runtime_driver(context.plan.runtime).allocation_ended(
            context.plan.stack, context.workspace
        )
    except XpydError:
        return None  # asked to explain a failure: a second one must not replace it


def _interrupted(context: RunContext) -> None:
    context.reporter.event(
        EventLevel.FAILED, "interrupted: removing the stack's services so nothing is left running"
    )
    remove_hosts(context)


def _report_failure(context: RunContext, failure: TaskFailure) -> None:
    if isinstance(failure.__cause__, StackError):
        return  # its message already holds the failing service's log tail
    for stack in context.hosts.values():
        try:
            states = stack.runtime.ps()
        except XpydError:
            continue  # an engine that does not answer: the failure itself says so
        for state in states:
            if state.exited or state.health == "unhealthy":
                condition = f"{state.status} ({state.health or 'no health'}) on {stack.name}"
                tail = stack.runtime.logs(state.service, tail=_LOG_TAIL)
                context.reporter.service_log(state.service, condition, tail)


def _save_logs(context: RunContext) -> None:
    """Every service's full log beside run.json (kept for CI artifacts and post-mortems)."""
    for stack in context.hosts.values():
        try:
            states = stack.runtime.ps()
        except XpydError:
            continue  # an unreachable host has no logs to keep
        for state in states:
            text = stack.runtime.logs(state.service)
            write_text(context.run_dir, context.record.logs_dir / f"{state.service}.log", text)
