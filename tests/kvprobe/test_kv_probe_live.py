"""The KV probe for real: two processes, or two containers, moving DRAM over NIXL and UCX.

The probe needs torch and nixl. Processes use a Python that has them (``XPYD_NIXL_PYTHON``, or
the one running pytest); without one, both processes run inside one container of a local xpyd
engine image (xpyd/engine-base, prefill or decode, as ``up`` builds them), through the docker
CLI. The container-pair tests need that image. Each skips with the reason when its need is
missing. Buffers are small (64 MiB, two timed transfers each way): this checks the mechanism,
the numbers in docs/facts.md come from full-size runs.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.kvprobe.kvprobe import PROBE, free_port, json_lines, nixl_python

IN_CONTAINER = "/opt/xpyd/nixl_kv_probe.py"
SIZE = ["--device", "cpu", "--size-mib", "64"]
RUN_ARGS = [*SIZE, "--iters", "2", "--timeout-s", "40"]
SERVE_ARGS = [*SIZE, "--timeout-s", "45"]
WALL_S = 60
KNOWN_TRANSPORTS = {"cma", "posix", "sysv", "xpmem", "knem", "tcp", "rc_mlx5", "dc_mlx5", "ud_mlx5"}


@dataclass(frozen=True)
class Pair:
    run: dict[str, Any]
    serve: dict[str, Any]
    run_status: int


class LocalPair:
    """Both sides as processes of a Python that has torch and nixl."""

    def __init__(self, python: str) -> None:
        self.python = python

    def alone(self, role: str, args: list[str]) -> tuple[int, dict[str, Any]]:
        done = subprocess.run(
            [self.python, str(PROBE), role, *args],
            capture_output=True,
            text=True,
            timeout=WALL_S,
            check=False,
        )
        return done.returncode, json_lines(done.stdout)[role]

    def pair(self, env: dict[str, str]) -> Pair:
        port = free_port()
        full_env = {**os.environ, **env}
        serve_cmd = [self.python, str(PROBE), "serve", "--listen", f"127.0.0.1:{port}"]
        server = subprocess.Popen(
            [*serve_cmd, *SERVE_ARGS], stdout=subprocess.PIPE, text=True, env=full_env
        )
        try:
            run_cmd = [self.python, str(PROBE), "run", "--peer", f"127.0.0.1:{port}", *RUN_ARGS]
            done = subprocess.run(
                run_cmd, capture_output=True, text=True, env=full_env, timeout=WALL_S, check=False
            )
            served, _ = server.communicate(timeout=WALL_S)
        finally:
            server.kill()
            server.wait()
        return Pair(json_lines(done.stdout)["run"], json_lines(served)["serve"], done.returncode)


class ContainerPair:
    """Both sides as processes inside one container of an engine image."""

    def __init__(self, image: str) -> None:
        self.image = image

    def _docker(self, env: dict[str, str], script: str) -> subprocess.CompletedProcess[str]:
        command = ["docker", "run", "--rm", "-v", f"{PROBE}:{IN_CONTAINER}:ro"]
        for key, value in env.items():
            command += ["-e", f"{key}={value}"]
        command += ["--entrypoint", "sh", self.image, "-c", script]
        return subprocess.run(command, capture_output=True, text=True, timeout=WALL_S, check=False)

    def alone(self, role: str, args: list[str]) -> tuple[int, dict[str, Any]]:
        done = self._docker({}, " ".join(["python3", IN_CONTAINER, role, *args]))
        return done.returncode, json_lines(done.stdout)[role]

    def pair(self, env: dict[str, str]) -> Pair:
        probe_cmd = f"python3 {IN_CONTAINER}"
        script = (
            f"{probe_cmd} serve --listen 127.0.0.1:5600 {' '.join(SERVE_ARGS)} & "
            f"{probe_cmd} run --peer 127.0.0.1:5600 {' '.join(RUN_ARGS)}; status=$?; "
            "wait; exit $status"
        )
        done = self._docker(env, script)
        reports = json_lines(done.stdout)
        return Pair(reports["run"], reports["serve"], done.returncode)


@pytest.fixture(scope="module")
def sides(request: pytest.FixtureRequest) -> LocalPair | ContainerPair:
    python = nixl_python()
    if python is not None:
        return LocalPair(python)
    return ContainerPair(request.getfixturevalue("cpu_engine_image"))


def assert_measured(pair: Pair) -> None:
    assert pair.run_status == 0, pair.run
    assert (pair.run["ok"], pair.run["correct"], pair.run["error"]) == (True, True, None)
    assert pair.run["bytes"] == 64 << 20
    for key in ("write_gib_s_best", "write_gib_s_median", "read_gib_s_best", "read_gib_s_median"):
        assert pair.run[key] > 0
    assert (pair.serve["ok"], pair.serve["correct"]) == (True, True), pair.serve
    assert pair.serve["peer_device"] == pair.run["device"]


def test_dram_between_two_processes(sides: LocalPair | ContainerPair) -> None:
    pair = sides.pair({})
    assert_measured(pair)
    assert pair.run["transport"] in KNOWN_TRANSPORTS, pair.run["transport_evidence"]
    assert all(pair.run["transports_by_op"][op] for op in ("write", "read"))


def test_forced_tcp_is_what_the_report_names(sides: LocalPair | ContainerPair) -> None:
    pair = sides.pair({"UCX_TLS": "tcp"})
    assert_measured(pair)
    assert (pair.run["transport"], pair.run["transports"]) == ("tcp", ["tcp"])


def test_unreachable_peer_fails_in_bounded_time(sides: LocalPair | ContainerPair) -> None:
    started = time.monotonic()
    status, report = sides.alone("run", ["--peer", "127.0.0.1:9", *SIZE, "--timeout-s", "3"])
    assert (status, report["ok"], report["transport"]) == (1, False, "unknown")
    assert "unreachable" in report["error"]
    assert time.monotonic() - started < 30


def test_serving_side_gives_up_without_a_peer(sides: LocalPair | ContainerPair) -> None:
    status, report = sides.alone("serve", ["--listen", "127.0.0.1:0", *SIZE, "--timeout-s", "3"])
    assert (status, report["ok"]) == (1, False)
    assert "peer" in report["error"]


# --- one container per side -----------------------------------------------------------------


@pytest.fixture
def image(cpu_engine_image: str) -> str:
    return cpu_engine_image


@pytest.fixture
def network() -> Iterator[str]:
    name = f"xpyd-kvprobe-test-{uuid.uuid4().hex[:8]}"
    subprocess.run(["docker", "network", "create", name], capture_output=True, check=True)
    yield name
    subprocess.run(["docker", "network", "rm", name], capture_output=True, check=False)


def container_pair(image: str, flags: list[str], peer_host: str, port: int = 5600) -> Pair:
    """``serve`` detached, ``run`` in the foreground; both removed whatever happens."""
    tag = uuid.uuid4().hex[:8]
    server = f"xpyd-kvprobe-serve-{tag}"
    base = ["docker", "run", *flags, "-v", f"{PROBE}:{IN_CONTAINER}:ro", "--entrypoint", "python3"]
    try:
        start = [*base, "-d", "--name", server, image, IN_CONTAINER, "serve"]
        subprocess.run([*start, "--listen", f"0.0.0.0:{port}", *SERVE_ARGS], check=True, timeout=30)
        peer = peer_host.replace("SERVER", server)
        run_cmd = [*base, "--rm", image, IN_CONTAINER, "run", "--peer", f"{peer}:{port}", *RUN_ARGS]
        done = subprocess.run(run_cmd, capture_output=True, text=True, timeout=WALL_S, check=False)
        subprocess.run(["docker", "wait", server], capture_output=True, timeout=WALL_S, check=False)
        served = subprocess.run(
            ["docker", "logs", server], capture_output=True, text=True, timeout=30, check=False
        )
    finally:
        subprocess.run(["docker", "rm", "-f", server], capture_output=True, check=False)
    return Pair(json_lines(done.stdout)["run"], json_lines(served.stdout)["serve"], done.returncode)


@pytest.mark.docker
def test_containers_on_a_bridge_move_kv_over_tcp(image: str, network: str) -> None:
    """Docker's defaults (own network, PID namespace, seccomp profile): only TCP is left."""
    pair = container_pair(image, ["--network", network], peer_host="SERVER")
    assert_measured(pair)
    assert (pair.run["transport"], pair.run["transports"]) == ("tcp", ["tcp"])
    assert pair.run["device"]["pid_namespace"] != pair.run["peer_device"]["pid_namespace"]


@pytest.mark.docker
def test_containers_sharing_host_namespaces_use_cma(image: str) -> None:
    """CMA between containers needs host network, PID and IPC, SYS_PTRACE (docs/facts.md)."""
    flags = ["--network", "host", "--pid", "host", "--ipc", "host", "--cap-add", "SYS_PTRACE"]
    pair = container_pair(image, flags, peer_host="127.0.0.1", port=free_port())
    assert_measured(pair)
    assert pair.run["transport"] == "cma", pair.run["transport_evidence"]
    assert pair.run["device"]["pid_namespace"] == pair.run["peer_device"]["pid_namespace"]
