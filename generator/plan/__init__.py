"""The plan's data: hosts, devices, every port, every setting resolved. The planner that
makes it from a spec (``generator.planner.make_plan``) sits above the topology and router
units it consults; this package holds only what they all read."""

from __future__ import annotations

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
from generator.plan.observe import ObservePlan
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
    "ObservePlan",
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
]
