"""The config files observe mounts into its services, as data (dicts the serializer dumps as
YAML, the dashboard's JSON from the SDK's models; never templated), in the folder of the
host that runs them (the stack's first): Prometheus's config and rules, and where Grafana
runs its data source, dashboard provider and dashboard."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any, Final

from generator.observe.dashboards import (
    DASHBOARDS_DIR,
    dashboard_json,
    dashboard_provider,
    datasource_config,
)
from generator.observe.rules import rules_document
from generator.observe.targets import RULES_PATH, prometheus_config
from generator.plan import Plan
from generator.plan.files import ConfigFile
from generator.plan.observe import GRAFANA_SERVICE, PROMETHEUS_SERVICE

__all__ = [
    "DASHBOARD_FILE",
    "DATASOURCE_FILE",
    "OBSERVE_DIR",
    "PROMETHEUS_CONFIG_PATH",
    "PROMETHEUS_FILE",
    "PROVIDER_FILE",
    "RULES_FILE",
    "observe_configs",
    "observe_files",
]

OBSERVE_DIR: Final = PurePosixPath("observe")
PROMETHEUS_FILE: Final = OBSERVE_DIR / "prometheus.yml"
RULES_FILE: Final = OBSERVE_DIR / "rules.yml"
DATASOURCE_FILE: Final = OBSERVE_DIR / "grafana" / "datasource.yaml"
PROVIDER_FILE: Final = OBSERVE_DIR / "grafana" / "dashboards.yaml"
DASHBOARD_FILE: Final = OBSERVE_DIR / "grafana" / "xpyd.json"
PROMETHEUS_CONFIG_PATH: Final = "/etc/prometheus/prometheus.yml"
_GRAFANA_PROVISIONING: Final = "/etc/grafana/provisioning"


def observe_configs(plan: Plan) -> dict[str, tuple[ConfigFile, ...]]:
    """Each observe service's config files (none with observe off)."""
    observe = plan.observe
    if observe is None:
        return {}
    prometheus = (
        _config(PROMETHEUS_FILE, PROMETHEUS_CONFIG_PATH, prometheus_config(plan, observe)),
        _config(RULES_FILE, RULES_PATH, rules_document(plan)),
    )
    configs: dict[str, tuple[ConfigFile, ...]] = {PROMETHEUS_SERVICE: prometheus}
    if observe.grafana_port is not None:
        provisioning = _GRAFANA_PROVISIONING
        configs[GRAFANA_SERVICE] = (
            _config(DATASOURCE_FILE, f"{provisioning}/datasources/xpyd.yaml",
                    datasource_config(plan, observe)),
            _config(PROVIDER_FILE, f"{provisioning}/dashboards/xpyd.yaml", dashboard_provider()),
            _config(DASHBOARD_FILE, f"{DASHBOARDS_DIR}/xpyd.json", {}, dashboard_json(plan)),
        )  # fmt: skip
    return configs


def _config(
    path: PurePosixPath, target: str, data: dict[str, Any], text: str | None = None
) -> ConfigFile:
    """Named after its file (compose config names: letters, digits, '-', '_', '.')."""
    name = "observe-" + "-".join(path.relative_to(OBSERVE_DIR).parts).replace(".", "-")
    return ConfigFile(name, str(path), target, data, text)


def observe_files(plan: Plan) -> dict[PurePosixPath, ConfigFile]:
    """Every observe config by its path in the host's folder."""
    return {
        PurePosixPath(config.path): config
        for configs in observe_configs(plan).values()
        for config in configs
    }
