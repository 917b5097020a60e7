"""What `bench` keeps of an observed stack's Prometheus: the dashboard's key panels (the same
queries), their lines named as Grafana names them, NaN (no traffic) left out. The range
queries against a live Prometheus are not in CI yet (the answers below are shaped as
Prometheus's range API answers, written by hand)."""

from __future__ import annotations

import math

import pytest

from generator.paths import Workspace
from generator.probes.prometheus_history import _line, key_panels, legend_of
from tests.observe.helpers import observed_plan


@pytest.mark.parametrize("stack", ["cpu-lmcache-pd", "cpu-1p1d", "xpyd-mp-2host"])
def test_the_key_panels_are_the_dashboards_own(workspace: Workspace, stack: str) -> None:
    titles = [panel.title for panel in key_panels(observed_plan(workspace, stack))]
    assert titles[:2] == ["TTFT", "Requests"]
    assert "KV cache usage" in titles
    assert any(title.startswith("KV GiB/s") for title in titles)
    assert "Decoders' local_compute share" in titles


def test_a_colocated_baseline_has_no_kv_panels(workspace: Workspace) -> None:
    plan = observed_plan(workspace, "cpu-1p1d", "topology=colocated", "lmcache={}")
    titles = [panel.title for panel in key_panels(plan)]
    assert "TTFT" in titles
    assert not [title for title in titles if "KV GiB/s" in title or "local_compute" in title]


def test_legends_are_filled_as_grafana_fills_them() -> None:
    assert legend_of("p90 {{role}}", {"role": "decode"}) == "p90 decode"
    assert legend_of("{{ engine }} on {{host}}", {"engine": "d0", "host": "h"}) == "d0 on h"
    assert legend_of("{{missing}}", {}) == "?"


def test_nan_points_are_left_out() -> None:
    result = {
        "metric": {"engine": "prefill-0"},
        "values": [[100.0, "0.25"], [105.0, "NaN"], [110.0, "0.5"]],
    }
    line = _line("{{engine}}", result)
    assert line.legend == "prefill-0"
    assert line.points == ((100.0, 0.25), (110.0, 0.5))
    assert not any(math.isnan(v) for _, v in line.points)
