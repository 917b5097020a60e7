"""Docker Compose: one project per host, each through its host's own Docker engine, from
images built on this machine (generator/docker/)."""

from __future__ import annotations

from collections.abc import Iterator

from generator.errors import SpecIssue
from generator.spec import Runtime, Spec

__all__ = ["UNIT"]


class _Compose:
    kind = Runtime.COMPOSE
    containers = True
    host_network = False  # a bridge on one host; the planner chooses host networking for more
    process_plans = False

    def check_spec(self, spec: Spec) -> Iterator[SpecIssue]:
        if "process" in spec.model_fields_set:
            yield SpecIssue(
                "process",
                "is read by the process runtime only (runtime is compose)",
                "remove the process section, or set runtime: process",
            )


UNIT = _Compose()
