"""generator/stack.py: the spec's own rules, then its units' (topology, router), reported as
one refusal; ``generator.spec`` alone knows no unit."""

from __future__ import annotations

import pytest

from generator.errors import SpecError
from generator.spec import validate_spec
from generator.stack import UNIT_RULES, parse_spec
from tests.conftest import spec_dict


def _unequal_tp() -> dict[str, object]:
    """lmcache-pd with prefill TP 2 and decode TP 1: only the topology's rule refuses it."""
    return spec_dict(topology="lmcache-pd", prefill={"tp": 2}, decode={"tp": 1})


def test_the_spec_alone_runs_no_unit_rule() -> None:
    assert validate_spec(_unequal_tp(), source="t", rules=()).prefill.tp == 2


def test_the_stack_adds_the_units_rules_to_the_specs_own() -> None:
    data = _unequal_tp() | {"hosts": [{"name": "h", "gpus": [0, 1, 2]}], "router": {"host": "x"}}
    with pytest.raises(SpecError) as caught:
        parse_spec(data, source="t")
    fields = [issue.field for issue in caught.value.issues]
    assert fields == ["prefill.tp", "router.host"]  # the units' first, then the spec's own


def test_the_unit_rules_are_the_topologys_the_routers_and_the_runtimes() -> None:
    assert [rule.__name__ for rule in UNIT_RULES] == [
        "topology_issues",
        "router_issues",
        "runtime_issues",
    ]
