"""Every topology and router kind is a complete unit: registered, meeting its protocol,
with a plan part of its own; and nothing outside the units branches on a kind."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import pytest

from generator.plan import RouterPlan, TopologyPlan
from generator.routers import ROUTERS, RouterUnit, router_kind
from generator.spec import RouterKind, Topology
from generator.stack import parse_spec
from generator.topologies import TOPOLOGIES, TopologyUnit
from tests.conftest import ROOT, spec_dict

# Where a kind's enum members may be named: the units, and the plan parts that carry them as
# discriminators (the spec defines the enums but names no member: the units' rules are theirs).
_KIND_HOMES = ("generator/topologies/", "generator/routers/")
_PARTS = "generator/plan/parts.py"


def _union_kinds(union: object) -> set[object]:
    members = typing.get_args(typing.get_args(union)[0])
    return {member.model_fields["kind"].default for member in members}


@pytest.mark.parametrize("kind", list(Topology))
def test_every_topology_is_a_registered_unit(kind: Topology) -> None:
    unit = TOPOLOGIES[kind]
    assert isinstance(unit, TopologyUnit)
    assert unit.kind is kind
    assert unit.default_router in ROUTERS


@pytest.mark.parametrize("kind", list(RouterKind))
def test_every_router_kind_is_a_registered_unit(kind: RouterKind) -> None:
    unit = ROUTERS[kind]
    assert isinstance(unit, RouterUnit)
    assert unit.kind is kind
    assert unit.policies


def test_every_kind_has_its_plan_part() -> None:
    assert _union_kinds(TopologyPlan) == set(Topology)
    assert _union_kinds(RouterPlan) == set(RouterKind)


def test_topologies_own_disjoint_settings() -> None:
    sections = [s for unit in TOPOLOGIES.values() for s in unit.spec_sections]
    ports = [p for unit in TOPOLOGIES.values() for p in unit.port_fields]
    assert len(sections) == len(set(sections))
    assert len(ports) == len(set(ports))


@pytest.mark.parametrize("kind", list(Topology))
def test_the_default_router_is_the_topologys_own(kind: Topology) -> None:
    spec = parse_spec(spec_dict(topology=kind.value), source="t")
    assert router_kind(spec) is TOPOLOGIES[kind].default_router


def _kind_branches(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in ("Topology", "RouterKind")
    ]


def test_only_the_units_name_a_kind() -> None:
    outside = [
        path
        for path in (ROOT / "generator").rglob("*.py")
        if not str(path.relative_to(ROOT)).startswith(_KIND_HOMES)
        and str(path.relative_to(ROOT)) != _PARTS
    ]
    assert [hit for path in outside for hit in _kind_branches(path)] == []
