"""doctor on the cpu stack for real (host checks, then DRAM moved over NIXL between the prefill
and decode services' one-off containers, and between two processes in their views), and one
host's compose project of a multi-host stack started with a plain `docker compose up`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from generator.probes.kv_reference import read_reference
from tests.integration.conftest import ROOT, cli, workspace_copy
from tests.kvprobe.kvprobe import NO_NIXL, nixl_python

pytestmark = pytest.mark.stack
STACK = "cpu-1p1d"


def doctor_json(*args: str) -> tuple[int, dict[str, Any]]:
    result = cli("doctor", STACK, *args, "--json", timeout_s=900)
    assert result.stdout.strip(), result.stderr[-3000:]
    report: dict[str, Any] = json.loads(result.stdout)
    return result.returncode, report


def rows_by_check(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["check"]: row for row in report["checks"]}


def test_doctor_checks_the_host_and_moves_dram_between_the_containers() -> None:
    status, report = doctor_json("--kv-path")
    rows = rows_by_check(report)
    assert status == 0, [r for r in report["checks"] if r["verdict"] == "FAIL"]
    assert report["passed"] is True
    for check in ("Docker engine", "Docker Compose", "planned ports"):
        assert rows[check]["verdict"] == "PASS", rows[check]
    assert rows["/dev/shm and memory (cpu engines)"]["verdict"] == "PASS"
    kv = rows["KV path prefill-0 -> decode-0 (container, rendered)"]
    assert kv["verdict"] == "PASS"
    (probe,) = report["kv_paths"]
    assert (probe["ok"], probe["correct"], probe["bytes"]) == (True, True, 256 << 20)
    # One-off containers of the bridge-network services: UCX has only TCP between them.
    assert probe["transport"] == "tcp"
    assert probe["read_gib_s_median"] > 0
    assert probe["device"]["host"] == "decode-0"
    assert probe["peer_device"]["host"] == "prefill-0"
    assert not list((ROOT / "compose" / STACK).glob(".doctor-kvpath-*"))
    # Kept for the smoke verdict, which names its KV figure's share of this rate.
    reference = read_reference(ROOT, STACK)
    assert reference is not None
    assert reference.mode == "container"
    (pair,) = reference.pairs
    assert (pair.pair, pair.read_gib_s, pair.transport) == (
        "prefill-0 -> decode-0",
        probe["read_gib_s_median"],
        "tcp",
    )


def test_doctor_process_mode_reproduces_the_containers_view() -> None:
    python = nixl_python()
    if python is None:
        pytest.skip(NO_NIXL)
    status, report = doctor_json("--process", "--python", python)
    assert status == 0, [r for r in report["checks"] if r["verdict"] == "FAIL"]
    (probe,) = report["kv_paths"]
    assert (probe["mode"], probe["ok"], probe["correct"]) == ("process", True, True)
    # The cpu services keep Docker's private PID namespaces, so each side is alone in its own
    # (as in the containers) and UCX cannot use cross-memory attach: TCP, as measured there.
    assert probe["device"]["pid_namespace"] != probe["peer_device"]["pid_namespace"]
    assert probe["transport"] == "tcp"


def test_doctor_names_a_busy_port_and_fails() -> None:
    import socket

    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("0.0.0.0", 30000))
        holder.listen()
        result = cli("doctor", STACK)
    assert result.returncode == 1
    assert "port 30000 (router: router" in result.stdout
    assert "python" in result.stdout
    assert "NOT ready" in result.stdout


TWO_HOSTS = [
    "name=cpu-2host",
    "images.registry=xpyd-selftest",  # tags no earlier build made: compose must build them
    # Only b's project runs (here); a is a documentation address (RFC 5737) nothing dials.
    "hosts=[{name: a, address: 192.0.2.1, cpus: [0]}, {name: b, address: 127.0.0.1, cpus: [1]}]",
    "placement={prefill: {hosts: a}, decode: {hosts: b}}",
    "ports.decode_http=37200",  # its own ports: the other tests' stacks may still be up
    "ports.lmcache_http=38090",
    "ports.nixl_side_channel=37600",
]


def compose(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", "compose", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def test_one_hosts_project_builds_and_starts_with_plain_docker_compose(
    scratch_root: Path,
) -> None:
    """The decode host's project alone: its images build from their own Dockerfiles (no
    engine base built elsewhere first) and its services become healthy."""
    root = workspace_copy(scratch_root / "two-hosts")
    rendered = cli("render", STACK, *[f for a in TWO_HOSTS for f in ("--set", a)], root=root)
    assert rendered.returncode == 0, rendered.stderr
    host_b = root / "compose" / "cpu-2host" / "b"
    document = json.loads(compose("config", "--format", "json", cwd=host_b).stdout)
    tags = sorted({service["image"] for service in document["services"].values()})
    assert tags
    assert all(tag.startswith("xpyd-selftest/") for tag in tags)
    try:
        up = compose("up", "-d", "--wait", cwd=host_b)  # what a user runs on that host
        assert up.returncode == 0, up.stderr[-3000:]
        listed = compose("ps", "--all", "--format", "json", cwd=host_b).stdout
        states = [json.loads(line) for line in listed.splitlines() if line.strip()]
        healthy = {s["Service"]: s["Health"] for s in states}
        assert healthy == {"decode-0": "healthy", "lmcache-decode-0": "healthy"}
    finally:
        compose("down", "--remove-orphans", cwd=host_b)
        subprocess.run(["docker", "rmi", *tags], capture_output=True, check=False)
