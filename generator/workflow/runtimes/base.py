"""How `up`, `status`, `logs` and `down` drive a runtime: the ``RuntimeDriver`` protocol. What
the spec, the planner and render need of it is its kind's (generator/runtimes/kinds/)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from generator.paths import Workspace
from generator.plan import Plan
from generator.render import RenderedStack
from generator.runtimes import ServiceRuntime
from generator.spec import Runtime
from generator.workflow.builder import GraphBuilder
from generator.workflow.context import RunContext
from generator.workflow.hosts import HostStack
from generator.workflow.report import Reporter
from generator.workflow.task import Task

if TYPE_CHECKING:
    from generator.workbench import RenderedHost

__all__ = ["RuntimeDriver"]


class RuntimeDriver(Protocol):
    kind: Runtime

    def require(self) -> None:
        """What must be there before a stack is planned to start (compose: a Docker engine),
        as one clear error."""
        ...

    def place(self, plan: Plan, workspace: Workspace, reporter: Reporter) -> list[str]:
        """Where each host is, when the runtime learns it only now (a Slurm job's nodes,
        asked for and waited for here): spec overrides that say so, for the plan to be made
        again with them; [] where the spec already says it."""
        ...

    def placed(self, plan: Plan, workspace: Workspace) -> list[str]:
        """What ``place`` said of a stack that runs (a Slurm job's nodes, from the stack's
        record of it; nothing asked of the runtime), for a command that reads the running
        stack from another shell (observe); [] where the spec says where each host is."""
        ...

    def release(self, stack: str, workspace: Workspace) -> str | None:
        """What the stack holds beyond its services, once they are down (a Slurm job): let
        go, and what was found and done, for `down` to say; None where it holds nothing."""
        ...

    def allocation_ended(self, stack: str, workspace: Workspace) -> str | None:
        """One line, where what the stack's services run in was ended under them (a Slurm job
        its time limit, a node failure or scancel ended): what ended it and what to do. The
        health waits poll it (to fail at once, not at their deadline), `status` and
        preflight say it. None where nothing holds the stack, or it still does."""
        ...

    def host_stacks(
        self, plan: Plan, rendered: RenderedStack, workspace: Workspace
    ) -> dict[str, HostStack]:
        """Every host that runs something, in the plan's order."""
        ...

    def preflight(self, context: RunContext) -> str:
        """Each host's runtime answers, then doctor's cheap checks where they can run."""
        ...

    def prepare(self, g: GraphBuilder, after: Task) -> tuple[Task, Task]:
        """Adds what must happen between preflight (``after``) and the first start: the tasks
        after which engines, and the router, may start."""
        ...

    def deliver(self, g: GraphBuilder, host: str, after: list[Task]) -> Task | None:
        """A task that brings what ``host``'s services need to it (compose: images to its own
        engine), where one is needed."""
        ...

    def rendered_runtime(self, rendered: RenderedHost, workspace: Workspace) -> ServiceRuntime:
        """A rendered host's services as `up` left them (from another shell)."""
        ...
