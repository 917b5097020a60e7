"""The files observe adds to the folder of the host that runs Prometheus (the stack's first):
Prometheus's config and rules, written as data (YAML from dicts, never templated)."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Final

from generator.observe.rules import rules_document
from generator.observe.targets import prometheus_config
from generator.plan import Plan
from generator.serializers.yaml_text import dump_yaml

__all__ = ["OBSERVE_DIR", "PROMETHEUS_FILE", "RULES_FILE", "observe_files"]

OBSERVE_DIR: Final = PurePosixPath("observe")
PROMETHEUS_FILE: Final = OBSERVE_DIR / "prometheus.yml"
RULES_FILE: Final = OBSERVE_DIR / "rules.yml"


def observe_files(plan: Plan) -> dict[PurePosixPath, str]:
    """Relative to the observe host's folder; empty with observe off."""
    if plan.observe is None:
        return {}
    header = f"# Rendered by xpyd-stacks for stack {plan.stack}: do not edit, run render.\n"
    return {
        PROMETHEUS_FILE: dump_yaml(prometheus_config(plan, plan.observe), header=header),
        RULES_FILE: dump_yaml(rules_document(plan), header=header),
    }
