"""What `observe` asks the live Prometheus (the asking itself runs for real in
tests/integration/test_cpu_lmcache_pd.py): every panel query with Grafana's variables filled
in as Grafana fills them at "All", and every recorded series."""

from __future__ import annotations

import pytest

from generator.observe.panels import dashboard_rows
from generator.observe.rules import recording_rules
from generator.paths import Workspace
from generator.probes.prometheus import as_grafana_asks, asked_queries
from tests.observe.helpers import observed_plan


@pytest.mark.parametrize("stack", ["cpu-lmcache-pd", "cpu-1p1d", "xpyd-mp-2host"])
def test_every_panel_query_and_recorded_series_is_asked_without_variables(
    workspace: Workspace, stack: str
) -> None:
    plan = observed_plan(workspace, stack)
    asked = asked_queries(plan)
    panels = sum(len(p.queries) for row in dashboard_rows(plan) for p in row.panels)
    assert len(asked) == panels + len(recording_rules(plan))
    for source, expr in asked:
        filled = as_grafana_asks(expr)
        assert "$" not in filled, (source, filled)
    assert as_grafana_asks('rate(x{engine=~"$engine"}[$__rate_interval])') == (
        'rate(x{engine=~".*"}[1m])'
    )
