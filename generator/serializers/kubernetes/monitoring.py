"""The stack's observability for a cluster's own Prometheus and Grafana (prometheus-operator
and Grafana's dashboard sidecar): a PodMonitor per Prometheus page, with the labels observe's
own scrape config gives each page (so the rules and panels read the same series); a
PrometheusRule holding observe's recording and alert rules; the dashboard as a ConfigMap the
sidecar picks up by its label. Built from generator/observe, never a copy of it."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any, Final

from generator.observe.dashboards import dashboard_json
from generator.observe.rules import rules_document
from generator.observe.targets import scrape_targets, target_labels
from generator.plan import Plan
from generator.plan.files import MetricsPage
from generator.serializers.kubernetes.naming import INSTANCE_LABEL, STACK_LABEL, port_name

__all__ = ["DASHBOARD_LABEL", "monitoring_objects"]

DASHBOARD_LABEL: Final = ("grafana_dashboard", "1")  # the Grafana chart's sidecar default
_MONITORING: Final = "monitoring.coreos.com/v1"


def monitoring_objects(plan: Plan) -> dict[PurePosixPath, list[dict[str, Any]]]:
    return {
        PurePosixPath("podmonitors.yaml"): [_pod_monitor(plan, p) for p in scrape_targets(plan)],
        PurePosixPath("prometheusrule.yaml"): [_prometheus_rule(plan)],
        PurePosixPath("dashboards.yaml"): [_dashboard(plan)],
    }


def _pod_monitor(plan: Plan, page: MetricsPage) -> dict[str, Any]:
    """The pod the page is served in (its engine's, or the router's), at the named port."""
    pod = page.engine or page.service
    relabelings = [
        {"action": "replace", "targetLabel": label, "replacement": value}
        for label, value in target_labels(plan, page).items()
    ]
    endpoint = {"port": _port_of(plan, page), "path": page.path, "relabelings": relabelings}
    if plan.observe is not None:
        endpoint["interval"] = f"{plan.observe.scrape_interval_s}s"
    selector = {"matchLabels": {STACK_LABEL: plan.stack, INSTANCE_LABEL: pod}}
    spec = {"selector": selector, "podMetricsEndpoints": [endpoint]}
    meta = {"name": f"{page.service}-{page.part}", "labels": {STACK_LABEL: plan.stack}}
    return {"apiVersion": _MONITORING, "kind": "PodMonitor", "metadata": meta, "spec": spec}


def _port_of(plan: Plan, page: MetricsPage) -> str:
    use = next(u for u in plan.ports if u.owner == page.service and u.port == page.port)
    return port_name(use.purpose, use.port)


def _prometheus_rule(plan: Plan) -> dict[str, Any]:
    meta = {"name": f"xpyd-{plan.stack}", "labels": {STACK_LABEL: plan.stack}}
    spec = rules_document(plan)
    return {"apiVersion": _MONITORING, "kind": "PrometheusRule", "metadata": meta, "spec": spec}


def _dashboard(plan: Plan) -> dict[str, Any]:
    label, value = DASHBOARD_LABEL
    meta = {"name": f"xpyd-{plan.stack}-dashboard", "labels": {label: value}}
    data = {f"xpyd-{plan.stack}.json": dashboard_json(plan)}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}
