"""Docker Compose: one project per host, each through its host's own Docker engine, from
images built on this machine (generator/docker/)."""

from __future__ import annotations

from collections.abc import Iterator

from generator.errors import SpecIssue
from generator.plan import Plan
from generator.spec import Runtime, Spec

__all__ = ["UNIT"]


class _Compose:
    kind = Runtime.COMPOSE
    containers = True
    host_network = False  # a bridge on one host; the planner chooses host networking for more
    hosts_elsewhere = False
    addresses_at_placement = False
    job_script = False
    sections: tuple[str, ...] = ()

    def process_plans(self, plan: Plan) -> bool:
        return False

    def check_spec(self, spec: Spec) -> Iterator[SpecIssue]:
        for role in spec.multinode_roles:
            yield SpecIssue(
                f"{role}.nodes",
                "engines over several hosts have run under the slurm runtime only, not "
                "as compose projects",
                f"set runtime: slurm, or {role}.nodes: 1",
            )
        if len(spec.hosts) < 2:
            return
        for index, host in enumerate(spec.hosts):
            if "address" not in host.model_fields_set:
                yield SpecIssue(
                    f"hosts[{index}].address",
                    "is needed on a stack of several hosts: the others reach this host's "
                    "services there",
                    "give each host the address the hosts reach each other at",
                )


UNIT = _Compose()
