"""What every task of a run can see: the plan, the rendered stack, Docker, options, record."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.text import Text

from generator.console import info
from generator.docker import ComposeStack
from generator.paths import Workspace
from generator.plan import Plan
from generator.probes import SmokeResult
from generator.render import ComposeProject, RenderedStack
from generator.workflow.records import RunRecord

__all__ = ["BenchSettings", "RunContext", "RunOptions"]


@dataclass(frozen=True)
class BenchSettings:
    """vLLM's `bench serve` with its random dataset. The defaults suit the cpu stacks; seed A's
    GPU run is 7500 in / 200 out, 30 prompts, 1 req/s, burstiness 100."""

    input_len: int = 512
    output_len: int = 32
    num_prompts: int = 32
    request_rate: float | None = None  # None: as fast as max_concurrency allows
    burstiness: float = 1.0
    max_concurrency: int | None = None


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
    verdict: SmokeResult | None = None
    _stack: ComposeStack | None = field(default=None, repr=False)
    _started: float = field(default_factory=time.monotonic, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def project(self) -> ComposeProject:
        (project,) = self.rendered.projects  # `up` runs single-host stacks (checked before)
        return project

    @property
    def stack(self) -> ComposeStack:
        with self._lock:
            if self._stack is None:
                compose_file = self.workspace.root / self.project.compose_file
                self._stack = ComposeStack(compose_file, self.project.name)
            return self._stack

    @property
    def run_dir(self) -> Path:
        return self.record.directory

    def progress(self, message: str) -> None:
        elapsed = f"{time.monotonic() - self._started:6.1f}s"
        info(Text.assemble((elapsed, "dim"), " ", message))

    def failed(self) -> bool:
        from generator.workflow.task import FAILED_STATES

        return any(task.state in FAILED_STATES for task in self.record.tasks.values())
