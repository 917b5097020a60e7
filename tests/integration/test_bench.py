"""`bench` for real on cpu-1p1d with the colocated baseline and a two-point concurrency
sweep: vLLM's own `bench serve` in a one-off container of each stack; the report's numbers
are vLLM's, the P/D arm moved KV and the baseline none, plots that open, nothing left.
(Ctrl+C during a point: tests/integration/test_cpu_stack.py, on the stack it has up.)"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import ROOT, cli, project_states

pytestmark = pytest.mark.stack
STACK = "cpu-1p1d"
PROMPTS = 4
RUN_ID = f"pytest-bench-{int(time.time())}"


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    started = time.monotonic()
    result = cli(
        "bench", STACK, "--baseline", "colocated", "--run-id", RUN_ID,
        "--num-prompts", str(PROMPTS), "--input-len", "128", "--output-len", "8",
        "--max-concurrency", "1,4", "--goodput", "ttft:5000,tpot:1000",
    )  # fmt: skip
    print(f"bench {STACK} with baseline: {time.monotonic() - started:.0f} s", file=sys.stderr)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    data: dict[str, Any] = json.loads((folder() / "bench.json").read_text())
    data["_stdout"] = result.stdout
    return data


def folder() -> Path:
    return ROOT / "runs" / RUN_ID


def test_each_arm_passed_its_verdict_and_ran_every_point(report: dict[str, Any]) -> None:
    assert report["valid"] is True
    assert [arm["arm"] for arm in report["arms"]] == ["pd", "colocated"]
    assert [arm["topology"] for arm in report["arms"]] == ["nixl-mp", "colocated"]
    for arm in report["arms"]:
        assert arm["verdict_passed"] is True
        assert [p["label"] for p in arm["points"]] == [
            "all at once, concurrency 1",
            "all at once, concurrency 4",
        ]


def test_the_reports_numbers_are_vllms_own(report: dict[str, Any]) -> None:
    for arm in report["arms"]:
        for point in arm["points"]:
            written = json.loads((folder() / arm["arm"] / point["result_file"]).read_text())
            assert written["completed"] == PROMPTS == point["metrics"]["completed"]
            assert written["num_prompts"] == PROMPTS
            for key, value in point["metrics"].items():
                assert value == written[key], key
            for key in ("mean_ttft_ms", "mean_itl_ms", "mean_e2el_ms", "request_throughput"):
                assert point["metrics"][key] > 0, key
            assert point["metrics"]["request_goodput"] is not None  # the SLO reached vLLM
            assert len(written["ttfts"]) == PROMPTS  # per-request detail for the plots


def test_pd_moved_kv_and_the_baseline_none(report: dict[str, Any]) -> None:
    pd, colocated = report["arms"]
    for point in pd["points"]:
        assert point["kv_tokens"] > 0
        assert point["kv_bytes"] > 0
        assert point["kv_mib_per_request"] > 0
    assert pd["kv_per_request"]
    assert all(t["mib"] > 0 for t in pd["kv_per_request"])
    for point in colocated["points"]:
        assert point["kv_tokens"] == 0
        assert point["kv_bytes"] is None
        assert point["local_tokens"] >= PROMPTS * 128  # every prompt computed where it ran
    assert colocated["engines"] == pd["engines"]  # same cores, same names


def test_idle_cpu_was_sampled_for_every_service(report: dict[str, Any]) -> None:
    for arm in report["arms"]:
        idle = arm["idle_cpu_percent"]
        assert set(arm["engines"]) | {"router"} <= set(idle)
        assert all(percent >= 0 for percent in idle.values())
        # An idle engine used ~94% of its core before the cpu image gave NIXL's progress
        # thread a poll timeout; now ~3%. Half a core catches the regression on a busy runner.
        for engine in arm["engines"]:
            assert idle[engine] < 50, (engine, idle)


def test_report_files_and_plots(report: dict[str, Any]) -> None:
    import matplotlib.image

    text = (folder() / "bench.md").read_text()
    assert "| metric | pd | colocated |" in text
    assert "## all at once, concurrency 4" in text
    assert "| metric | pd | colocated |" in report["_stdout"]
    for name in report["plots"]:
        pixels = matplotlib.image.imread(folder() / name)
        assert pixels.shape[0] >= 300
        assert pixels.std() > 0.05


def test_nothing_is_left_running(report: dict[str, Any]) -> None:
    assert not project_states(ROOT, STACK, "xpyd-cpu-1p1d")
    assert not project_states(ROOT, f"{STACK}-colocated", "xpyd-cpu-1p1d-colocated")
