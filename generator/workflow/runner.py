"""Runs a graph: ready tasks concurrently (threads), retries, state, records, Ctrl+C.

A failed task marks everything downstream UPSTREAM_FAILED; teardown tasks still run once
their upstream is finished. Ctrl+C cancels what has not finished, runs ``on_interrupt``
(the caller removes the containers) and re-raises.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from tenacity import Retrying, stop_after_attempt, wait_fixed

from generator.errors import XpydError
from generator.workflow.context import RunContext
from generator.workflow.graph import Graph
from generator.workflow.task import DONE_STATES, FAILED_STATES, SkipTask, Task, TaskState

__all__ = ["TaskFailure", "run_graph"]

_MAX_PARALLEL = 8


class TaskFailure(XpydError):
    """The run stopped because ``task`` failed (its own error is ``__cause__``)."""

    def __init__(self, task: str, cause: BaseException) -> None:
        self.task = task
        hint = cause.hint if isinstance(cause, XpydError) else ""
        message = (
            cause.message if isinstance(cause, XpydError) else f"{type(cause).__name__}: {cause}"
        )
        super().__init__(f"task {task} failed: {message}", hint=hint)


def run_graph(
    graph: Graph,
    context: RunContext,
    *,
    selected: set[str],
    on_interrupt: Callable[[], None] | None = None,
) -> None:
    """Run the ``selected`` tasks; the others count as done (SKIPPED). Raises ``TaskFailure``."""
    record = context.record
    for name in graph.order:
        record.set_state(name, TaskState.PENDING if name in selected else TaskState.SKIPPED)
    futures: dict[Future[str | None], Task] = {}
    first_failure: TaskFailure | None = None
    with ThreadPoolExecutor(max_workers=_MAX_PARALLEL, thread_name_prefix="task") as pool:
        try:
            while True:
                _settle_blocked(graph, context)
                for task in _ready(graph, context, futures):
                    record.set_state(task.name, TaskState.RUNNING)
                    context.progress(f"{task.name}: started")
                    futures[pool.submit(_attempts, task, context)] = task
                if not futures:
                    break
                finished, _ = wait(futures, return_when=FIRST_COMPLETED)
                for future in finished:
                    failure = _collect(futures.pop(future), future, context)
                    first_failure = first_failure or failure
        except KeyboardInterrupt:
            for future in futures:
                future.cancel()
            for name in graph.order:
                if record.tasks[name].state in (TaskState.PENDING, TaskState.RUNNING):
                    record.set_state(name, TaskState.CANCELLED, error="interrupted")
            record.finish("interrupted")
            if on_interrupt is not None:
                on_interrupt()
            raise
    record.finish("failed" if first_failure else "success")
    if first_failure is not None:
        raise first_failure


def _state(context: RunContext, name: str) -> TaskState:
    return context.record.tasks[name].state


def _ready(
    graph: Graph, context: RunContext, futures: dict[Future[str | None], Task]
) -> list[Task]:
    running = set(futures.values())
    ready = []
    for name in graph.order:
        task = graph.by_name[name]
        if _state(context, name) is not TaskState.PENDING or task in running:
            continue
        states = [_state(context, u.name) for u in task.upstream]
        finished = all(s in DONE_STATES or s in FAILED_STATES for s in states)
        if all(s in DONE_STATES for s in states) or (task.teardown and finished):
            ready.append(task)
    return ready


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


def _collect(task: Task, future: Future[str | None], context: RunContext) -> TaskFailure | None:
    try:
        summary = future.result()
    except SkipTask as skip:
        context.record.set_state(task.name, TaskState.SKIPPED, summary=str(skip))
        context.progress(f"{task.name}: skipped ({skip})")
        return None
    except Exception as exc:  # any task error stops its dependents; the first is reported
        failure = TaskFailure(task.name, exc)
        failure.__cause__ = exc
        context.record.set_state(task.name, TaskState.FAILED, error=failure.message)
        context.progress(f"[red]{task.name}: failed[/red]")
        return failure  # the caller keeps the first failure: a teardown never masks it
    context.record.set_state(task.name, TaskState.SUCCESS, summary=summary)
    context.progress(f"[green]{task.name}: done[/green]" + (f" ({summary})" if summary else ""))
    return None
