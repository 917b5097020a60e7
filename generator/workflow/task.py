"""Tasks: plain functions with their options declared where they are defined.

    build = Task("build", build_images, timeout_s=1800)
    up = Task("up", start_services, retries=1)
    build >> up          # up runs after build succeeded

A task's function takes the run context and returns an optional one-line summary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, overload

from generator.workflow.states import DONE_STATES, FAILED_STATES, TaskState

if TYPE_CHECKING:
    from generator.workflow.context import RunContext

__all__ = ["DONE_STATES", "FAILED_STATES", "SkipTask", "Task", "TaskState"]


TaskFunction = Callable[["RunContext"], str | None]


class SkipTask(Exception):
    """Raised by a task that decides at run time it has nothing to do (state SKIPPED)."""


@dataclass(eq=False)
class Task:
    name: str
    function: TaskFunction
    description: str = ""
    retries: int = 0
    retry_delay_s: float = 2.0
    timeout_s: float | None = None  # enforced by the task's own waits; recorded for the DAG
    teardown: bool = False  # runs even when upstream failed, and never masks the first error
    upstream: list[Task] = field(default_factory=list)

    @overload
    def __rshift__(self, other: Task) -> Task: ...
    @overload
    def __rshift__(self, other: list[Task]) -> list[Task]: ...
    def __rshift__(self, other: Task | list[Task]) -> Task | list[Task]:
        for downstream in other if isinstance(other, list) else [other]:
            if self not in downstream.upstream:
                downstream.upstream.append(self)
        return other

    def __rrshift__(self, other: list[Task]) -> Task:
        for upstream in other:
            if upstream not in self.upstream:
                self.upstream.append(upstream)
        return self

    def __repr__(self) -> str:
        return f"Task({self.name!r})"
