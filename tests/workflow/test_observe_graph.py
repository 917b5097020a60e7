"""`up` with observe: its services start once the router answers (every part they scrape is
up), a bench waits for them, and images the host pulls itself are never shipped."""

from __future__ import annotations

from pathlib import PurePosixPath

from generator.paths import Workspace
from generator.planner import make_plan
from generator.services.model import ImageBuildRef, ImageRef
from generator.stack import load_spec
from generator.workflow.dag import build_graph
from generator.workflow.steps.images import _pulled_by_host
from tests.observe.helpers import OBSERVED


def test_observe_starts_after_the_router_and_before_a_bench(workspace: Workspace) -> None:
    plan = make_plan(load_spec(workspace.stack_file("cpu-1p1d"), OBSERVED))
    graph = build_graph(plan)
    assert [u.name for u in graph.task("start-observe").upstream] == ["wait-router"]
    assert [u.name for u in graph.task("wait-observe").upstream] == ["start-observe"]
    assert {u.name for u in graph.task("bench").upstream} == {"smoke", "wait-observe"}
    assert "Prometheus" in graph.task("build-router").description


def test_without_observe_the_graph_has_no_observe_tasks(workspace: Workspace) -> None:
    graph = build_graph(make_plan(load_spec(workspace.stack_file("cpu-1p1d"))))
    assert not [name for name in graph.order if "observe" in name]
    assert [u.name for u in graph.task("bench").upstream] == ["smoke"]
    assert graph.task("build-router").description == "build the router image"


def test_a_multi_host_stack_starts_observe_on_its_first_host(workspace: Workspace) -> None:
    overrides = (*OBSERVED, "observe.traces=true")
    graph = build_graph(make_plan(load_spec(workspace.stack_file("xpyd-mp-2host"), overrides)))
    assert "start-observe@gpu-a" in graph.order
    assert "otel-collector" not in graph.task("wait-observe@gpu-a").description  # no shell


def test_only_images_built_here_are_shipped() -> None:
    assert _pulled_by_host(ImageRef("prom/prometheus:v3.5.0", "missing", None))
    assert not _pulled_by_host(ImageRef("xpyd/decode:abc", "never", None))  # bench: built here
    assert not _pulled_by_host(
        ImageRef("xpyd/router:abc", "never", ImageBuildRef(PurePosixPath("x.Dockerfile")))
    )
