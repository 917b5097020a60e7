"""Real-engine tests: a Docker engine, the images (built by `up` itself), real vLLM.

Skipped with a reason where no engine answers; CI (XPYD_REQUIRE_ALL=1) turns that skip into
a failure, so these always run there.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from generator.docker import ComposeStack, ServiceState, docker_available
from generator.planner import make_plan
from generator.stack import load_spec
from tests.conftest import cpu_1p1d_image
from tests.integration.hosts import NetnsHosts, missing_tools, running_hosts
from tests.integration.slurm_cluster import (
    SlurmCluster,
    SlurmClusterError,
    SlurmUnavailable,
    install_slurm,
    remove_leftovers,
)
from tests.integration.slurm_cluster import missing_tools as missing_slurm_tools
from tests.tools import run_cli

ROOT = Path(__file__).resolve().parents[2]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if docker_available():
        return
    skip = pytest.mark.skip(reason="no Docker engine answers (.ci/setup starts one)")
    for item in items:
        # The Slurm cluster's tests need no Docker engine (its own fixture says what they need).
        if "integration" in str(item.fspath) and not item.path.name.startswith("test_slurm_"):
            item.add_marker(skip)


def cli(*args: str, root: Path = ROOT, timeout_s: float = 1800) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, root=root, timeout_s=timeout_s)


def interrupt_cli(
    *args: str, after_line: str, env: dict[str, str], delay_s: float = 0.0, cwd: Path = ROOT
) -> tuple[int, str]:
    """Runs the CLI and presses Ctrl+C (SIGINT) ``delay_s`` after a stderr line containing
    ``after_line``; its exit code and everything it wrote on stderr."""
    # A test run started in the background inherits an ignored SIGINT (the shell's doing) and
    # passes it on, and Python then never raises KeyboardInterrupt: while starting the child,
    # handle SIGINT here (a handler becomes the default in the child, as on a terminal).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "generator", *args],
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=cwd,
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    assert process.stderr is not None
    seen = []
    for line in process.stderr:
        seen.append(line)
        if after_line in line:
            break
    time.sleep(delay_s)
    process.send_signal(signal.SIGINT)
    _, rest = process.communicate(timeout=180)
    return process.returncode, "".join(seen) + rest


def project_states(root: Path, stack: str, project: str) -> list[ServiceState]:
    compose_file = root / "compose" / stack / "compose.yaml"
    if not compose_file.exists():
        return []
    return ComposeStack(compose_file, project).ps()


def set_flags(assignments: list[str]) -> list[str]:
    """`--set` flags for spec assignments (``key=value``)."""
    return [flag for assignment in assignments for flag in ("--set", assignment)]


def planned_ports(root: Path, stack: str, overrides: list[str]) -> set[int]:
    """Every host port the plan of the stack file under ``root`` takes, with ``overrides``."""
    plan = make_plan(load_spec(root / "stacks" / f"{stack}.yaml", overrides))
    return {use.port for use in plan.ports}


def workspace_copy(destination: Path) -> Path:
    """A checkout copy to render variants into (the wheelhouse hard-linked, not copied)."""
    for name in ("stacks", "generator", "images/templates", "images/assets", "images/locks"):
        shutil.copytree(
            ROOT / name, destination / name, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(ROOT / ".dockerignore", destination / ".dockerignore")
    wheels = ROOT / "images/wheelhouse"
    if wheels.is_dir():
        shutil.copytree(wheels, destination / "images/wheelhouse", copy_function=os.link)
    return destination


@pytest.fixture(scope="session")
def scratch_root() -> Iterator[Path]:
    """Variants live under .cache/ (same filesystem as the wheelhouse, for hard links), one
    folder per xdist worker: the live tiers' two groups run side by side (tests/conftest.py)."""
    base = ROOT / ".cache" / "test-workspaces" / os.environ.get("PYTEST_XDIST_WORKER", "main")
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    yield base
    shutil.rmtree(base, ignore_errors=True)


# The process-stack tests' checkout copy in a worker's scratch root (test_process_stacks.py).
PROCESS_COPY = "process"


@pytest.fixture(scope="session")
def cpu_pythons(scratch_root: Path) -> list[str]:
    """`up` flags naming the cpu engine's and router's Pythons, made once for the Slurm tests
    (on a filesystem every node sees): the checkout's own where `env` made them, else those
    the process-stack tests' first `up` made in their copy (same live group, run before them:
    `env` finds them up to date), else made in a copy of their own."""
    names = ("engine-cpu", "router")
    engine, router = (ROOT / f".cache/env/{name}/bin/python" for name in names)
    if not (engine.exists() and router.exists()):
        home = scratch_root / PROCESS_COPY
        if not home.is_dir():
            home = workspace_copy(scratch_root / "cpu-env")
        made = cli("env", "cpu-slurm", root=home)
        assert made.returncode == 0, made.stderr[-3000:]
        engine, router = (home / f".cache/env/{name}/bin/python" for name in names)
    return ["--python", str(engine), "--set", f"process.router_python={router}"]


@pytest.fixture(scope="session")
def netns_hosts() -> Iterator[NetnsHosts]:
    """Two hosts (hosta, hostb), each a network namespace with its own address and Docker
    engine, reached as a docker context (tests/integration/hosts.py); removed after the
    session, also when tests fail."""
    missing = missing_tools()
    if missing:
        pytest.skip(f"test hosts need {', '.join(missing)}")
    with running_hosts() as hosts:
        yield hosts


@pytest.fixture(scope="session")
def router_image() -> str:
    """The cpu-1p1d router image (~300 MB, with Python)."""
    return cpu_1p1d_image("router")


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A real Slurm cluster (tests/integration/slurm_cluster.py): nodes n1 and n2 idle, each
    2 CPUs, 4000 MB and 2 fake h100 GPUs; removed after the session, also when tests fail.
    Slurm is installed with apt when missing. Where no cluster can be had (not root, no apt,
    a start that fails) the tests skip with the reason, or fail under XPYD_REQUIRE_ALL=1."""
    missing = missing_slurm_tools()
    if missing:
        _skip_or_fail(f"a Slurm cluster needs {', '.join(missing)}")
    try:
        install_slurm()
        if leftovers := remove_leftovers():
            raise SlurmClusterError("\n".join(leftovers))
        cluster = SlurmCluster()
        cluster.start()
    except (SlurmUnavailable, SlurmClusterError) as error:
        _skip_or_fail(f"no Slurm cluster: {error}")
    try:
        yield cluster
    finally:
        cluster.stop()


def _skip_or_fail(reason: str) -> NoReturn:
    if os.environ.get("XPYD_REQUIRE_ALL"):
        pytest.fail(f"{reason} (XPYD_REQUIRE_ALL=1 requires it)", pytrace=False)
    pytest.skip(reason)


# A service that dies in seconds: an LMCache server refusing its flags (an engine with a bad
# flag dies only after vLLM's imports, a minute on 2 busy cores). For the fail-fast tests.
BROKEN_LMCACHE_FLAG = "--no-such-lmcache-flag"
BROKEN_LMCACHE = f'lmcache.server.extra_args=["{BROKEN_LMCACHE_FLAG}"]'


def lmcache_server_failed_the_wait(stderr: str) -> bool:
    """`up` ended its wait at an LMCache server's first restart, and showed its log."""
    first_restart = re.search(
        r"(lmcache-(?:prefill|decode)-0) was restarted by its policy \(\1 exited with \d+\) "
        r"while we waited for it \(1 restart in the wait\)",
        stderr,
    )
    return first_restart is not None and BROKEN_LMCACHE_FLAG in stderr
