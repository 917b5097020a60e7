"""Planning: Spec -> Plan (hosts, devices, every port, every setting resolved). Pure; never
touches the machine.

The plan's models are imported from here by the topology and router units, which the planner
(build.py) consults: so build.py is imported when ``make_plan`` is first called, not here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from generator.plan.models import (
    EnginePlan,
    HFPlan,
    HostPlan,
    ModelPlan,
    Network,
    Plan,
    PortUse,
    Role,
    TokenPlan,
    UcxPlan,
)
from generator.plan.parts import (
    ColocatedTopology,
    EngineKV,
    LMCachePDReceiverKV,
    LMCachePDSenderKV,
    LMCachePDTopology,
    LMCacheServerPlan,
    NixlMPEngineKV,
    NixlMPTopology,
    NoKV,
    ProxyRouterPlan,
    RouterPlan,
    SidecarPlan,
    TopologyPlan,
    VllmRouterPlan,
)

if TYPE_CHECKING:
    from generator.spec import Spec

__all__ = [
    "ColocatedTopology",
    "EngineKV",
    "EnginePlan",
    "HFPlan",
    "HostPlan",
    "LMCachePDReceiverKV",
    "LMCachePDSenderKV",
    "LMCachePDTopology",
    "LMCacheServerPlan",
    "ModelPlan",
    "Network",
    "NixlMPEngineKV",
    "NixlMPTopology",
    "NoKV",
    "Plan",
    "PortUse",
    "ProxyRouterPlan",
    "Role",
    "RouterPlan",
    "SidecarPlan",
    "TokenPlan",
    "TopologyPlan",
    "UcxPlan",
    "VllmRouterPlan",
    "make_plan",
]


def make_plan(spec: Spec) -> Plan:
    """Spec -> Plan: pure and deterministic (generator/plan/build.py)."""
    from generator.plan.build import build_plan

    return build_plan(spec)
