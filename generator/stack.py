"""A stack's spec as the tool takes it: the spec's own rules (generator/spec/), then the rules
of its topology and router (the units, which sit above the spec). Every command loads specs
here; ``generator.spec`` alone checks no unit's rules."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from generator.plan.models import Plan
from generator.routers import read_recovery, router_issues
from generator.runtimes.kinds import runtime_issues, runtime_section_issues
from generator.spec import RouterKind, Rule, Spec, read_spec_file, validate_spec
from generator.topologies import baseline_data, topology_issues

__all__ = ["EXPORT_RULES", "UNIT_RULES", "baseline_spec", "load_spec", "parse_spec"]

UNIT_RULES: tuple[Rule, ...] = (topology_issues, router_issues, runtime_issues)
# A stack exported for a cluster (render --target kubernetes): no runtime of ours runs it, so
# none of their rules apply (compose's refusal of engines over several hosts, say).
EXPORT_RULES: tuple[Rule, ...] = (topology_issues, router_issues, runtime_section_issues)


def load_spec(path: Path, overrides: Sequence[str] = (), *, export: bool = False) -> Spec:
    """``export``: the spec of an export (the Kubernetes target), checked by EXPORT_RULES."""
    return read_spec_file(path, overrides, rules=EXPORT_RULES if export else UNIT_RULES)


def parse_spec(
    raw: object, *, source: str, overrides: Sequence[str] = (), baseline: bool = False
) -> Spec:
    """``baseline``: the spec bench derives (``baseline_spec``), which alone may carry the
    baseline's name."""
    return validate_spec(
        raw, source=source, overrides=overrides, baseline=baseline, rules=UNIT_RULES
    )


def baseline_spec(spec: Spec, plan: Plan) -> Spec:
    """``bench --baseline colocated``: the P/D stack's colocated twin, validated like any spec."""
    data = baseline_data(spec, plan)
    # Only the recovery settings the baseline's router reads: the rest are the P/D router's.
    data["recovery"] = read_recovery(data.get("recovery", {}), RouterKind(data["router"]["kind"]))
    return parse_spec(data, source=f"colocated baseline of {spec.name}", baseline=True)
