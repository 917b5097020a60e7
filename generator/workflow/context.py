"""What every task of a run can see: the plan, the rendered stack, one Docker engine per host,
options, the record, and the reporter the caller gave."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from generator.errors import XpydError
from generator.paths import Workspace
from generator.plan import Plan
from generator.probes import SmokeResult
from generator.render import RenderedStack
from generator.services.bench import BenchSettings
from generator.workflow.hosts import HostStack
from generator.workflow.records import RunRecord
from generator.workflow.report import EventLevel, Reporter
from generator.workflow.states import FAILED_STATES

__all__ = [
    "BenchSettings",
    "HostStack",
    "RunContext",
    "RunOptions",
    "TaskCancelled",
]


class TaskCancelled(XpydError):
    """The run gave up on this task (it timed out, or the user pressed Ctrl+C)."""


@dataclass(frozen=True)
class RunOptions:
    bench: bool = False  # run vLLM's serving benchmark after the smoke verdict
    down: bool = False  # remove the stack at the end, whatever happened
    teardown_on_failure: bool = False  # remove it when something failed (else kept to inspect)
    wait_scale: float = 1.0  # multiplies every health deadline (slow machines, big models)
    rebuild: bool = False  # build images even when their content-addressed tag exists
    bench_settings: BenchSettings = field(default_factory=BenchSettings)


@dataclass
class RunContext:
    plan: Plan
    workspace: Workspace
    rendered: RenderedStack
    options: RunOptions
    record: RunRecord
    reporter: Reporter
    hosts: dict[str, HostStack]
    verdict: SmokeResult | None = None
    _started: float = field(default_factory=time.monotonic, repr=False)
    _cancelled: set[str] = field(default_factory=set, repr=False)
    _cancel_all: bool = field(default=False, repr=False)

    def host_of(self, service: str) -> HostStack:
        """The host whose project runs ``service``."""
        for stack in self.hosts.values():
            if service in stack.services.service_names:
                return stack
        raise XpydError(f"no host of {self.plan.stack} runs a service named {service!r}")

    @property
    def router_host(self) -> HostStack:
        return self.hosts[self.plan.router.host]

    @property
    def run_dir(self) -> Path:
        return self.record.directory

    def progress(self, message: str, level: EventLevel = EventLevel.INFO) -> None:
        """A line for the user; also the point where a given-up task stops."""
        self.raise_if_cancelled()
        self.reporter.event(level, f"{time.monotonic() - self._started:6.1f}s {message}")

    def raise_if_cancelled(self) -> None:
        """Called by a task's waits and streams: a task that timed out stops at its next one."""
        name = threading.current_thread().name.removeprefix("task-")
        if self._cancel_all or name in self._cancelled:
            raise TaskCancelled(f"{name} was given up on")

    def cancel(self, task: str) -> None:
        self._cancelled.add(task)

    def cancel_all(self) -> None:
        self._cancel_all = True

    def failed(self) -> bool:
        return any(task.state in FAILED_STATES for task in self.record.tasks.values())
