"""A real Prometheus (Debian's package; `.ci/setup --tests` installs it) given a stack's rendered
config and rules, as the process runtime runs it, with none of the stack's parts running: right
after it is ready `observe` must not pass on targets it does not list yet, and once each was
scraped (each `down` here) `up`'s wait ends. The rules load from the relative path beside the
config."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from generator.observe.rules import rules_document
from generator.observe.targets import prometheus_config
from generator.paths import Workspace
from generator.plan import Plan
from generator.probes.prometheus import (
    MISSING,
    check_prometheus,
    planned_targets,
    unscraped_targets,
)
from tests.observe.helpers import observed_plan

PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None, reason="no prometheus on PATH (apt-get install prometheus)"
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def plan(workspace: Workspace) -> Plan:
    # Its parts' ports are nobody's here; only Prometheus's own must be free.
    overrides = ("runtime=process", f"ports.prometheus={_free_port()}")
    return observed_plan(workspace, "cpu-1p1d", *overrides)


@pytest.fixture
def prometheus(plan: Plan, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    assert plan.observe is not None
    assert PROMETHEUS is not None
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(prometheus_config(plan, plan.observe)))
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rules_document(plan)))
    command = [
        PROMETHEUS, "--config.file", str(config), "--storage.tsdb.path", str(tmp_path / "data"),
        f"--web.listen-address=127.0.0.1:{plan.observe.prometheus_port}",
    ]  # fmt: skip
    started = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_ready(plan.observe.prometheus_port)
        yield started
    finally:
        started.terminate()
        started.wait(timeout=30)


def _wait_ready(port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"Prometheus did not listen on {port} in 30 s")


def test_targets_not_yet_scraped_are_no_pass_then_the_wait_ends_once_each_was(
    plan: Plan, prometheus: subprocess.Popen[bytes]
) -> None:
    planned = planned_targets(plan)
    assert len(planned) == 5  # two engines, two LMCache servers, vllm-router
    early = check_prometheus(plan).targets
    assert set(early) == set(planned)
    assert "up" not in early.values()  # missing, unknown or down: `observe` exits 1
    deadline = time.monotonic() + 60
    while unscraped := unscraped_targets(plan):
        assert time.monotonic() < deadline, unscraped
        time.sleep(0.5)
    report = check_prometheus(plan)
    # Each scraped once: down where nothing answers (up where a stack of yours runs meanwhile).
    assert set(report.targets.values()) <= {"up", "down"}
    assert MISSING not in report.targets.values()
    assert report.rules  # loaded from "rules.yml", beside the config
    assert "XpydEngineDown" in report.rules
