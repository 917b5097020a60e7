"""The plan is the whole contract: plan.json alone renders the stack, and nothing outside
the planner reads the spec through the plan."""

from __future__ import annotations

import ast

import pytest

from generator.paths import Workspace
from generator.plan import Plan
from generator.planner import make_plan
from generator.render import render_stack
from generator.stack import load_spec
from tests.conftest import ROOT

_PACKAGE = ROOT / "generator"
_PLANNER = _PACKAGE / "plan"


def _names(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _spec_reads(source: str, label: str) -> list[str]:
    """``<...>.plan.spec`` or ``plan.spec`` anywhere in the source."""
    return [
        f"{label}:{node.lineno}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute) and node.attr == "spec" and _names(node.value) == "plan"
    ]


def test_nothing_outside_the_planner_reads_plan_spec() -> None:
    outside = [path for path in _PACKAGE.rglob("*.py") if _PLANNER not in path.parents]
    assert len(outside) > 50, "the package was not found"
    reads = [
        read
        for path in outside
        for read in _spec_reads(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    ]
    assert reads == []
    assert "spec" not in Plan.model_fields


def test_the_probe_finds_a_spec_read() -> None:
    source = "def f(view, plan):\n    return view.plan.spec.model, plan.spec\n"
    assert _spec_reads(source, "sample") == ["sample:2", "sample:2"]


@pytest.mark.parametrize("stack", Workspace(ROOT).shipped_stacks())
def test_plan_json_alone_renders_the_stack(stack: str, workspace: Workspace) -> None:
    plan = make_plan(load_spec(workspace.stack_file(stack)))
    again = Plan.model_validate_json(plan.model_dump_json())
    assert again == plan
    assert render_stack(again, workspace).files == render_stack(plan, workspace).files
