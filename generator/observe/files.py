"""The files observe adds to the folder of the host that runs Prometheus (the stack's first):
Prometheus's config and rules, Grafana's provisioning and dashboard where Grafana runs, all
written as data (YAML from dicts, JSON from the SDK's models; never templated)."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Final

from generator.observe.dashboards import dashboard_json, dashboard_provider, datasource_config
from generator.observe.rules import rules_document
from generator.observe.targets import prometheus_config
from generator.plan import Plan
from generator.serializers.yaml_text import dump_yaml

__all__ = [
    "DASHBOARD_FILE",
    "DATASOURCE_FILE",
    "OBSERVE_DIR",
    "PROMETHEUS_FILE",
    "PROVIDER_FILE",
    "RULES_FILE",
    "observe_files",
]

OBSERVE_DIR: Final = PurePosixPath("observe")
PROMETHEUS_FILE: Final = OBSERVE_DIR / "prometheus.yml"
RULES_FILE: Final = OBSERVE_DIR / "rules.yml"
DATASOURCE_FILE: Final = OBSERVE_DIR / "grafana" / "datasource.yaml"
PROVIDER_FILE: Final = OBSERVE_DIR / "grafana" / "dashboards.yaml"
DASHBOARD_FILE: Final = OBSERVE_DIR / "grafana" / "xpyd.json"


def observe_files(plan: Plan) -> dict[PurePosixPath, str]:
    """Relative to the observe host's folder; empty with observe off."""
    if plan.observe is None:
        return {}
    header = f"# Rendered by xpyd-stacks for stack {plan.stack}: do not edit, run render.\n"
    files = {
        PROMETHEUS_FILE: dump_yaml(prometheus_config(plan, plan.observe), header=header),
        RULES_FILE: dump_yaml(rules_document(plan), header=header),
    }
    if plan.observe.grafana_port is not None:
        datasource = datasource_config(plan, plan.observe)
        files[DATASOURCE_FILE] = dump_yaml(datasource, header=header)
        files[PROVIDER_FILE] = dump_yaml(dashboard_provider(), header=header)
        files[DASHBOARD_FILE] = dashboard_json(plan)
    return files
