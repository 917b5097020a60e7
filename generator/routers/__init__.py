"""Router kinds as units: one module each behind ``RouterUnit`` (base.py), looked up by kind
here. Adding a router (SGLang's, llm-d's scheduler) means one module, its entry below and its
plan part (generator/plan/parts.py)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

from generator.errors import SpecIssue
from generator.plan.models import Plan
from generator.routers import proxy, vllm_router
from generator.routers.base import RouterSite, RouterUnit, policy_field, policy_sides
from generator.spec import RouterKind, Spec
from generator.topologies import topology_unit

__all__ = [
    "ROUTERS",
    "RUNTIME_RECOVERY",
    "RouterSite",
    "RouterUnit",
    "policy_field",
    "policy_router",
    "policy_sides",
    "read_recovery",
    "router_issues",
    "router_kind",
    "router_of",
    "router_unit",
    "router_warnings",
]

ROUTERS: Mapping[RouterKind, RouterUnit] = MappingProxyType(
    {unit.kind: unit for unit in (proxy.UNIT, vllm_router.UNIT)}
)


def policy_router(policy: str) -> RouterKind | None:
    """Which router a bare policy name is: the proxy's where it has it (it routes both P/D
    topologies), else vllm-router's; None where neither has it."""
    for kind in (RouterKind.PROXY, RouterKind.VLLM_ROUTER):
        if policy in ROUTERS[kind].policies:
            return kind
    return None


def router_kind(spec: Spec) -> RouterKind:
    """The spec's router, else its topology's usual one."""
    return spec.router.kind or topology_unit(spec.topology).default_router


def router_unit(kind: RouterKind) -> RouterUnit:
    return ROUTERS[kind]


def router_of(plan: Plan) -> RouterUnit:
    return ROUTERS[plan.router.kind]


def router_issues(spec: Spec) -> Iterator[SpecIssue]:
    unit = router_unit(router_kind(spec))
    yield from unit.check_spec(spec)
    for side, choice in policy_sides(spec):
        if choice.name not in unit.policies:
            yield SpecIssue(
                policy_field(spec, side),
                f"{choice.name!r} is not a {unit.kind.value} policy",
                f"use one of: {', '.join(unit.policies)}{_elsewhere(unit)}",
            )


RUNTIME_RECOVERY = ("max_restarts",)  # read by every runtime, whatever the router


def read_recovery(recovery: Mapping[str, Any], kind: RouterKind) -> dict[str, Any]:
    """The recovery settings of a spec's data that a router of ``kind`` reads: what a spec
    derived for another router (a bench arm, the colocated baseline) keeps."""
    read = _recovery_read(kind)
    return {name: value for name, value in recovery.items() if name in read}


def router_warnings(spec: Spec) -> Iterator[str]:
    """Recovery settings given for a router that does not read them: legal (`--set
    router.kind=...` on a stack written for the other router has no way to drop them), but
    they change nothing."""
    kind = router_kind(spec)
    ignored = sorted(spec.recovery.model_fields_set - _recovery_read(kind))
    if ignored:
        names = ", ".join(f"recovery.{name}" for name in ignored)
        one = len(ignored) == 1
        yield (
            f"{names}: {kind.value} does not read {'it' if one else 'them'} (our proxy alone "
            "sends a request again and watches engines' token counters), so "
            f"{'it changes' if one else 'they change'} nothing here. Remove "
            f"{'it' if one else 'them'}, or use router.kind: proxy."
        )


def _recovery_read(kind: RouterKind) -> frozenset[str]:
    return frozenset({*RUNTIME_RECOVERY, *ROUTERS[kind].recovery_fields})


def _elsewhere(unit: RouterUnit) -> str:
    if unit.kind is not RouterKind.PROXY:
        return ""
    return " (vllm-router's own policies need router.kind: vllm-router, on nixl-mp stacks)"
