"""The multi-host pieces, for real, on two test hosts (network namespaces, each with its own
address and Docker engine reached as a docker context): engines answer through their
contexts, a dead one fails fast and clearly, images travel without a registry (once), and a
host-network container lives at its host's address only."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from generator.docker import (
    LOCAL,
    ComposeStack,
    DockerEndpoint,
    TransferReport,
    check_reachable,
    engine_facts,
    image_exists,
    image_id,
    transfer_images,
)
from generator.errors import DockerError
from tests.integration.hosts import NetnsHosts

pytestmark = pytest.mark.docker


@contextmanager
def timed(step: str) -> Iterator[None]:
    started = time.monotonic()
    yield
    print(f"[hosts] {step}: {time.monotonic() - started:.1f} s", flush=True)


@pytest.fixture(scope="module")
def shipped(netns_hosts: NetnsHosts, router_image: str) -> tuple[str, TransferReport]:
    """The router image sent from the main engine to hosta: (tag, what the first send did)."""
    with timed(f"transfer {router_image} to hosta"):
        report = transfer_images([router_image], LOCAL, netns_hosts.a.endpoint, print)
    return router_image, report


def test_each_engine_answers_through_its_context(netns_hosts: NetnsHosts) -> None:
    for host in netns_hosts.hosts:
        with timed(f"{host.name} answers"):
            assert check_reachable(host.endpoint, timeout_s=10)
        facts = engine_facts(host.endpoint)
        assert facts is not None
        assert facts.root_dir == str(host.data_root)  # its own engine, not the main one
        assert facts.daemon_pid is None  # only the local engine's pid is known
    local = engine_facts(LOCAL)
    assert local is not None
    assert local.root_dir not in {str(host.data_root) for host in netns_hosts.hosts}


def test_a_context_whose_engine_is_gone_fails_fast_naming_host_and_fix() -> None:
    name = f"xpyd-dead-{time.monotonic_ns() % 100000}"
    with tempfile.TemporaryDirectory(dir="/tmp") as folder:
        sock = Path(folder) / "docker.sock"  # nobody serves it
        subprocess.run(
            ["docker", "context", "create", name, "--docker", f"host=unix://{sock}"],
            check=True,
            capture_output=True,
        )
        try:
            started = time.monotonic()
            with pytest.raises(DockerError) as caught:
                check_reachable(DockerEndpoint(host="hostc", context=name), timeout_s=20)
            assert time.monotonic() - started < 5
        finally:
            subprocess.run(["docker", "context", "rm", "-f", name], check=False)
    text = str(caught.value)
    assert text.startswith(f"host hostc's Docker engine (context {name}) does not answer: ")
    assert "Cannot connect to the Docker daemon" in text
    assert f"fix: check that `docker --context {name} info` answers here" in text


def test_an_engine_that_never_answers_is_given_up_on_at_the_deadline() -> None:
    with tempfile.TemporaryDirectory(dir="/tmp") as folder, socket.socket(socket.AF_UNIX) as sock:
        path = Path(folder) / "docker.sock"
        sock.bind(str(path))
        sock.listen()  # accepts connections (the kernel does), never answers a request
        started = time.monotonic()
        with pytest.raises(DockerError) as caught:
            check_reachable(DockerEndpoint(host="hostc", url=f"unix://{path}"), timeout_s=2)
        assert time.monotonic() - started < 10
    assert f"host hostc's Docker engine (unix://{path}) did not answer within 2 s" in str(
        caught.value
    )


def test_images_travel_to_a_host_without_a_registry_once(
    netns_hosts: NetnsHosts, shipped: tuple[str, TransferReport]
) -> None:
    tag, first = shipped
    hosta = netns_hosts.a.endpoint
    assert first.sent == (tag,)
    assert first.skipped == ()
    assert first.bytes_sent > 100 * 2**20
    print(f"[hosts] first send: {first.bytes_sent / 2**20:.0f} MiB in {first.seconds:.1f} s")
    assert image_id(hosta, tag) == image_id(LOCAL, tag)
    assert not image_exists(tag, netns_hosts.b.endpoint)  # each host has its own store
    with timed("second transfer (skipped)"):
        again = transfer_images([tag], LOCAL, hosta, print)
    assert again == TransferReport(sent=(), skipped=(tag,), bytes_sent=0, seconds=again.seconds)
    assert again.seconds < 10


def test_a_missing_image_is_refused_before_anything_is_sent(netns_hosts: NetnsHosts) -> None:
    with pytest.raises(DockerError) as caught:
        transfer_images(["xpyd/none:0"], LOCAL, netns_hosts.b.endpoint, print)
    assert "xpyd/none:0 is not on the local Docker engine, so it cannot be sent to host hostb" in (
        str(caught.value)
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))  # the ephemeral range: >= 32768 here
        port: int = probe.getsockname()[1]
        return port


def http_status(url: str, timeout_s: float = 2.0) -> int:
    with urllib.request.urlopen(url, timeout=timeout_s) as answer:
        status: int = answer.status
        return status


def wait_serving(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            http_status(url)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def test_a_host_network_container_lives_at_its_hosts_address(
    netns_hosts: NetnsHosts, shipped: tuple[str, TransferReport], tmp_path: Path
) -> None:
    tag, _ = shipped
    hosta, hostb = netns_hosts.a, netns_hosts.b
    port = free_port()
    compose_file = tmp_path / "compose.yaml"
    service = {
        "image": tag,
        "pull_policy": "never",
        "network_mode": "host",
        "entrypoint": ["python", "-m", "http.server", "--bind", "0.0.0.0", str(port)],
        "init": True,  # python as pid 1 would ignore SIGTERM: down would wait its timeout
    }
    compose_file.write_text(yaml.safe_dump({"services": {"web": service}}), encoding="utf-8")
    stack = ComposeStack(compose_file, f"xpyd-web-{netns_hosts.suffix}", endpoint=hosta.endpoint)
    try:
        with timed("compose up through hosta's context"):
            stack.up(["web"])
        with timed("serving at hosta's address"):
            wait_serving(f"http://{hosta.address}:{port}/", timeout_s=30)
        probe = (
            f"import urllib.request as u; u.urlopen('http://{hosta.address}:{port}/', timeout=5)"
        )
        from_b = subprocess.run(
            hostb.in_netns(sys.executable, "-c", probe),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert from_b.returncode == 0, from_b.stderr
        with pytest.raises(ConnectionRefusedError):  # nothing of it in the root namespace
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        assert [state.service for state in stack.ps()] == ["web"]
    finally:
        with timed("compose down"):
            stack.down()


def test_one_off_containers_run_on_their_hosts_engine(
    netns_hosts: NetnsHosts, shipped: tuple[str, TransferReport], tmp_path: Path
) -> None:
    """start/wait/output/remove all reach hosta's engine: the local one has no such container."""
    tag, _ = shipped
    compose_file = tmp_path / "compose.yaml"
    service = {"image": tag, "pull_policy": "never", "network_mode": "host"}
    compose_file.write_text(yaml.safe_dump({"services": {"job": service}}), encoding="utf-8")
    project = f"xpyd-job-{netns_hosts.suffix}"
    stack = ComposeStack(compose_file, project, endpoint=netns_hosts.a.endpoint)
    script = "print('ran')"
    oneoff = stack.start_oneoff("job", ["python", "-c", script], name=f"{project}-1", env={})
    try:
        assert oneoff.wait(timeout_s=60) == 0
        assert oneoff.output() == ("ran\n", "")
        local = ["docker", "container", "inspect", oneoff.name]  # the local engine's
        assert subprocess.run(local, capture_output=True, check=False).returncode != 0
    finally:
        oneoff.remove()
        stack.down()
