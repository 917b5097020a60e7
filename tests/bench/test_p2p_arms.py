"""`bench --p2p on,off`: one nixl-mp arm with LMCache P2P on and one with it off, in the order
given, each planned before anything starts; bad lists and other topologies refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from generator.bench import ArmOptions, BenchJob
from generator.bench.p2p_arms import p2p_spec, parse_p2p
from generator.errors import SpecError
from generator.paths import Workspace
from generator.planner import make_plan
from generator.services.bench import Preset, preset_settings
from generator.spec import Spec
from generator.stack import load_spec
from tests.conftest import ROOT


def spec_of(stack: str) -> Spec:
    return load_spec(Workspace(ROOT).stack_file(stack))


def job(stack: str, states: str) -> BenchJob:
    spec = spec_of(stack)
    return BenchJob(
        spec,
        make_plan(spec),
        Preset.SMOKE,
        preset_settings(Preset.SMOKE),
        ArmOptions((), point_timeout_s=60),
        baseline=False,
        down=False,
        folder=Path("unused"),
        p2p=parse_p2p(states),
    )


@pytest.mark.parametrize("stack", ["cpu-p2p", "cpu-1p1d"])
def test_the_arms_turn_p2p_on_and_off_whatever_the_stack_says(stack: str) -> None:
    arms = job(stack, "on,off").arm_plans()
    assert [name for name, _ in arms] == ["p2p-on", "p2p-off"]
    on, off = (plan for _, plan in arms)
    assert on.sidecars[0].service == "lmcache-coordinator"
    assert all(s.engine is not None for s in off.sidecars)
    assert on.stack == off.stack == stack  # the same stack, one arm after the other


def test_p2p_on_keeps_the_stacks_own_settings() -> None:
    spec = load_spec(Workspace(ROOT).stack_file("cpu-p2p"), ["lmcache.p2p.lookup_timeout_s=5"])
    on = p2p_spec(spec, on=True)
    assert on.lmcache.p2p is not None
    assert on.lmcache.p2p.lookup_timeout_s == 5
    assert p2p_spec(spec, on=False).lmcache.p2p is None


@pytest.mark.parametrize(
    ("text", "message"),
    [("maybe", "'maybe' is not a P2P state"), ("on,on", "each once"), ("", "'' is not")],
)
def test_bad_lists_are_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_p2p(text)


def test_lmcache_pd_stacks_are_refused_before_anything_starts() -> None:
    with pytest.raises(SpecError) as refused:
        job("cpu-lmcache-pd", "on,off").arm_plans()
    assert "cpu-lmcache-pd with bench --p2p on" in str(refused.value)
    assert "lmcache.p2p: applies to topology nixl-mp" in str(refused.value)


@given(st.text(max_size=40))
def test_any_text_is_a_list_of_states_or_a_clear_refusal(text: str) -> None:
    items = [item.strip().lower() for item in text.split(",")]
    valid = set(items) <= {"on", "off"} and len(set(items)) == len(items)
    if not valid:
        with pytest.raises(ValueError, match=r"P2P state|each once"):
            parse_p2p(text)
        return
    assert parse_p2p(text) == tuple(item == "on" for item in items)
