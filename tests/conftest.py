"""Shared fixtures. Tests that need a tool this machine may lack skip with a reason; CI sets
XPYD_REQUIRE_ALL=1 so that any such skip becomes a failure there."""

from __future__ import annotations

import copy
import os
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling

from generator.paths import Workspace

ROOT = Path(__file__).resolve().parent.parent

MINIMAL_GPU: dict[str, Any] = {
    "name": "t",
    "topology": "nixl-mp",
    "model": {"id": "org/model"},
    "hosts": [{"name": "h", "gpus": [0, 1, 2, 3]}],
}


def spec_dict(**changes: Any) -> dict[str, Any]:
    """A minimal valid spec with top-level keys replaced (``None`` removes a key)."""
    data = copy.deepcopy(MINIMAL_GPU)
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


@pytest.fixture
def workspace() -> Workspace:
    return Workspace(ROOT)


@pytest.fixture(autouse=True)
def _pin_workspace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XPYD_ROOT", str(ROOT))


class LiveGroups(LoadScopeScheduling):  # type: ignore[misc]  # xdist is untyped
    """`--live-groups` (.ci/test: -n 2): the live tiers as two groups side by side, each on
    its own worker, top to bottom (``live_group``). xdist's own ``--dist loadgroup`` would do
    this, but pytest 9.2's node ids no longer take its group suffix
    (pytest-dev/pytest-xdist#1386): it silently spreads a group over both workers."""

    def _split_scope(self, nodeid: str) -> str:
        return live_group(nodeid)


# Modules whose tests share no host port and no Docker engine with the other live tests, which
# run on this machine's engine at the stacks' fixed host ports and so one after another: the
# Slurm cluster's and the test hosts' (network namespaces of their own: slurm_cluster.py,
# hosts.py, each host with its own Docker engine) and the process stacks' (this machine's
# network, on ports of their own: test_process_stacks.APART_PORTS). The test hosts' modules
# stay together: each picks a free subnet for its hosts when it starts. The process stacks run
# before the Slurm tests, which reuse the cpu Pythons they made (cpu_pythons).
APART_MODULES = (
    "test_slurm_",
    "test_multihost_up.py",
    "test_hosts.py",
    "test_host_teardown.py",
    "test_process_stacks.py",
)


def live_group(nodeid: str) -> str:
    """A live test's group by its module's name (xdist's scheduler sees node ids only)."""
    module = PurePosixPath(nodeid.split("::", maxsplit=1)[0]).name
    return "apart" if module.startswith(APART_MODULES) else "host"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--live-groups",
        action="store_true",
        help="with -n 2: the tests apart from this machine's Docker engine and its stacks' "
        "host ports (Slurm, test hosts, process stacks) on one worker, the rest on the other",
    )


def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> LiveGroups | None:
    return LiveGroups(config, log) if config.getoption("live_groups") else None


class LiveGroupClock:
    """`--live-groups`: each group's busy time (its tests' setup, call and teardown) and its
    modules', printed at the end: how far apart the two groups ended, and where each one's
    time went (the groups are worth moving modules between only when far apart)."""

    def __init__(self) -> None:
        self.seconds: defaultdict[tuple[str, str], float] = defaultdict(float)  # (group, module)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        module = report.nodeid.split("::", maxsplit=1)[0]
        self.seconds[live_group(report.nodeid), module] += report.duration

    def lines(self) -> list[str]:
        groups: defaultdict[str, float] = defaultdict(float)
        for (group, _module), seconds in self.seconds.items():
            groups[group] += seconds
        busiest = sorted(self.seconds.items(), key=lambda item: -item[1])
        lines = []
        for group, total in sorted(groups.items(), key=lambda item: -item[1]):
            lines.append(f"{total:6.0f} s  group {group}")
            lines += [f"{s:6.0f} s    {module}" for (g, module), s in busiest if g == group]
        return lines

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.seconds:
            terminalreporter.write_sep("=", "live groups: seconds busy")
            for line in self.lines():
                terminalreporter.write_line(line)


def pytest_configure(config: pytest.Config) -> None:
    # On the controller only: it receives every worker's reports.
    if config.getoption("live_groups") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(LiveGroupClock(), "live-group-clock")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if os.environ.get("XPYD_REQUIRE_ALL") and report.skipped:
        report.outcome = "failed"
        report.longrepr = (
            f"skipped, but CI requires every test (XPYD_REQUIRE_ALL=1): {report.longrepr}"
        )
    return report


def cpu_1p1d_image(service: str) -> str:
    """The image of a cpu-1p1d service, built when missing, as `up` would build it."""
    from generator.docker import ComposeStack, docker_available, image_exists
    from generator.planner import make_plan
    from generator.render import render_stack
    from generator.render.writer import write_rendered
    from generator.stack import load_spec
    from generator.wheelhouse import fill_wheelhouse

    if not docker_available():
        pytest.skip("needs a running Docker engine (.ci/setup starts one)")
    workspace = Workspace(ROOT)
    plan = make_plan(load_spec(workspace.stack_file("cpu-1p1d")))
    rendered = render_stack(plan, workspace)
    (project,) = rendered.projects
    tag: str = project.document["services"][service]["image"]
    if not image_exists(tag):
        write_rendered(rendered, ROOT)
        fill_wheelhouse(plan, workspace, lambda _line: None)
        ComposeStack(ROOT / project.compose_file, project.name).build([service], print)
    return tag


@pytest.fixture(scope="session")
def cpu_engine_image() -> str:
    """The cpu-1p1d prefill image (vLLM CPU, torch, NIXL, the KV probe)."""
    return cpu_1p1d_image("prefill-0")
