"""Planning: Spec -> Plan (hosts, devices, every port). Pure; never touches the machine."""

from generator.plan.build import make_plan
from generator.plan.models import (
    EnginePlan,
    HFPlan,
    HostPlan,
    LMCacheServerPlan,
    ModelPlan,
    Network,
    Plan,
    PortUse,
    Role,
    RouterPlan,
    TokenPlan,
    UcxPlan,
)

__all__ = [
    "EnginePlan",
    "HFPlan",
    "HostPlan",
    "LMCacheServerPlan",
    "ModelPlan",
    "Network",
    "Plan",
    "PortUse",
    "Role",
    "RouterPlan",
    "TokenPlan",
    "UcxPlan",
    "make_plan",
]
