"""The P/D verdict over answers recorded from a live cpu-lmcache-pd stack (real vLLM, LMCache
and our proxy; tests/probes/recorded.py made the file): replayed without the stack, the real
verdict comes to what it said live, row for row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from generator.paths import Workspace
from generator.planner import make_plan
from generator.probes import run_smoke
from generator.stack import load_spec
from tests.probes.recorded import ReplayTransport

RECORDED = Path(__file__).parent / "recorded"


def _no_read_inside(service: str, url: str) -> str:
    raise AssertionError(f"lmcache-pd has no LMCache server to read ({service} {url})")


@pytest.mark.parametrize("name", ["cpu-lmcache-pd.json"])
def test_a_recorded_live_smoke_replays_to_the_same_verdict(workspace: Workspace, name: str) -> None:
    recorded = json.loads((RECORDED / name).read_text(encoding="utf-8"))
    plan = make_plan(load_spec(workspace.stack_file(recorded["stack"])))
    transport = ReplayTransport(plan, recorded["exchanges"])
    result = run_smoke(
        plan,
        nonce=recorded["nonce"],
        read_inside=_no_read_inside,
        transport=transport,
        logs=lambda services: "\n".join(recorded["logs"]),
    )
    assert [[row.check, row.observed, row.mark] for row in result.rows] == recorded["rows"]
    assert result.passed is recorded["passed"] is True
    rows = {row.check: row for row in result.rows}
    moved = int(rows["prompt tokens from prefill (decode: external_kv_transfer)"].observed)
    assert moved > 0
    assert rows["prompt tokens computed on decode (local_compute)"].observed == "2"
