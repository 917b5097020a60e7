"""Runs a graph: ready tasks concurrently (daemon threads), retries, timeouts, records, Ctrl+C.

A failed task marks everything downstream UPSTREAM_FAILED; teardown tasks still run, once
every other task is finished. A task that outlives its ``timeout_s`` is failed at once and the
run goes on without it (its thread is told to stop at its next wait, and, being a daemon, never
keeps the process alive). Ctrl+C cancels what has not finished, runs ``on_interrupt`` (the
caller removes the containers) and re-raises.

Only an ``XpydError`` is a task failure. Any other exception is a bug: run.json records it (the
task failed, with the traceback's last lines under ``bug``), the run ends as after a failure
(dependents blocked, teardown run), and then the bug itself is re-raised, so the CLI's
internal-error path shows it instead of a task failure with no hint.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from tenacity import Retrying, stop_after_attempt, wait_fixed

from generator.errors import XpydError
from generator.workflow.context import RunContext
from generator.workflow.graph import Graph
from generator.workflow.report import EventLevel
from generator.workflow.task import DONE_STATES, FAILED_STATES, SkipTask, Task, TaskState

__all__ = ["TaskFailure", "TaskTimeout", "run_graph"]

_MAX_PARALLEL = 8
_IDLE_POLL_S = 1.0  # how often the loop looks at deadlines when nothing finishes
_BUG_LINES = 12  # of the traceback kept in run.json


class TaskFailure(XpydError):
    """The run stopped because ``task`` failed (its own error is ``__cause__``)."""

    def __init__(self, task: str, cause: XpydError) -> None:
        self.task = task
        super().__init__(f"task {task} failed: {cause.message}", hint=cause.hint)


class TaskTimeout(XpydError):
    """A task ran past its ``timeout_s``."""


@dataclass(frozen=True)
class _Outcome:
    task: Task
    summary: str | None = None
    error: BaseException | None = None


@dataclass
class _Failures:
    """The first task failure and the first bug; a teardown's never masks an earlier one."""

    failure: BaseException | None = None
    bug: BaseException | None = None

    def add(self, error: BaseException | None) -> None:
        if isinstance(error, TaskFailure):
            self.failure = self.failure or error
        elif error is not None:
            self.bug = self.bug or error

    def __bool__(self) -> bool:
        return self.failure is not None or self.bug is not None

    def raise_first(self) -> None:
        if self.bug is not None:  # a bug outranks an expected failure: it must be reported
            raise self.bug
        if self.failure is not None:
            raise self.failure


@dataclass
class _Running:
    task: Task
    deadline: float | None  # monotonic; None: no limit


def run_graph(
    graph: Graph,
    context: RunContext,
    *,
    selected: set[str],
    on_interrupt: Callable[[], None] | None = None,
) -> None:
    """Run the ``selected`` tasks; the others count as done (SKIPPED). Raises ``TaskFailure``,
    or a task's bug (any exception outside the XpydError tree) as it was raised."""
    record = context.record
    for name in graph.order:
        record.set_state(name, TaskState.PENDING if name in selected else TaskState.SKIPPED)
    outcomes: queue.Queue[_Outcome] = queue.Queue()
    running: dict[str, _Running] = {}
    failures = _Failures()
    try:
        while True:
            _settle_blocked(graph, context)
            for task in _ready(graph, context, running)[: _MAX_PARALLEL - len(running)]:
                running[task.name] = _start(task, context, outcomes)
            if not running:
                break
            for outcome in _next_outcomes(outcomes, running):
                if isinstance(outcome.error, KeyboardInterrupt):
                    raise outcome.error  # Ctrl+C seen by a task's thread: the run stops
                failures.add(_collect(outcome, context))
    except KeyboardInterrupt:
        context.cancel_all()
        for name in graph.order:
            if record.tasks[name].state in (TaskState.PENDING, TaskState.RUNNING):
                record.set_state(name, TaskState.CANCELLED, error="interrupted")
        record.finish("interrupted")
        if on_interrupt is not None:
            on_interrupt()
        raise
    record.finish("failed" if failures else "success")
    failures.raise_first()


def _start(task: Task, context: RunContext, outcomes: queue.Queue[_Outcome]) -> _Running:
    context.record.set_state(task.name, TaskState.RUNNING)
    context.progress(f"{task.name}: started")

    def body() -> None:
        try:
            outcomes.put(_Outcome(task, summary=_attempts(task, context)))
        except BaseException as exc:  # reported by the loop, never lost in the thread
            outcomes.put(_Outcome(task, error=exc))

    threading.Thread(target=body, name=f"task-{task.name}", daemon=True).start()
    deadline = None if task.timeout_s is None else time.monotonic() + task.timeout_s
    return _Running(task, deadline)


