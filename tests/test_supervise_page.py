"""--serves-page: the supervisor's own page of its command's start, which the other nodes of an
engine over several hosts watch (a headless vLLM serves no page, and a node does not notice its
peer's death: docs/facts.md). Real supervisors, real sockets; the commands are stand-ins
(``sleep``) for the vLLM nodes, which the Slurm test runs for real."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from generator.supervise import SOURCE, start_time
from tests.conftest import ROOT

_ENV = {"XPYD_WATCH_EVERY_S": "0.2", "PATH": "/usr/bin:/bin"}


def _ephemeral_port() -> int:
    """A port the kernel just handed out and took back (the ephemeral range)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _supervised(name: str, options: list[str], command: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(ROOT / SOURCE), *options, name, "--", *command],
        stderr=subprocess.PIPE,
        text=True,
        env=_ENV,
    )


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _wait_for_page(url: str, within_s: float = 20.0) -> None:
    """Until ``url`` answers 200 (503 before the command's first run has started)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if _get(url)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"{url} never answered 200")


def test_the_page_says_the_running_command_s_start() -> None:
    port = _ephemeral_port()
    before = time.time()
    process = _supervised("node", ["--serves-page", str(port)], ["sleep", "600"])
    try:
        _wait_for_page(f"http://127.0.0.1:{port}/health")
        assert _get(f"http://127.0.0.1:{port}/health") == (200, "ok\n")
        status, page = _get(f"http://127.0.0.1:{port}/metrics")
        started = start_time(page)
        assert status == 200
        assert started is not None
        assert before - 1 <= started <= time.time()
        assert _get(f"http://127.0.0.1:{port}/v1/models")[0] == 404
    finally:
        process.terminate()
        process.communicate(timeout=30)
    with pytest.raises(urllib.error.URLError, match="refused"):  # it goes with its supervisor
        _get(f"http://127.0.0.1:{port}/health")


def test_a_node_whose_peer_started_again_is_ended_as_a_crash(tmp_path: Path) -> None:
    """The follower's first run exits (as a killed node would) and its supervisor starts it
    again: its page gives a newer start, and the leader watching it ends its own command as a
    crash, so the runtime starts the whole group anew."""
    follower_port, leader_port = _ephemeral_port(), _ephemeral_port()
    again = tmp_path / "ran"
    follower_command = f"if [ -e {again} ]; then exec sleep 600; fi; touch {again}; sleep 2"
    follower = _supervised(
        "follower",
        ["--restarts", "1", "--serves-page", str(follower_port)],
        ["sh", "-c", follower_command],
    )
    page = f"http://127.0.0.1:{follower_port}/metrics"
    leader = _supervised(
        "leader", ["--ends-with", page, "--serves-page", str(leader_port)], ["sleep", "600"]
    )
    try:
        _, said = leader.communicate(timeout=60)
    finally:
        leader.kill()
        follower.terminate()
        follower.communicate(timeout=30)
    assert leader.returncode in {1, 143}, said  # a crash (SIGTERM'd as asked by no one)
    assert f"leader saw its peer at {page} restart" in said


def test_a_page_port_that_is_taken_is_a_usage_error() -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))  # where the page binds
        taken.listen()
        port = taken.getsockname()[1]
        run = subprocess.run(
            [sys.executable, str(ROOT / SOURCE), "--serves-page", str(port), "n", "--", "true"],
            capture_output=True, text=True, check=False, timeout=30, env=_ENV,
        )  # fmt: skip
    assert run.returncode == 2
    assert f"n: cannot serve its page on port {port}" in run.stderr


@pytest.mark.parametrize("port", ["0", "65536", "x"])
def test_a_page_port_that_is_no_port_is_refused(port: str) -> None:
    run = subprocess.run(
        [sys.executable, str(ROOT / SOURCE), "--serves-page", port, "n", "--", "true"],
        capture_output=True, text=True, check=False, timeout=30, env=_ENV,
    )  # fmt: skip
    assert run.returncode == 2
    assert "is not a TCP port (1-65535)" in run.stderr
