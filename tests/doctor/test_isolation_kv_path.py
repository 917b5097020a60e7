"""Process mode and the KV probe together, on CPU: the PID-namespace fallback, reproduced.

On GPUs a side in its own PID namespace loses cuda_ipc (docs/facts.md). DRAM shows the same
mechanism with CMA, which reaches the peer by process id: two processes in the host's PID
namespace move DRAM over cma; with the serving side in a private one, UCX silently takes TCP.
Needs root (unshare) and a Python with torch+nixl (XPYD_NIXL_PYTHON); skipped otherwise.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from generator.runtimes.isolation import ContainerView, PidNamespace, view_command
from tests.kvprobe.kvprobe import NO_NIXL, PROBE, free_port, json_lines, nixl_python

SIZE = ["--device", "cpu", "--size-mib", "64", "--timeout-s", "40"]
WALL_S = 60

pytestmark = pytest.mark.usefixtures("namespaces")


@pytest.fixture(scope="module")
def python() -> str:
    found = nixl_python()
    if found is None:
        pytest.skip(NO_NIXL)
    return found


def pair_in_views(python: str, serve_view: ContainerView, run_view: ContainerView) -> Any:
    address = f"127.0.0.1:{free_port()}"
    serve_argv = [python, str(PROBE), "serve", "--listen", address, *SIZE]
    server = subprocess.Popen(
        view_command(serve_view, serve_argv), stdout=subprocess.PIPE, text=True
    )
    try:
        run_argv = [python, str(PROBE), "run", "--peer", address, "--iters", "2", *SIZE]
        done = subprocess.run(
            view_command(run_view, run_argv),
            capture_output=True,
            text=True,
            timeout=WALL_S,
            check=False,
        )
        server.communicate(timeout=WALL_S)
    finally:
        server.kill()
        server.wait()
    report = json_lines(done.stdout)["run"]
    assert (done.returncode, report["ok"], report["correct"]) == (0, True, True), report
    return report


def test_shared_pid_namespace_keeps_cma(python: str) -> None:
    host = ContainerView(pid=PidNamespace.HOST)
    report = pair_in_views(python, host, host)
    assert report["transport"] == "cma", report["transport_evidence"]
    assert report["device"]["pid_namespace"] == report["peer_device"]["pid_namespace"]


def test_private_pid_namespace_falls_back_to_tcp(python: str) -> None:
    report = pair_in_views(python, ContainerView(), ContainerView(pid=PidNamespace.HOST))
    assert (report["transport"], report["transports"]) == ("tcp", ["tcp"])
    assert report["device"]["pid_namespace"] != report["peer_device"]["pid_namespace"]
