"""A task graph: validated (unique names, no cycles), ordered, printable. Pure."""

from __future__ import annotations

from collections.abc import Iterable
from graphlib import CycleError, TopologicalSorter

from generator.errors import XpydError
from generator.workflow.task import Task

__all__ = ["Graph"]


class Graph:
    def __init__(self, tasks: Iterable[Task]) -> None:
        self.tasks = list(tasks)
        self.by_name = {task.name: task for task in self.tasks}
        if len(self.by_name) != len(self.tasks):
            raise XpydError("task names must be unique", hint="rename the duplicate task")
        for task in self.tasks:
            for upstream in task.upstream:
                if upstream.name not in self.by_name:
                    raise XpydError(
                        f"{task.name} depends on {upstream.name}, which is not in the graph"
                    )
        try:
            self.order = list(
                TopologicalSorter(
                    {t.name: [u.name for u in t.upstream] for t in self.tasks}
                ).static_order()
            )
        except CycleError as exc:
            raise XpydError(f"task graph has a cycle: {exc.args[1]}") from exc

    def task(self, name: str) -> Task:
        if name not in self.by_name:
            raise XpydError(f"no task named {name!r}", hint=f"tasks: {', '.join(self.order)}")
        return self.by_name[name]

    def downstream_of(self, name: str) -> set[str]:
        """``name`` and everything that (transitively) depends on it."""
        found = {name}
        for task_name in self.order:
            if any(u.name in found for u in self.by_name[task_name].upstream):
                found.add(task_name)
        return found

    def levels(self) -> list[list[str]]:
        """Tasks grouped by depth: everything in one level can run concurrently."""
        depth: dict[str, int] = {}
        for name in self.order:
            upstream = self.by_name[name].upstream
            depth[name] = 1 + max((depth[u.name] for u in upstream), default=-1)
        grouped: list[list[str]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
        for name in self.order:
            grouped[depth[name]].append(name)
        return grouped
