"""P/D topologies as units: one module each behind ``TopologyUnit`` (base.py), looked up by
kind here. Adding a topology means one module, its entry below, and its plan parts."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType

from generator.errors import SpecIssue
from generator.plan.models import EnginePlan, Plan
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
    "baseline_data",
    "block_size_of",
    "cudagraph_mode_of",
    "topology_issues",
    "topology_of",
    "topology_unit",
]

# bench --baseline: the P/D spec's colocated twin (its data, for generator/stack.py to check).
baseline_data = colocated.baseline_data

TOPOLOGIES: Mapping[Topology, TopologyUnit] = MappingProxyType(
    {unit.kind: unit for unit in (lmcache_pd.UNIT, nixl_mp.UNIT, colocated.UNIT)}
)


def topology_unit(kind: Topology) -> TopologyUnit:
    return TOPOLOGIES[kind]


def topology_of(plan: Plan) -> TopologyUnit:
    return TOPOLOGIES[plan.topology.kind]


def block_size_of(plan: Plan) -> int | None:
    """The engines' ``--block-size``: the spec's, else the topology's (None: vLLM's)."""
    return plan.model.block_size or topology_of(plan).block_size(plan)


def cudagraph_mode_of(plan: Plan, engine: EnginePlan) -> str | None:
    """The engine's ``-cc.cudagraph_mode`` from its topology, unless its own arguments set
    how vLLM compiles or captures (eager mode, a CUDA graph mode, a compilation config or an
    optimization level): theirs then, whatever it is."""
    args = (*plan.model.extra_args, *engine.extra_args)
    if any(_chooses_compilation(arg) for arg in args):
        return None
    return topology_of(plan).cudagraph_mode(plan)


_COMPILATION_FLAGS = ("--enforce-eager", "--compilation-config", "-cc", "--optimization-level")


def _chooses_compilation(arg: str) -> bool:
    flag = arg.split("=", 1)[0]
    field = flag.split(".", 1)[1] if flag.startswith(("-cc.", "--compilation-config.")) else ""
    return (
        flag in _COMPILATION_FLAGS
        or field in ("cudagraph_mode", "mode")  # a piecewise graph needs compilation
        or (flag.startswith("-O") and not flag.startswith("--"))
    )


def topology_issues(spec: Spec) -> Iterator[SpecIssue]:
    """Settings that belong to another topology, then the stack's own topology's rules."""
    unit = topology_unit(spec.topology)
    for other in TOPOLOGIES.values():
        if other is not unit:
            yield from other.foreign_issues(spec)
    if not unit.router_notices and spec.router.notify_port is not None:
        yield SpecIssue(
            "router.notify_port",
            f"is the proxy's ZMQ port for LMCache P/D notices; {unit.kind.value} has none",
            "remove router.notify_port",
        )
    yield from unit.check_spec(spec)
