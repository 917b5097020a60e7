"""Small HTTP helpers for probes: one place that knows httpx and Prometheus text."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

__all__ = ["MetricSamples", "get_json", "read_here", "scrape_metrics"]

MetricSamples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def get_json(client: httpx.Client, url: str) -> Any:
    response = client.get(url)
    response.raise_for_status()
    return response.json()


def read_here(_service: str, url: str) -> str:
    """A ``read_inside`` for services whose loopback is this machine's (processes started
    here; bridge containers reached on their 127.0.0.1-published ports)."""
    response = httpx.get(url, timeout=10.0)
    response.raise_for_status()
    return response.text


def scrape_metrics(client: httpx.Client, url: str) -> MetricSamples:
    """Every sample of a Prometheus endpoint, keyed by (name, sorted labels)."""
    response = client.get(url)
    response.raise_for_status()
    samples: MetricSamples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = float(sample.value)
    return samples


def metric_sum(samples: MetricSamples, name: str, labels: Mapping[str, str] | None = None) -> float:
    """Sum of ``name`` over all label sets that contain ``labels``."""
    wanted = set((labels or {}).items())
    return sum(
        value
        for (sample, sample_labels), value in samples.items()
        if sample == name and wanted <= set(sample_labels)
    )
