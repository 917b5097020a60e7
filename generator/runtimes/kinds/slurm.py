"""Slurm: one job for the stack, each host of the spec one node of its allocation, each service
a job step on its node (srun) run from Pythons on a filesystem every node sees, with host
networking (generator/workflow/runtimes/slurm.py). Where each host is becomes known only
inside the allocation: `up` binds the hosts to the job's nodes and their addresses then."""

from __future__ import annotations

from collections.abc import Iterator

from generator.errors import SpecIssue
from generator.plan import Plan
from generator.runtimes.kinds.base import observed_without_containers
from generator.spec import Isolation, Runtime, Spec

__all__ = ["UNIT"]


class _Slurm:
    kind = Runtime.SLURM
    containers = False
    host_network = True  # steps run in their node's network; no bridge between nodes
    hosts_elsewhere = True  # a login node drives the job
    addresses_at_placement = True  # the job's nodes
    job_script = True  # compose/<stack>/job.sbatch: the stack as a job users submit
    sections: tuple[str, ...] = ("process", "slurm")

    def process_plans(self, plan: Plan) -> bool:
        """Only once the hosts are bound to a job's nodes: before, no host has its address."""
        return plan.slurm is not None and plan.slurm.job_id is not None

    def check_spec(self, spec: Spec) -> Iterator[SpecIssue]:
        for index, host in enumerate(spec.hosts):
            if host.docker is not None:
                yield SpecIssue(
                    f"hosts[{index}].docker",
                    "the slurm runtime uses no Docker engine",
                    "remove hosts[].docker, or set runtime: compose",
                )
            if "address" in host.model_fields_set and spec.slurm.job_id is None:
                yield SpecIssue(
                    f"hosts[{index}].address",
                    "is the address of the node Slurm allocates for this host, known only once "
                    "the job runs",
                    "remove hosts[].address: up binds each host to a node of the job (and sets "
                    "slurm.job_id with the addresses)",
                )
        for index, host in enumerate(spec.hosts):
            gpus = list(host.gpus or ())
            if gpus != list(range(len(gpus))):
                yield SpecIssue(
                    f"hosts[{index}].gpus",
                    f"lists {gpus}: under Slurm a host's GPUs are those the job gets on its "
                    "node, which each step counts from 0",
                    f"list them as positions: {list(range(len(gpus)))}",
                )
        if spec.process.isolation is Isolation.CONTAINER:
            yield SpecIssue(
                "process.isolation",
                "Slurm confines each step itself (its cgroup's cores and devices)",
                "remove process.isolation (plain)",
            )
        yield from observed_without_containers(spec, "slurm")
        yield from _container_issues(spec)


def _container_issues(spec: Spec) -> Iterator[SpecIssue]:
    """pyxis containers run the images' Pythons, and the model must be on the nodes already."""
    if spec.slurm.container is None:
        return
    for name in ("python", "router_python"):
        if getattr(spec.process, name) is not None:
            yield SpecIssue(
                f"process.{name}",
                "is a Python on the nodes' filesystem, but slurm.container runs each step in "
                "an image",
                f"remove process.{name}, or set slurm.container.{_IMAGE_PYTHON[name]}",
            )
    if spec.observe.enabled:
        yield SpecIssue(
            "observe.enabled",
            "Prometheus runs from the nodes' PATH, but slurm.container runs each step in an image",
            "set observe.enabled: false, or leave slurm.container out",
        )
    if spec.model.source == "synthetic":
        yield SpecIssue(
            "model.source",
            "synthetic makes a random-weight model with the login node's Python, which "
            "slurm.container does not use",
            "set model.source: host-path (a folder every node sees) or hub",
        )


_IMAGE_PYTHON = {"python": "engine_python", "router_python": "router_python"}


UNIT = _Slurm()
