"""The report's PNGs (matplotlib, no display): TTFT and ITL distributions per load point,
throughput per point, and latency and goodput against load. Per-request numbers come from
vLLM's detailed result JSON (`--save-detailed`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from generator.bench.report import BenchReport

__all__ = ["draw_plots"]

_MS = 1000.0


def draw_plots(report: BenchReport) -> list[str]:
    """Writes the PNGs into the report's folder; their names, relative to it."""
    import matplotlib

    matplotlib.use("Agg")  # files only: CI and ssh sessions have no display
    samples = {
        arm.arm: [_samples(report.folder, arm.arm, p.result_file) for p in arm.points]
        for arm in report.arms
    }
    drawn = [
        _distribution(report, samples, "ttfts", ("TTFT (ms)", "requests"), "ttft.png"),
        _distribution(
            report, samples, "itls", ("inter-token latency (ms)", "token gaps"), "itl.png"
        ),
        _throughput(report, "throughput.png"),
        _against_load(report, "latency_vs_load.png"),
    ]
    drawn += [
        _prometheus(report, arm.arm, arm.prometheus_file)
        for arm in report.arms
        if arm.prometheus_file
    ]
    return drawn


def _samples(folder: Path, arm: str, result_file: str) -> dict[str, list[float]]:
    data: dict[str, Any] = json.loads((folder / arm / result_file).read_text(encoding="utf-8"))
    ttfts = [t * _MS for t in data.get("ttfts", []) if t]
    itls = [gap * _MS for gaps in data.get("itls", []) for gap in gaps]
    return {"ttfts": ttfts, "itls": itls}


def _labels(report: BenchReport) -> list[str]:
    return [point.label for point in report.arms[0].points]


def _distribution(
    report: BenchReport,
    samples: dict[str, list[dict[str, list[float]]]],
    key: str,
    axes_titles: tuple[str, str],
    name: str,
) -> str:
    """Empirical CDFs, one panel per load point, one line per arm."""
    import matplotlib.pyplot as plt

    labels = _labels(report)
    figure, axes = plt.subplots(1, len(labels), figsize=(5 * len(labels), 4), squeeze=False)
    for index, (panel, label) in enumerate(zip(axes[0], labels, strict=True)):
        for arm, per_point in samples.items():
            values = sorted(per_point[index][key]) if index < len(per_point) else []
            if values:
                fractions = [0.0] + [(i + 1) / len(values) for i in range(len(values))]
                panel.step(
                    [values[0], *values], fractions, where="post", label=f"{arm} (n={len(values)})"
                )
        ylabel = f"fraction of {axes_titles[1]}" if index == 0 else ""
        panel.set(title=label, xlabel=axes_titles[0], ylabel=ylabel)
        panel.grid(alpha=0.3)
        panel.legend()
    figure.suptitle(f"{report.stack}: {axes_titles[0].split(' (', maxsplit=1)[0]} distribution")
    return _save(figure, report.folder / name)


def _throughput(report: BenchReport, name: str) -> str:
    import matplotlib.pyplot as plt

    labels = _labels(report)
    width = 0.8 / max(1, len(report.arms) + (1 if report.reference else 0))
    figure, panel = plt.subplots(figsize=(max(6, 2.5 * len(labels)), 4))
    for offset, arm in enumerate(report.arms):
        values = [p.metrics.get("output_throughput") or 0.0 for p in arm.points]
        xs = [i + offset * width for i in range(len(values))]
        bars = panel.bar(xs, values, width, label=arm.arm)
        panel.bar_label(bars, fmt="%.1f", fontsize="small")
    if report.reference:
        figure_value = report.reference.metrics["output_throughput"]
        panel.axhline(figure_value, color="grey", linestyle="--", label="seed A, published")
    panel.set_xticks([i + width * (len(report.arms) - 1) / 2 for i in range(len(labels))], labels)
    panel.set(ylabel="output tokens/s", title=f"{report.stack}: output throughput")
    panel.grid(axis="y", alpha=0.3)
    panel.legend()
    return _save(figure, report.folder / name)


def _against_load(report: BenchReport, name: str) -> str:
    """Mean and p99 TTFT, mean ITL and goodput (or request throughput without an SLO) at
    each load point: where P/D and colocated cross over."""
    import matplotlib.pyplot as plt

    labels = _labels(report)
    goodput = bool(report.settings.goodput_slo_ms)
    panels = (
        ("TTFT (ms)", ("mean_ttft_ms", "p99_ttft_ms")),
        ("ITL (ms)", ("mean_itl_ms", "p99_itl_ms")),
        (
            "goodput (req/s)" if goodput else "requests/s",
            ("request_goodput",) if goodput else ("request_throughput",),
        ),
    )
    figure, axes = plt.subplots(1, len(panels), figsize=(15, 4))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for panel, (title, keys) in zip(axes, panels, strict=True):
        for color, arm in zip(colors, report.arms, strict=False):
            for key in keys:
                values = [p.metrics.get(key) or 0.0 for p in arm.points]
                style = "--" if key.startswith("p99") else "-"
                stat = key.split("_")[0] if key.startswith(("mean", "p99")) else ""
                panel.plot(
                    labels[: len(values)],
                    values,
                    style,
                    color=color,
                    marker="o",
                    label=f"{arm.arm} {stat}".strip(),
                )
        panel.set(title=title, xlabel="load")
        panel.grid(alpha=0.3)
        panel.legend(fontsize="small")
    figure.suptitle(f"{report.stack}: latency and goodput against load")
    return _save(figure, report.folder / name)


def _prometheus(report: BenchReport, arm: str, history_file: str) -> str:
    """The key dashboard panels over the arm's load points, from its Prometheus (observed
    stacks): one panel above another, seconds since the first point on a shared axis."""
    import matplotlib.pyplot as plt

    histories: list[dict[str, Any]] = json.loads(
        (report.folder / history_file).read_text(encoding="utf-8")
    )
    stamps = [t for h in histories for line in h["lines"] for t, _ in line["points"]]
    origin = min(stamps, default=0.0)
    figure, axes = plt.subplots(
        len(histories), 1, figsize=(9, 2.4 * max(1, len(histories))), squeeze=False, sharex=True
    )
    for panel, history in zip(axes[:, 0], histories, strict=True):
        for line in history["lines"]:
            xs = [t - origin for t, _ in line["points"]]
            panel.plot(xs, [v for _, v in line["points"]], label=line["legend"])
        if history["threshold"] is not None:
            panel.axhline(history["threshold"], color="grey", linestyle="--", label="alert at")
        empty = "" if history["lines"] else " (no data)"
        panel.set(title=f"{history['title']}{empty}", ylabel=history["unit"])
        panel.grid(alpha=0.3)
        if history["lines"]:
            panel.legend(fontsize="small", loc="upper right")
    axes[-1, 0].set(xlabel="seconds since the first load point")
    figure.suptitle(f"{report.stack} ({arm}): Prometheus over the benchmark")
    return _save(figure, report.folder / f"prometheus-{arm}.png")


def _save(figure: Any, path: Path) -> str:
    import matplotlib.pyplot as plt

    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path.name
