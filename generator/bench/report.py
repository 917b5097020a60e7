"""The benchmark's report: bench.json (everything, machine-readable) and bench.md (the arms
side by side per load point), beside vLLM's own result JSONs and the plots."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from generator.bench.results import ArmResult, PointResult
from generator.owned import write_text
from generator.services.bench import BenchSettings, Preset

__all__ = ["SEED_A", "BenchReport", "Reference", "write_report"]


@dataclass(frozen=True)
class Reference:
    """Published figures of another setup: shown beside ours, never compared as equals."""

    source: str
    hardware: str
    metrics: dict[str, float]


# LMCache's examples/disagg_prefill/xpyd README, "Expected output from the benchmark script".
SEED_A = Reference(
    source="LMCache examples/disagg_prefill/xpyd README (seed A), published",
    hardware="2 prefill + 2 decode vLLM on one node with at least 4 GPUs (GPU model not "
    "stated), Llama-3.1-8B-Instruct, LMCache P/D over NIXL",
    metrics={
        "completed": 30,
        "duration": 31.34,
        "request_throughput": 0.96,
        "output_throughput": 191.44,
        "total_token_throughput": 7369.36,
        "mean_ttft_ms": 313.41,
        "median_ttft_ms": 272.83,
        "p99_ttft_ms": 837.32,
        "mean_tpot_ms": 8.84,
        "median_tpot_ms": 8.72,
        "p99_tpot_ms": 11.35,
        "mean_itl_ms": 8.84,
        "median_itl_ms": 8.61,
        "p99_itl_ms": 11.43,
    },
)

# Each load point sets these itself (bench.json's points carry them).
_PER_POINT = ("request_rate", "max_concurrency", "detailed")
_ROWS = (
    ("completed", "completed requests", "{:.0f}"),
    ("failed", "failed requests", "{:.0f}"),
    ("request_throughput", "request throughput (req/s)", "{:.2f}"),
    ("request_goodput", "goodput at the SLO (req/s)", "{:.2f}"),
    ("output_throughput", "output throughput (tok/s)", "{:.1f}"),
    ("total_token_throughput", "total token throughput (tok/s)", "{:.1f}"),
    *(
        (f"{stat}_{metric}_ms", f"{stat} {label} (ms)", "{:.2f}")
        for metric, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2E"))
        for stat in ("mean", "median", "p99")
    ),
)


@dataclass
class BenchReport:
    stack: str
    preset: str
    settings: BenchSettings  # the common settings (each point sets its own load)
    hardware: str
    folder: Path
    arms: list[ArmResult] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)

    @property
    def reference(self) -> Reference | None:
        return SEED_A if self.preset == Preset.SEED_XPYD.value else None

    @property
    def valid(self) -> bool:
        return bool(self.arms) and all(arm.valid for arm in self.arms)

    def as_dict(self) -> dict[str, Any]:
        reference = self.reference
        return {
            "stack": self.stack,
            "preset": self.preset,
            "hardware": self.hardware,
            "valid": self.valid,
            "settings": {
                key: value
                for key, value in self.settings.as_dict().items()
                if key not in _PER_POINT
            },
            "arms": [arm.as_dict() for arm in self.arms],
            "reference": vars(reference) if reference else None,
            "plots": self.plots,
        }


def write_report(report: BenchReport) -> tuple[Path, Path]:
    folder = report.folder
    data_file = write_text(folder, folder / "bench.json", json.dumps(report.as_dict(), indent=2))
    return data_file, write_text(folder, folder / "bench.md", markdown(report))


def markdown(report: BenchReport) -> str:
    lines = [f"# Benchmark: {report.stack} ({report.preset} preset)", ""]
    lines += [f"Hardware: {report.hardware}", "", _settings_line(report.settings), ""]
    if not report.valid:
        lines += ["**INVALID**: a stack's smoke verdict failed; its numbers are not P/D's.", ""]
    lines += [_arm_line(arm) for arm in report.arms] + [""]
    if report.reference:
        lines += [f"Reference: {report.reference.source}: {report.reference.hardware}.", ""]
    lines += ["## Summary: a row per load point and arm", "", *_summary(report), ""]
    for index, label in enumerate(_labels(report)):
        lines += [f"## {label}", "", *_table(report, index), ""]
        lines += _ttft_table(report, index)
    lines += [f"![{Path(plot).stem}]({plot})" for plot in report.plots]
    lines += [
        f"\n{arm.arm}: Prometheus's own graph of the KV path's speed during the load points\n\n"
        f"![prometheus-kv-speed-{arm.arm}]({arm.prometheus_screenshot})"
        for arm in report.arms
        if arm.prometheus_screenshot
    ]
    return "\n".join(lines).rstrip() + "\n"


def _settings_line(settings: BenchSettings) -> str:
    slo = ", ".join(f"{metric} <= {ms:g} ms" for metric, ms in settings.goodput_slo_ms)
    return (
        f"vLLM `bench serve`, {settings.dataset.describe()} / {settings.output_len} "
        f"output tokens (ignore EOS), {settings.num_prompts} prompts, burstiness "
        f"{settings.burstiness:g}, seed {settings.seed}" + (f"; goodput SLO: {slo}" if slo else "")
    )


def _arm_line(arm: ArmResult) -> str:
    engines = ", ".join(f"{name} ({where})" for name, where in arm.engines.items())
    verdict = "PASS" if arm.verdict_passed else "FAILED (results invalid)"
    kv = "; ".join(
        f"{t['request']}: {t['mib']:.1f} MiB in {t['ms']:.2f} ms"
        + (f" = {t['gib_s']:.2f} GiB/s" if t["gib_s"] else "")
        + (f", {t['descriptors']:.0f} descriptors" if t.get("descriptors") else "")
        + (f" over {t['transport']}" if t["transport"] else "")
        for t in arm.kv_per_request
    )
    line = (
        f"- **{arm.arm}**: {arm.stack} ({arm.topology}, {arm.router}), {engines}; verdict {verdict}"
    )
    line += f"; KV per request (verdict): {kv}" if kv else ""
    return line + _settings_text(arm.engine_settings) + _idle_text(arm.idle_cpu_percent)


def _settings_text(settings: dict[str, str]) -> str:
    if not settings:  # a report written before arms recorded them
        return ""
    return "; engines: " + ", ".join(f"{name} {value}" for name, value in settings.items())


def _idle_text(idle: dict[str, float]) -> str:
    if not idle:
        return ""
    each = ", ".join(f"{service} {percent:.1f}%" for service, percent in idle.items())
    return f"; CPU while idle: {sum(idle.values()):.1f}% of a core in all ({each})"


_SUMMARY = (
    ("request_throughput", "req/s", "{:.2f}"),
    ("request_goodput", "goodput req/s", "{:.2f}"),
    ("output_throughput", "output tok/s", "{:.1f}"),
    ("mean_ttft_ms", "mean TTFT ms", "{:.1f}"),
    ("p99_ttft_ms", "p99 TTFT ms", "{:.1f}"),
    ("mean_itl_ms", "mean ITL ms", "{:.2f}"),
    ("p99_itl_ms", "p99 ITL ms", "{:.2f}"),
)


def _summary(report: BenchReport) -> list[str]:
    header = ["load", "arm", *(title for _, title, _ in _SUMMARY), "KV tokens", "prefix hit %"]
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for index, label in enumerate(_labels(report)):
        for arm in report.arms:
            if index >= len(arm.points):
                continue
            point = arm.points[index]
            cells = [_cell(point.metrics.get(key), shape) for key, _, shape in _SUMMARY]
            cells += [f"{point.kv_tokens:.0f}", _percent(point.cache.hit_rate)]
            rows.append("| " + " | ".join([label, arm.arm, *cells]) + " |")
    return rows


def _labels(report: BenchReport) -> list[str]:
    return [point.label for point in report.arms[0].points] if report.arms else []


def _table(report: BenchReport, index: int) -> list[str]:
    arms = [(arm.arm, arm.points[index]) for arm in report.arms if index < len(arm.points)]
    reference = report.reference
    header = ["metric", *(name for name, _ in arms)] + (["seed A (published)"] if reference else [])
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for key, title, shape in _ROWS:
        cells = [_cell(point.metrics.get(key), shape) for _, point in arms]
        if reference:
            cells.append(_cell(reference.metrics.get(key), shape))
        rows.append("| " + " | ".join([title, *cells]) + " |")
    for title, value in _kv_rows(arms):
        rows.append("| " + " | ".join([title, *value] + (["-"] if reference else [])) + " |")
    return rows


def _ttft_table(report: BenchReport, index: int) -> list[str]:
    """The mean TTFT split into the parts the engines time (probes/ttft_parts.py says how)."""
    arms = [(arm.arm, arm.points[index]) for arm in report.arms if index < len(arm.points)]
    parts: dict[str, str] = {}  # every arm's parts, in order, with their sources
    for _, point in arms:
        for part in point.ttft_parts:
            parts.setdefault(part.part, part.source)
    if not parts:
        return []
    header = ["where the mean TTFT goes (ms)", *(name for name, _ in arms), "source"]
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, source in parts.items():
        cells = [_cell(_part_ms(point, name), "{:.1f}") for _, point in arms]
        rows.append("| " + " | ".join([name, *cells, source]) + " |")
    return [*rows, ""]


def _part_ms(point: PointResult, name: str) -> float | None:
    return next((part.mean_ms for part in point.ttft_parts if part.part == name), None)


def _kv_rows(arms: list[tuple[str, PointResult]]) -> list[tuple[str, list[str]]]:
    return [
        ("prompt tokens received as KV", [f"{p.kv_tokens:.0f}" for _, p in arms]),
        ("prompt tokens computed locally", [f"{p.local_tokens:.0f}" for _, p in arms]),
        ("KV moved per request (MiB)", [_cell(p.kv_mib_per_request, "{:.2f}") for _, p in arms]),
        ("KV transfer rate (GiB/s, NIXL)", [_cell(p.kv_gib_s, "{:.3f}") for _, p in arms]),
        (
            "KV descriptors per request (NIXL)",
            [_cell(p.kv_descriptors_per_request, "{:.0f}") for _, p in arms],
        ),
        ("prefillers' prefix cache hits (vLLM, %)", [_percent(p.cache.hit_rate) for _, p in arms]),
        (
            "prefillers' KV connector hits (LMCache, %)",
            [_percent(p.cache.external_hit_rate) for _, p in arms],
        ),
    ]


def _percent(rate: float | None) -> str:
    return _cell(None if rate is None else 100 * rate, "{:.1f}")


def _cell(value: float | None, shape: str) -> str:
    return "-" if value is None else shape.format(value)
