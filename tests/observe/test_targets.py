"""Scrape targets: every engine, LMCache server, NIXL exporter and the router, on every host,
at the address Prometheus reaches them from the stack's first host."""

from __future__ import annotations

import pytest
import yaml

from generator.observe.files import PROMETHEUS_FILE
from generator.observe.targets import scrape_targets
from generator.paths import Workspace
from generator.routers import router_of
from generator.topologies import topology_of
from tests.observe.helpers import observed_plan, rendered_observe


def test_a_two_host_stack_is_scraped_on_both_hosts_at_their_addresses(
    workspace: Workspace,
) -> None:
    plan = observed_plan(workspace, "xpyd-mp-2host")
    pages = {(page.part, page.service): page for page in scrape_targets(plan)}
    engines = {e.name for e in plan.engines}
    assert {s for part, s in pages if part == "vllm"} == engines
    servers = {s.service for s in plan.sidecars if s.engine is not None}
    assert {s for part, s in pages if part == "lmcache"} == servers
    assert ("vllm-router", "router") in pages
    assert pages["vllm-router", "router"].port == plan.router.metrics_port  # type: ignore[union-attr]
    for page in pages.values():
        assert page.address == plan.host(page.host).address  # host networking, not loopback
    assert {page.host for page in pages.values()} == {"gpu-a", "gpu-b"}


def test_lmcache_servers_on_other_hosts_listen_where_prometheus_reaches_them(
    workspace: Workspace,
) -> None:
    """With host networking a server's HTTP port (its /metrics) listens on loopback unless
    observe scrapes it from another host."""
    observed = observed_plan(workspace, "xpyd-mp-2host")
    plain = observed.model_copy(update={"observe": None})
    topology = topology_of(observed)
    for plan, bind in ((observed, "0.0.0.0"), (plain, "127.0.0.1")):
        engine = plan.decode[0]
        sidecar = next(s for s in plan.sidecars if s.engine == engine.name)
        command = topology.sidecar_command(plan, engine, sidecar)
        assert command[command.index("--http-host") + 1] == bind


def test_lmcache_pd_prefillers_expose_nixl_telemetry_and_the_proxy_its_page(
    workspace: Workspace,
) -> None:
    plan = observed_plan(workspace, "cpu-lmcache-pd")
    pages = scrape_targets(plan)
    telemetry = [page for page in pages if page.part == "nixl-telemetry"]
    assert [page.engine for page in telemetry] == [e.name for e in plan.prefill]
    assert all(page.address == page.service for page in pages)  # a bridge: service names
    proxy = next(page for page in pages if page.part == "proxy")
    assert (proxy.port, proxy.path) == (plan.router.port, "/metrics")
    assert router_of(plan).metrics_page(plan) == proxy


def test_single_host_gpu_telemetry_is_read_on_loopback(workspace: Workspace) -> None:
    """NIXL's exporter listens on loopback on one GPU host; Prometheus shares that host."""
    plan = observed_plan(workspace, "xpyd-lmcache-1gpu", "runtime=compose")
    telemetry = [page for page in scrape_targets(plan) if page.part == "nixl-telemetry"]
    assert telemetry
    assert {page.address for page in telemetry} == {"127.0.0.1"}
    engine = plan.prefill[0]
    assert topology_of(plan).engine_env(plan, engine)["NIXL_TELEMETRY_PROMETHEUS_LOCAL"] == "y"


@pytest.mark.parametrize("stack", ["cpu-1p1d", "cpu-lmcache-pd", "xpyd-mp-2host"])
def test_prometheus_yml_labels_every_target_with_engine_role_host_and_stack(
    workspace: Workspace, stack: str
) -> None:
    plan = observed_plan(workspace, stack, "observe.scrape_interval_s=7")
    config = yaml.safe_load(rendered_observe(workspace, plan)[PROMETHEUS_FILE])
    assert config["global"]["scrape_interval"] == "7s"
    targets = [
        (job["job_name"], static["targets"][0], static["labels"])
        for job in config["scrape_configs"]
        for static in job["static_configs"]
    ]
    assert len(targets) == len(scrape_targets(plan))
    for job, target, labels in targets:
        assert labels.keys() >= {"engine", "role", "host", "stack"}, job
        assert labels["stack"] == stack
        host, _, port = target.rpartition(":")
        assert host
        assert port.isdigit()
    assert sorted(t[1] for t in targets) == sorted(
        f"{p.address}:{p.port}" for p in scrape_targets(plan)
    )
