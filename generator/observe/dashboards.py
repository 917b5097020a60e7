"""Grafana: the stack's dashboard built with grafana-foundation-sdk's typed builders (the
panels are data in panels.py; the engines, roles and hosts variables come from the plan),
and the provisioning that hands Grafana its Prometheus data source and the dashboard."""

from __future__ import annotations

import json
from typing import Any, Final

from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import prometheus as gp
from grafana_foundation_sdk.builders import timeseries as gt
from grafana_foundation_sdk.builders.common import GraphThresholdsStyleConfig
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models.common import GraphThresholdsStyleMode

from generator.observe.panels import PanelSpec, dashboard_rows
from generator.plan import Plan
from generator.plan.observe import PROMETHEUS_SERVICE, ObservePlan

__all__ = [
    "DASHBOARDS_DIR",
    "DATASOURCE_UID",
    "build_dashboard",
    "dashboard_json",
    "dashboard_provider",
    "datasource_config",
]

DATASOURCE_UID: Final = "xpyd-prometheus"
DASHBOARDS_DIR: Final = "/var/lib/grafana/dashboards"  # where the Grafana service reads them
_DATASOURCE: Final = model.DataSourceRef(type_val="prometheus", uid=DATASOURCE_UID)
_PANEL_WIDTH: Final = 12  # two panels a row of Grafana's 24 columns
_PANEL_HEIGHT: Final = 8


def _variable(name: str, values: list[str]) -> gd.CustomVariable:
    """A multi-select over the plan's own values, all selected by default."""
    return (
        gd.CustomVariable(name)
        .label(name)
        .values(",".join(values))
        .multi(True)
        .include_all(True)
        .current(model.VariableOption(selected=True, text="All", value="$__all"))
    )


def _panel(spec: PanelSpec) -> gt.Panel:
    panel = (
        gt.Panel()
        .title(spec.title)
        .unit(spec.unit)
        .datasource(_DATASOURCE)
        .span(_PANEL_WIDTH)
        .height(_PANEL_HEIGHT)
    )
    if spec.description:
        panel = panel.description(spec.description)
    for index, (query, legend) in enumerate(spec.queries):
        target = gp.Dataquery().expr(query.expr).legend_format(legend).ref_id(chr(ord("A") + index))
        panel = panel.with_target(target.datasource(_DATASOURCE))
    if spec.threshold is not None:
        steps = [model.Threshold(None, "green"), model.Threshold(spec.threshold, "red")]
        thresholds = gd.ThresholdsConfig().mode(model.ThresholdsMode.ABSOLUTE).steps(steps)
        style = GraphThresholdsStyleConfig().mode(GraphThresholdsStyleMode.DASHED)
        panel = panel.thresholds(thresholds).thresholds_style(style)
    return panel


def build_dashboard(plan: Plan) -> model.Dashboard:
    builder = (
        gd.Dashboard(f"xpyd {plan.stack}")
        .uid(f"xpyd-{plan.stack}")
        .tags(["xpyd", plan.topology.kind.value])
        .time("now-1h", "now")
        .refresh("10s")
        .readonly()
        .with_variable(_variable("engine", [e.name for e in plan.engines] + [plan.router.service]))
        .with_variable(_variable("role", ["prefill", "decode", "lmcache", "router"]))
        .with_variable(_variable("host", [host.name for host in plan.hosts]))
    )
    ids = iter(range(1, 10_000))  # Grafana wants every panel's id unique; the SDK sets none
    for row in dashboard_rows(plan):
        builder = builder.with_row(gd.Row(row.title).id(next(ids)))
        for spec in row.panels:
            builder = builder.with_panel(_panel(spec).id(next(ids)))
    return builder.build()


def dashboard_json(plan: Plan) -> str:
    return json.dumps(build_dashboard(plan), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def datasource_config(plan: Plan, observe: ObservePlan) -> dict[str, Any]:
    """Grafana runs beside Prometheus (host networking on GPU hosts: loopback reaches it)."""
    host = "127.0.0.1" if plan.network == "host" else PROMETHEUS_SERVICE
    source = {
        "name": "Prometheus",
        "type": "prometheus",
        "uid": DATASOURCE_UID,
        "access": "proxy",
        "url": f"http://{host}:{observe.prometheus_port}",
        "isDefault": True,
        "editable": False,
    }
    return {"apiVersion": 1, "datasources": [source]}


def dashboard_provider() -> dict[str, Any]:
    provider = {
        "name": "xpyd",
        "type": "file",
        "disableDeletion": True,
        "allowUiUpdates": False,
        "options": {"path": DASHBOARDS_DIR},
    }
    return {"apiVersion": 1, "providers": [provider]}
