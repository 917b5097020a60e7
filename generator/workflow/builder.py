"""Tasks made and wired (``>>``) where they are declared, each once: what the DAG and each
runtime's driver (generator/workflow/runtimes/) add `up`'s tasks with."""

from __future__ import annotations

from collections.abc import Callable

from generator.plan import Plan
from generator.workflow.context import RunContext, RunOptions
from generator.workflow.task import Task

__all__ = ["MINUTE", "GraphBuilder"]

MINUTE = 60.0
_SLACK_S = MINUTE  # a wait's task outlives the wait's own deadline by this much


class GraphBuilder:
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