def _next_outcomes(outcomes: queue.Queue[_Outcome], running: dict[str, _Running]) -> list[_Outcome]:
    """The outcomes that arrive before the next deadline, or the overdue tasks as failures.
    A task already given up on (timed out) may still report: that late outcome is dropped."""
    deadlines = [r.deadline for r in running.values() if r.deadline is not None]
    wait_s = min([_IDLE_POLL_S, *(d - time.monotonic() for d in deadlines)])
    try:
        outcome = outcomes.get(timeout=max(wait_s, 0.0))
    except queue.Empty:
        return [_timed_out(running.pop(r.task.name)) for r in _overdue(running)]
    if running.pop(outcome.task.name, None) is None:
        return []
    return [outcome]


def _overdue(running: dict[str, _Running]) -> list[_Running]:
    now = time.monotonic()
    return [r for r in running.values() if r.deadline is not None and r.deadline <= now]


def _timed_out(late: _Running) -> _Outcome:
    limit = late.task.timeout_s
    error = TaskTimeout(
        f"still running after its limit of {limit:.0f} s",
        hint="look at the task's progress lines and logs; --wait-scale raises wait limits",
    )
    return _Outcome(late.task, error=error)


def _state(context: RunContext, name: str) -> TaskState:
    return context.record.tasks[name].state


def _ready(graph: Graph, context: RunContext, running: dict[str, _Running]) -> list[Task]:
    ready = []
    for name in graph.order:
        task = graph.by_name[name]
        if _state(context, name) is not TaskState.PENDING or name in running:
            continue
        if task.teardown:
            if _all_others_finished(graph, context, running, task):
                ready.append(task)
        elif all(_state(context, u.name) in DONE_STATES for u in task.upstream):
            ready.append(task)
    return ready


def _all_others_finished(
    graph: Graph, context: RunContext, running: dict[str, _Running], teardown: Task
) -> bool:
    """A teardown runs last: after every other task, not only its upstream (an unselected
    upstream counts as done at once, and a teardown behind one would run first)."""
    others = [name for name in graph.order if not graph.by_name[name].teardown]
    unfinished = (TaskState.PENDING, TaskState.RUNNING)
    return not any(name in running or _state(context, name) in unfinished for name in others)


def _settle_blocked(graph: Graph, context: RunContext) -> None:
    """Pending non-teardown tasks behind a failure will never run."""
    for name in graph.order:
        task = graph.by_name[name]
        blocked = any(_state(context, u.name) in FAILED_STATES for u in task.upstream)
        if _state(context, name) is TaskState.PENDING and not task.teardown and blocked:
            context.record.set_state(name, TaskState.UPSTREAM_FAILED)


def _attempts(task: Task, context: RunContext) -> str | None:
    retrying = Retrying(
        stop=stop_after_attempt(task.retries + 1),
        wait=wait_fixed(task.retry_delay_s),
        retry=lambda state: (
            state.outcome is not None
            and state.outcome.failed
            and not isinstance(state.outcome.exception(), SkipTask)
        ),
        before_sleep=lambda state: context.progress(
            f"{task.name}: attempt {state.attempt_number} failed, retrying"
        ),
        reraise=True,
    )
    return retrying(task.function, context)


def _collect(outcome: _Outcome, context: RunContext) -> BaseException | None:
    task, error = outcome.task, outcome.error
    if isinstance(error, SkipTask):
        context.record.set_state(task.name, TaskState.SKIPPED, summary=str(error))
        context.progress(f"{task.name}: skipped ({error})")
        return None
    if error is not None and not isinstance(error, XpydError):
        return _record_bug(task, error, context)
    if isinstance(error, XpydError):  # any task error stops its dependents; the first is reported
        if isinstance(error, TaskTimeout):
            context.cancel(task.name)
        failure = TaskFailure(task.name, error)
        failure.__cause__ = error
        context.record.set_state(task.name, TaskState.FAILED, error=failure.message)
        context.progress(f"{task.name}: failed", EventLevel.FAILED)
        return failure  # the caller keeps the first failure: a teardown never masks it
    summary = outcome.summary
    context.record.set_state(task.name, TaskState.SUCCESS, summary=summary)
    context.progress(f"{task.name}: done" + (f" ({summary})" if summary else ""), EventLevel.DONE)
    return None


def _record_bug(task: Task, error: BaseException, context: RunContext) -> BaseException:
    """A bug in ``task``: failed in run.json with the traceback's last lines, returned to be
    re-raised once the run has wound down."""
    lines = "".join(traceback.format_exception(error)).rstrip().splitlines()
    described = f"bug: {type(error).__name__}: {error}"
    context.record.set_state(
        task.name, TaskState.FAILED, error=described, bug="\n".join(lines[-_BUG_LINES:])
    )
    context.progress(f"{task.name}: failed with a bug ({type(error).__name__})", EventLevel.FAILED)
    return error
