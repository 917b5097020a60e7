"""Planning: Spec -> Plan (hosts, devices, every port). Pure; never touches the machine."""

from generator.plan.build import make_plan
from generator.plan.models import (
    EnginePlan,
    HostPlan,
    LMCacheServerPlan,
    Network,
    Plan,
    PortUse,
    Role,
    RouterPlan,
)

__all__ = [
    "EnginePlan",
    "HostPlan",
    "LMCacheServerPlan",
    "Network",
    "Plan",
    "PortUse",
    "Role",
    "RouterPlan",
    "make_plan",
]
