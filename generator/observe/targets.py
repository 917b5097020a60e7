"""Every Prometheus page of the stack, on every host: the engines' vLLM /metrics, each part's
own page (LMCache servers, NIXL's exporters: the topology's to say), the router's (its unit's
to say), and ``prometheus.yml`` scraping them with the labels dashboards and rules group by."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any, Final

from generator.plan import EnginePlan, Plan
from generator.plan.files import MetricsPage
from generator.plan.observe import RECEIVER_SERVICE, ObservePlan
from generator.plan.traces import lmcache_pushes_metrics
from generator.routers import router_of
from generator.topologies import topology_of

__all__ = ["RULES_PATH", "prometheus_config", "scrape_targets"]

RULES_PATH: Final = "/etc/prometheus/rules.yml"  # where the Prometheus service reads them


def scrape_targets(plan: Plan) -> tuple[MetricsPage, ...]:
    topology = topology_of(plan)
    pages: list[MetricsPage] = []
    for engine in plan.engines:
        pages.append(_vllm_page(engine))
        pages.extend(topology.metrics_pages(plan, engine))
    pages.append(router_of(plan).metrics_page(plan))
    if lmcache_pushes_metrics(plan) and any(page.part == "lmcache" for page in pages):
        # Traced LMCache servers push their metrics to our receiver, which serves them all,
        # each series labelled with its server's engine; their own pages keep Python's alone.
        pages = [page for page in pages if page.part != "lmcache"] + [_receiver_page(plan)]
    return tuple(pages)


def _receiver_page(plan: Plan) -> MetricsPage:
    observe = plan.observe
    assert observe is not None  # lmcache_pushes_metrics says so
    assert observe.receiver_http_port is not None
    # On Prometheus's own host: by name on a bridge, else at loopback (it listens there too).
    address = RECEIVER_SERVICE if plan.network == "bridge" else "127.0.0.1"
    return MetricsPage(
        "lmcache", RECEIVER_SERVICE, "lmcache", observe.host, address,
        observe.receiver_http_port, pushed=True,
    )  # fmt: skip


def _vllm_page(engine: EnginePlan) -> MetricsPage:
    # vLLM listens on every interface; advertise_host is how peers (and Prometheus) reach it.
    return MetricsPage(
        "vllm", engine.name, engine.role.value, engine.host, engine.advertise_host,
        engine.http_port, engine=engine.name,
    )  # fmt: skip


def target_labels(plan: Plan, page: MetricsPage) -> dict[str, str]:
    """The labels every series of ``page`` carries: which engine (or the router), its role,
    its host and the stack, so one Prometheus can hold several stacks. A scraped series' own
    label of the same name yields (Prometheus keeps it as ``exported_<name>``): vLLM's
    ``engine`` (its engine core's index), our proxy's ``role`` (a backend's side)."""
    return {
        "engine": page.engine or page.service,
        "role": page.role,
        "host": page.host,
        "stack": plan.stack,
        "service": page.service,
    }


def prometheus_config(plan: Plan, observe: ObservePlan) -> dict[str, Any]:
    pages = scrape_targets(plan)
    jobs = sorted({page.part for page in pages})
    return {
        "global": {
            "scrape_interval": f"{observe.scrape_interval_s}s",
            "evaluation_interval": f"{observe.scrape_interval_s}s",
            "external_labels": {"stack": plan.stack},
        },
        # Beside the config wherever it is read from: a container's /etc/prometheus, or the
        # host's rendered folder for a process (Prometheus reads a relative path from there).
        "rule_files": [PurePosixPath(RULES_PATH).name],
        "scrape_configs": [_job(plan, job, [p for p in pages if p.part == job]) for job in jobs],
    }


def _job(plan: Plan, job: str, pages: list[MetricsPage]) -> dict[str, Any]:
    # A page of pushed series (our receiver's) carries each sender's own engine label.
    honored = {"honor_labels": True} if any(page.pushed for page in pages) else {}
    return {
        "job_name": job,
        "metrics_path": pages[0].path,
        **honored,
        "static_configs": [
            {"targets": [f"{page.address}:{page.port}"], "labels": target_labels(plan, page)}
            for page in pages
        ],
    }
