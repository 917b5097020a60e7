"""Shipped stacks planned with observe on (``--set`` as a user writes it)."""

from __future__ import annotations

from generator.paths import Workspace
from generator.plan import Plan
from generator.planner import make_plan
from generator.stack import load_spec

OBSERVED = ("observe.enabled=true",)


def observed_plan(workspace: Workspace, stack: str, *overrides: str) -> Plan:
    return make_plan(load_spec(workspace.stack_file(stack), (*OBSERVED, *overrides)))
