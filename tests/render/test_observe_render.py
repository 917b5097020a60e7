"""Rendering with observe: on, its services join the first host's compose project with their
config files (written beside it, listed in the manifests), and the cpu profile builds
Prometheus from Debian's package; off, every shipped stack renders exactly as committed
(the golden tests in test_shipped_stacks.py and `render --all --check` hold that)."""

from __future__ import annotations

import json
from pathlib import PurePosixPath
from typing import Any

import yaml

from generator.observe.files import DASHBOARD_FILE, OBSERVE_DIR, PROMETHEUS_FILE, RULES_FILE
from generator.paths import Workspace
from generator.planner import make_plan
from generator.render import render_stack
from generator.render.manifest import MANIFEST_NAME
from generator.stack import load_spec
from generator.versions import load_versions
from tests.observe.helpers import OBSERVED


def _rendered(workspace: Workspace, stack: str, *overrides: str) -> dict[PurePosixPath, str]:
    spec = load_spec(workspace.stack_file(stack), overrides)
    return render_stack(make_plan(spec), workspace).files


def _services(files: dict[PurePosixPath, str], folder: PurePosixPath) -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load(files[folder / "compose.yaml"])["services"]
    return services


def test_observe_on_cpu_adds_prometheus_built_from_debian_s_package(
    workspace: Workspace,
) -> None:
    plain = _rendered(workspace, "cpu-1p1d")
    observed = _rendered(workspace, "cpu-1p1d", *OBSERVED)
    folder, images = PurePosixPath("compose/cpu-1p1d"), PurePosixPath("images/cpu-1p1d")
    dockerfile = images / "prometheus.Dockerfile"
    assert set(observed) - set(plain) == {
        folder / PROMETHEUS_FILE, folder / RULES_FILE, dockerfile,
    }  # fmt: skip
    changed = {path for path in plain if plain[path] != observed[path]}
    assert changed == {folder / n for n in ("plan.json", MANIFEST_NAME, "compose.yaml")} | {
        images / MANIFEST_NAME
    }
    assert "apt-get install -y --no-install-recommends prometheus wget" in observed[dockerfile]
    prometheus = _services(observed, folder)["prometheus"]
    assert prometheus["build"]["dockerfile"] == str(dockerfile)
    assert prometheus["ports"] == ["127.0.0.1:9490:9490"]  # the host only, as the others
    targets = {config["target"] for config in prometheus["configs"]}
    assert targets == {"/etc/prometheus/prometheus.yml", "/etc/prometheus/rules.yml"}
    assert "grafana" not in _services(observed, folder)
    before = _services(plain, folder)
    assert {k: v for k, v in _services(observed, folder).items() if k != "prometheus"} == before


def test_observe_on_gpu_pulls_pinned_images_and_publishes_only_when_asked(
    workspace: Workspace,
) -> None:
    pins = load_versions().observe_images
    folder = PurePosixPath("compose/xpyd")
    for publish, address in (("false", "127.0.0.1"), ("true", "0.0.0.0")):
        files = _rendered(workspace, "xpyd", *OBSERVED, f"observe.publish={publish}")
        services = _services(files, folder)
        prometheus, grafana = services["prometheus"], services["grafana"]
        assert (prometheus["image"], grafana["image"]) == (pins.prometheus, pins.grafana)
        assert ":latest" not in pins.prometheus + pins.grafana
        assert "build" not in prometheus
        assert prometheus["network_mode"] == "host"
        assert f"--web.listen-address={address}:9490" in prometheus["command"]
        assert grafana["environment"]["GF_SERVER_HTTP_ADDR"] == address
        assert "command" not in grafana
        assert json.loads(files[folder / DASHBOARD_FILE])["title"] == "xpyd xpyd"


def test_a_multi_host_stack_runs_observe_on_its_first_host(workspace: Workspace) -> None:
    files = _rendered(workspace, "xpyd-mp-2host", *OBSERVED, "observe.traces=true")
    first, second = (PurePosixPath("compose/xpyd-mp-2host") / h for h in ("gpu-a", "gpu-b"))
    observe = {path for path in files if OBSERVE_DIR.name in path.parts}
    assert observe
    assert all(first in path.parents for path in observe)
    observe_services = {"prometheus", "grafana", "otel-collector"}
    assert observe_services <= set(_services(files, first))
    assert not observe_services & set(_services(files, second))
    collector = _services(files, first)["otel-collector"]
    assert collector["image"] == load_versions().observe_images.otel_collector
    assert [c["target"] for c in collector["configs"]] == ["/etc/otelcol/config.yaml"]
