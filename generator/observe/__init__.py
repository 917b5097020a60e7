"""Observability (spec ``observe``): what Prometheus scrapes, its recording and alert rules,
Grafana's provisioning and dashboards, all built as data from the plan. Pure: text out."""

from generator.observe.files import observe_configs, observe_files
from generator.observe.targets import scrape_targets

__all__ = ["observe_configs", "observe_files", "scrape_targets"]
