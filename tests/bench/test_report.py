"""The report from vLLM's result files: numbers taken as vLLM wrote them, arms side by side,
seed A beside seed-preset runs, INVALID when a verdict failed, plots that open.

The result files here are stand-ins written in the shape `vllm bench serve --save-result
--save-detailed` writes (its keys as of vLLM 0.32); the real ones are read by
tests/integration/test_cpu_stack.py."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from generator.bench.plots import draw_plots
from generator.bench.report import SEED_A, BenchReport, markdown, write_report
from generator.bench.results import METRICS, ArmResult, read_point
from generator.errors import StackError
from generator.probes.engine_counters import EngineCounters
from generator.probes.kv_speed import KvCounters
from generator.probes.ttft_parts import TtftPart
from generator.services.bench import Preset, preset_settings

SETTINGS = preset_settings(Preset.SMOKE)


def vllm_result(completed: int, ttft_s: float) -> dict[str, Any]:
    """A stand-in of vLLM's result JSON (the keys the report reads, and the per-request
    lists --save-detailed adds)."""
    data: dict[str, Any] = {key: 1.5 for key in METRICS}
    data |= {"completed": completed, "failed": 0, "request_goodput": None}
    data |= {"mean_ttft_ms": ttft_s * 1000, "ttfts": [ttft_s] * completed}
    data |= {"itls": [[0.01, 0.02, 0.03]] * completed, "date": "20261201-050000"}
    return data


def arm_folder(root: Path, arm: str, completed: int, ttft_s: float) -> Path:
    path = root / arm / "bench" / "point-0.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(vllm_result(completed, ttft_s)))
    return path


def arm(root: Path, name: str, *, kv_tokens: float, passed: bool = True) -> ArmResult:
    path = arm_folder(root, name, 8, 0.2 if name == "pd" else 0.1)
    counters = EngineCounters(kv_tokens, 2048.0, {"prefill-0": 4.0, "decode-0": 4.0})
    kv = KvCounters(8 * (1 << 20), 0.5, 8.0, 8 * 2 * 32) if kv_tokens else None
    result = ArmResult(
        name,
        f"s-{name}",
        "nixl-mp",
        "vllm-router",
        {"prefill-0": "core 0"},
        str(root / name),
        passed,
        {"passed": passed},
        [],
    )
    result.points.append(read_point(path, "all at once", SETTINGS, counters, kv))
    result.idle_cpu_percent = {"decode-0": 1.25, "prefill-0": 0.5}
    return result


def report(root: Path, preset: Preset = Preset.SMOKE, passed: bool = True) -> BenchReport:
    settings = replace(SETTINGS, goodput_slo_ms=(("ttft", 500.0),))
    made = BenchReport("s", preset.value, settings, "cpu profile: test", root)
    made.arms += [
        arm(root, "pd", kv_tokens=2048.0, passed=passed),
        arm(root, "colocated", kv_tokens=0.0),
    ]
    return made


def test_point_numbers_are_vllms_own(tmp_path: Path) -> None:
    point = report(tmp_path).arms[0].points[0]
    written = json.loads((tmp_path / "pd" / point.result_file).read_text())
    assert point.metrics == {key: written[key] for key in METRICS}
    assert point.kv_mib_per_request == pytest.approx(1.0)  # 8 MiB over 8 requests
    assert point.kv_gib_s == pytest.approx(8 / 1024 / 0.5)
    assert point.kv_descriptors_per_request == 64  # K and V of 32 layers, one run of blocks


def test_a_run_that_completed_nothing_is_refused(tmp_path: Path) -> None:
    counters = EngineCounters(0.0, 0.0, {})
    with pytest.raises(StackError, match="completed no request"):
        read_point(arm_folder(tmp_path, "pd", 0, 0.1), "x", SETTINGS, counters, None)


def test_markdown_sets_the_arms_side_by_side(tmp_path: Path) -> None:
    text = markdown(report(tmp_path))
    assert "| metric | pd | colocated |" in text
    assert "| load | arm | req/s | goodput req/s |" in text
    assert "| all at once | colocated | 1.50 | - | 1.5 | 100.0 |" in text
    assert "| prompt tokens received as KV | 2048 | 0 |" in text
    assert "| KV descriptors per request (NIXL) | 64 | - |" in text
    assert "| mean TTFT (ms) | 200.00 | 100.00 |" in text
    assert "goodput SLO: ttft <= 500 ms" in text
    assert "CPU while idle: 1.8% of a core in all (decode-0 1.2%, prefill-0 0.5%)" in text
    assert "INVALID" not in text
    assert "seed A" not in text


def test_seed_preset_runs_show_seed_as_published_with_its_hardware(tmp_path: Path) -> None:
    text = markdown(report(tmp_path, Preset.SEED_XPYD))
    assert "| metric | pd | colocated | seed A (published) |" in text
    assert "| mean TTFT (ms) | 200.00 | 100.00 | 313.41 |" in text
    assert "| mean ITL (ms) | 1.50 | 1.50 | 8.84 |" in text
    assert "| total token throughput (tok/s) | 1.5 | 1.5 | 7369.4 |" in text
    assert SEED_A.hardware in text


def test_a_failed_verdict_marks_the_report_invalid(tmp_path: Path) -> None:
    made = report(tmp_path, passed=False)
    data_file, text_file = write_report(made)
    assert json.loads(data_file.read_text())["valid"] is False
    assert json.loads(data_file.read_text())["arms"][0]["valid"] is False
    assert "**INVALID**" in text_file.read_text()


def test_plots_are_pngs_with_content(tmp_path: Path) -> None:
    import matplotlib.image

    made = report(tmp_path)
    names = draw_plots(made)
    assert names == ["ttft.png", "itl.png", "throughput.png", "latency_vs_load.png"]
    for name in names:
        pixels = matplotlib.image.imread(tmp_path / name)
        height, width = pixels.shape[:2]
        assert height >= 300
        assert width >= 500
        assert pixels.std() > 0.05  # not a blank canvas


def test_an_observed_arm_gets_a_plot_of_its_prometheus_history(tmp_path: Path) -> None:
    import matplotlib.image

    made = report(tmp_path)
    history = [  # as generator/probes/prometheus_history.py keeps it (hand-written lines)
        {
            "title": "TTFT",
            "unit": "s",
            "threshold": None,
            "lines": [{"legend": "p90 decode", "points": [[100.0, 0.2], [105.0, 0.4]]}],
            "errors": [],
        },
        {"title": "KV GiB/s (reads)", "unit": "none", "threshold": 10.0, "lines": [], "errors": []},
    ]
    (tmp_path / "pd" / "prometheus.json").write_text(json.dumps(history))
    made.arms[0] = replace(made.arms[0], prometheus_file="pd/prometheus.json")
    names = draw_plots(made)
    assert names[-1] == "prometheus-pd.png"
    pixels = matplotlib.image.imread(tmp_path / "prometheus-pd.png")
    assert pixels.shape[0] >= 400
    assert pixels.std() > 0.05


def test_the_ttft_parts_are_a_table_of_both_arms_with_their_sources(tmp_path: Path) -> None:
    made = report(tmp_path)
    pd, colocated = made.arms[0], made.arms[1]
    pd.points[0] = replace(
        pd.points[0],
        ttft_parts=[TtftPart("prefiller: queue", 5.0, "vLLM q"), TtftPart("rest", 1.0, "diff")],
    )
    colocated.points[0] = replace(colocated.points[0], ttft_parts=[TtftPart("rest", 2.5, "diff")])
    text = markdown(made)
    assert "| where the mean TTFT goes (ms) | pd | colocated | source |" in text
    assert "| prefiller: queue | 5.0 | - | vLLM q |" in text
    assert "| rest | 1.0 | 2.5 | diff |" in text
    data = json.loads(write_report(made)[0].read_text())
    assert data["arms"][0]["points"][0]["ttft_parts"][0]["mean_ms"] == 5.0


def test_no_ttft_parts_no_table(tmp_path: Path) -> None:
    assert "where the mean TTFT goes" not in markdown(report(tmp_path))
