"""`bench --policies`: the same stack benchmarked once per routing policy, one after the
other, to compare them at the same load points (with the prefix-repetition dataset: how
often the prefillers find a prompt's prefix cached, and what that does to TTFT).

A policy is written ``NAME`` or ``KIND:NAME``. A bare name is the proxy's where the proxy has
it (round_robin, least_outstanding, prefix_aware: the P/D pair is then chosen by the same
code, only the policy differs), else vllm-router's (cache_aware, power_of_two, ...), which
routes nixl-mp stacks only. Each arm's stack is the user's spec with router.kind and
router.policy set, and router settings of the other kind left out (recovery settings the
arm's router does not read too).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from generator.routers import ROUTERS, policy_router, read_recovery, router_kind
from generator.spec import RouterKind, Spec
from generator.stack import parse_spec

__all__ = ["MAX_POLICIES", "PolicyArm", "arms_of", "parse_policies", "policy_spec"]

MAX_POLICIES = 8  # each arm brings the whole stack up again
# What a router spec keeps when its kind changes: the rest is one kind's own.
_PORTABLE = ("host", "port", "session_header")


@dataclass(frozen=True)
class PolicyArm:
    kind: RouterKind
    policy: str

    @property
    def label(self) -> str:
        """The arm's name in the report and its folder's."""
        return f"{self.kind.value}-{self.policy}"


def parse_policies(text: str) -> tuple[PolicyArm, ...]:
    """``round_robin,prefix_aware,cache_aware``; ValueError names the item and the choices."""
    items = [item.strip() for item in text.split(",")]
    if not all(items) or not 1 <= len(items) <= MAX_POLICIES:
        raise ValueError(f"write 1 to {MAX_POLICIES} policies, comma-separated")
    arms = tuple(_arm(item) for item in items)
    if len(set(arms)) != len(arms):
        raise ValueError("a policy is given twice")
    return arms


def _arm(item: str) -> PolicyArm:
    kind_text, _, name = item.rpartition(":")
    if kind_text:
        kind = _kind(kind_text)
        if name not in ROUTERS[kind].policies:
            raise ValueError(f"{name!r} is not a {kind.value} policy ({_choices(kind)})")
        return PolicyArm(kind, name)
    found = policy_router(name)
    if found is None:
        choices = "; ".join(f"{kind.value}: {_choices(kind)}" for kind in ROUTERS)
        raise ValueError(f"{name!r} is not a policy; {choices}")
    return PolicyArm(found, name)


def _kind(text: str) -> RouterKind:
    try:
        return RouterKind(text)
    except ValueError:
        kinds = ", ".join(kind.value for kind in RouterKind)
        raise ValueError(f"{text!r} is not a router kind ({kinds})") from None


def _choices(kind: RouterKind) -> str:
    return ", ".join(ROUTERS[kind].policies)


def policy_spec(spec: Spec, arm: PolicyArm) -> Spec:
    """The stack with this arm's router and policy, validated like any spec (cache_aware on
    an lmcache-pd stack is refused here, before anything starts)."""
    data: dict[str, Any] = spec.model_dump(mode="json", exclude_unset=True)
    router: dict[str, Any] = data.get("router", {})
    if router_kind(spec) is not arm.kind:
        router = {key: value for key, value in router.items() if key in _PORTABLE}
        data["recovery"] = read_recovery(data.get("recovery", {}), arm.kind)
    data["router"] = router | {"kind": arm.kind.value, "policy": arm.policy}
    # A refusal names this source: the stack and the arm (leave that policy out)
    return parse_spec(data, source=f"{spec.name} with bench --policies {arm.label}")


def arms_of(spec: Spec, arms: Sequence[PolicyArm]) -> list[tuple[str, Spec]]:
    return [(arm.label, policy_spec(spec, arm)) for arm in arms]
