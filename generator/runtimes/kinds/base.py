"""What the spec, the planner and render need to know of a runtime: the ``RuntimeKind``
protocol. How `up`, `status`, `logs` and `down` drive one is its driver's
(generator/workflow/runtimes/)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from generator.errors import SpecIssue
from generator.plan import Plan
from generator.spec import Runtime, Spec

__all__ = ["RuntimeKind", "observed_without_containers"]


class RuntimeKind(Protocol):
    kind: Runtime
    # Services run in containers from images built here (Docker): doctor checks the engine,
    # its GPU access modes and what it may grant; render's images are used.
    containers: bool
    # Every service is on its host's own network (no bridge to give them names): services
    # reach each other by host address, and the planner plans host networking.
    host_network: bool
    # `up`, `status` and `observe` run on a machine that is none of the stack's hosts (a login
    # node): what they ask of a host must listen on its address, not only its loopback.
    hosts_elsewhere: bool
    # The hosts' addresses are those of the nodes the stack is placed on when it comes up (a
    # Slurm job's): what reads addresses from the spec alone waits for them.
    addresses_at_placement: bool
    # Render writes a job script for the cluster's scheduler (compose/<stack>/job.sbatch).
    job_script: bool
    # The spec's sections it reads (process, slurm); another runtime's are refused.
    sections: tuple[str, ...]

    def process_plans(self, plan: Plan) -> bool:
        """Whether render writes each host's process plan (processes.yaml): what the runtime
        starts, as commands, environments and paths instead of containers."""
        ...

    def check_spec(self, spec: Spec) -> Iterator[SpecIssue]:
        """The spec's settings this runtime cannot honour, or honours only with others."""
        ...


def observed_without_containers(spec: Spec, runtime: str) -> Iterator[SpecIssue]:
    """observe where services run as processes: Prometheus from PATH (Debian's package or its
    release's single file) and our OTLP receiver; Grafana comes as an image only."""
    if spec.observe.enabled and spec.observe.grafana:
        yield SpecIssue(
            "observe.grafana",
            f"the {runtime} runtime runs Prometheus (from PATH) and no Grafana: Grafana comes as "
            "a container image",
            "set observe.grafana: false (Prometheus and its rules still run), or runtime: compose",
        )
