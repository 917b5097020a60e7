"""Local processes: every service of one host started on this machine from a Python with the
stack's lock (`python -m generator env`), with host networking and no Docker
(generator/runtimes/process.py)."""

from __future__ import annotations

from collections.abc import Iterator

from generator.errors import SpecIssue
from generator.plan import Plan
from generator.runtimes.kinds.base import observed_without_containers
from generator.spec import Isolation, Profile, Runtime, Spec

__all__ = ["UNIT"]


class _Process:
    kind = Runtime.PROCESS
    containers = False
    host_network = True  # there is no bridge between processes
    hosts_elsewhere = False
    addresses_at_placement = False
    job_script = False
    sections: tuple[str, ...] = ("process",)

    def process_plans(self, plan: Plan) -> bool:
        return True

    def check_spec(self, spec: Spec) -> Iterator[SpecIssue]:
        if len(spec.hosts) > 1:
            yield SpecIssue(
                "runtime",
                f"the process runtime starts every service on this machine, but the stack has "
                f"{len(spec.hosts)} hosts",
                "use runtime: compose for multi-host stacks (each host's Docker engine), or "
                "one host",
            )
        for index, host in enumerate(spec.hosts):
            if host.docker is not None:
                yield SpecIssue(
                    f"hosts[{index}].docker",
                    "the process runtime uses no Docker engine",
                    "remove hosts[].docker, or set runtime: compose",
                )
        if spec.process.isolation is Isolation.CONTAINER and spec.profile is Profile.CPU:
            # The view is a GPU engine's container's: its /dev/nvidiaN alone and its PID
            # namespace. A cpu engine has no GPUs to confine, so it would run plain anyway.
            yield SpecIssue(
                "process.isolation",
                "container builds each engine the view of its GPUs a container would have; a "
                "cpu stack has none, so its engines would run as with plain (taskset pins the "
                "cores)",
                "remove process.isolation (plain), or set profile: gpu",
            )
        yield from observed_without_containers(spec, "process")


UNIT = _Process()
