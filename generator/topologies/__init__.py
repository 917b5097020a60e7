"""P/D topologies as units: one module each behind ``TopologyUnit`` (base.py), looked up by
kind here. Adding a topology means one module, its entry below, and its plan parts."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType

from generator.errors import SpecIssue
from generator.plan.models import Plan
from generator.spec import Spec, Topology
from generator.topologies import colocated, lmcache_pd, nixl_mp
from generator.topologies.base import (
    CounterRow,
    EngineSite,
    KvSpeedSource,
    TopologyUnit,
    VerdictSources,
)

__all__ = [
    "TOPOLOGIES",
    "CounterRow",
    "EngineSite",
    "KvSpeedSource",
    "TopologyUnit",
    "VerdictSources",
    "topology_issues",
    "topology_of",
    "topology_unit",
]

TOPOLOGIES: Mapping[Topology, TopologyUnit] = MappingProxyType(
    {unit.kind: unit for unit in (lmcache_pd.UNIT, nixl_mp.UNIT, colocated.UNIT)}
)


def topology_unit(kind: Topology) -> TopologyUnit:
    return TOPOLOGIES[kind]


def topology_of(plan: Plan) -> TopologyUnit:
    return TOPOLOGIES[plan.topology.kind]


def topology_issues(spec: Spec) -> Iterator[SpecIssue]:
    """Settings that belong to another topology, then the stack's own topology's rules."""
    unit = topology_unit(spec.topology)
    for other in TOPOLOGIES.values():
        if other is not unit:
            yield from _foreign_settings(spec, other)
    if not unit.router_notices and spec.router.notify_port is not None:
        yield SpecIssue(
            "router.notify_port",
            f"is the proxy's ZMQ port for LMCache P/D notices; {unit.kind.value} has none",
            "remove router.notify_port",
        )


def _foreign_settings(spec: Spec, owner: TopologyUnit) -> Iterator[SpecIssue]:
    for section in owner.spec_sections:
        if getattr(spec.lmcache, section) is not None:
            yield SpecIssue(
                f"lmcache.{section}",
                f"applies to topology {owner.kind.value}, but this stack is {spec.topology.value}",
                f"remove lmcache.{section}, or set topology: {owner.kind.value}",
            )
    for name in sorted(spec.ports.model_fields_set & set(owner.port_fields)):
        yield SpecIssue(
            f"ports.{name}",
            f"is only used by topology {owner.kind.value}, not {spec.topology.value}",
            f"remove ports.{name}",
        )
