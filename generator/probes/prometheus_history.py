"""The key series of an observed stack over a time window, from its Prometheus's range API:
what `bench` plots beside its report. The queries are the dashboard's own panels (asked as
Grafana asks them), so the plots and the dashboard cannot disagree."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from generator.observe.panels import PanelSpec, dashboard_rows
from generator.plan import Plan
from generator.probes.http import ProbeClient
from generator.probes.prometheus import Prometheus, as_grafana_asks, prometheus_url

__all__ = ["Line", "PanelHistory", "fetch_history", "key_panels", "legend_of"]

# The panels a benchmark's reader wants over time: latency, load, the KV path's speed and
# whether the decoders recompute, and whether decode's KV cache is the bottleneck.
_KEY_TITLES = ("TTFT", "Requests", "KV cache usage", "Decoders' local_compute share")
_KEY_PREFIXES = ("KV GiB/s",)
_LEGEND_FIELD = re.compile(r"\{\{\s*(\w+)\s*\}\}")


@dataclass(frozen=True)
class Line:
    legend: str
    points: tuple[tuple[float, float], ...]  # (unix seconds, value); NaN left out


@dataclass
class PanelHistory:
    title: str
    unit: str
    threshold: float | None
    lines: list[Line] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # queries Prometheus refused


def key_panels(plan: Plan) -> list[PanelSpec]:
    panels = [panel for row in dashboard_rows(plan) for panel in row.panels]
    return [
        panel
        for panel in panels
        if panel.title in _KEY_TITLES or panel.title.startswith(_KEY_PREFIXES)
    ]


def legend_of(template: str, labels: dict[str, str]) -> str:
    """Grafana's legend template filled in ("p90 {{role}}" -> "p90 decode")."""
    return _LEGEND_FIELD.sub(lambda match: labels.get(match.group(1), "?"), template)


def fetch_history(
    plan: Plan, start: float, end: float, *, step_s: float | None = None
) -> list[PanelHistory]:
    """Each key panel's lines over [start, end] (unix seconds), a point per scrape."""
    observe = plan.observe
    if observe is None:
        return []
    step = step_s or float(observe.scrape_interval_s)
    histories = []
    with ProbeClient(plan.stack, timeout_s=30.0) as client:
        prometheus = Prometheus(client, prometheus_url(plan))
        for panel in key_panels(plan):
            history = PanelHistory(panel.title, panel.unit, panel.threshold)
            for query, legend in panel.queries:
                asked = as_grafana_asks(query.expr)
                body = _range(prometheus, asked, start, end, step)
                if body.get("status") != "success":
                    history.errors.append(f"{asked}: {body.get('error', body)}")
                    continue
                history.lines += [_line(legend, result) for result in body["data"]["result"]]
            histories.append(history)
    return histories


def _range(
    prometheus: Prometheus, expr: str, start: float, end: float, step: float
) -> dict[str, Any]:
    params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
    return prometheus.get("/api/v1/query_range", params)


def _line(legend: str, result: dict[str, Any]) -> Line:
    points = []
    for stamp, text in result.get("values", []):
        value = float(text)
        if not math.isnan(value):  # 0/0 rates with no traffic: no point on the plot
            points.append((float(stamp), value))
    return Line(legend_of(legend, result.get("metric", {})), tuple(points))
