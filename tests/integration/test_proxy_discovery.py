"""The proxy picks up a scaled role through real DNS, without a restart.

Docker's embedded DNS answers a network alias with every container that holds it, as a
cluster's DNS answers a headless Service with every pod of a StatefulSet scaled with
`kubectl scale`. The proxy runs from its own image with the config a stack renders for it
(`discover_every_s`); the engines are stand-ins (tests/proxy/fakes.py, run in the same image):
what is under test is the proxy finding them. The stand-in is the cluster (Docker's bridge and
its DNS), labelled as such in docs/kubernetes.md."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, cpu_1p1d_image

pytestmark = pytest.mark.docker

_ENGINE_PORT = 8200
_PROXY_PORT = 9100
_HEALTHY = re.compile(r'^xpyd_proxy_backend_healthy\{backend="([^"]+)",role="decode"\} 1\.0$')


def _docker(*args: str) -> str:
    done = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, f"docker {' '.join(args)}: {done.stderr[-2000:]}"
    return done.stdout.strip()


class Cluster:
    """A network of its own, and the containers started on it (all removed after)."""

    def __init__(self, image: str) -> None:
        self.image, self.network = image, f"xpyd-discovery-{os.getpid()}"
        self.containers: list[str] = []

    def engine(self, alias: str, name: str) -> str:
        """A stand-in engine answering as ``name``, reached by ``alias`` (its Service)."""
        return self._run(
            f"{self.network}-{name}",
            ["--network-alias", alias, "-v", f"{ROOT / 'tests'}:/src/tests:ro"],
            ["env", "PYTHONPATH=/src", "python3", "-m", "tests.proxy.fakes", name,
             str(_ENGINE_PORT)],
        )  # fmt: skip

    def proxy(self, config: Path) -> str:
        return self._run(
            f"{self.network}-router",
            ["-v", f"{config}:/etc/xpyd/router.yaml:ro", "-p", f"127.0.0.1::{_PROXY_PORT}"],
            ["python3", "-m", "generator.proxy", "--config", "/etc/xpyd/router.yaml"],
        )

    def remove(self, container: str) -> None:
        _docker("rm", "-f", container)
        self.containers.remove(container)

    def _run(self, name: str, options: list[str], command: list[str]) -> str:
        _docker("run", "-d", "--name", name, "--network", self.network, *options,
                self.image, *command)  # fmt: skip
        self.containers.append(name)
        return name


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    made = Cluster(cpu_1p1d_image("router"))
    _docker("network", "create", made.network)
    try:
        yield made
    finally:
        for container in list(made.containers):
            subprocess.run(["docker", "rm", "-f", container], capture_output=True, check=False)
        subprocess.run(["docker", "network", "rm", made.network], capture_output=True, check=False)


def _config(tmp_path: Path) -> Path:
    """What a stack renders for its proxy, with engines named as their Services are."""
    config = {
        "protocol": "nixl",
        "listen": {"host": "0.0.0.0", "port": _PROXY_PORT},
        "prefill": [{"name": "prefill-0", "url": f"http://prefill-0:{_ENGINE_PORT}"}],
        "decode": [{"name": "decode-0", "url": f"http://decode-0:{_ENGINE_PORT}"}],
        "timeouts": {"health_interval_s": 1},
        "discover_every_s": 1,
    }
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    path.chmod(0o644)
    return path


def _until(check: Callable[[], bool], what: str, within_s: float = 60) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, f"not within {within_s:g} s: {what}"
        time.sleep(0.5)


def _get(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return str(answer.read().decode())
    except OSError:
        return ""


def _healthy_decoders(base: str) -> set[str]:
    return {
        m.group(1) for line in _get(f"{base}/metrics").splitlines() if (m := _HEALTHY.match(line))
    }


def _answered_by(base: str, requests: int) -> set[str]:
    """Which stand-in decoders answered ``requests`` completions (their name is the text)."""
    names = set()
    body = json.dumps({"model": "m", "prompt": "hi", "max_tokens": 3}).encode()
    for _ in range(requests):
        sent = urllib.request.Request(
            f"{base}/v1/completions", body, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(sent, timeout=30) as answer:
            names.add(json.loads(answer.read())["choices"][0]["text"])
    return names


def test_a_role_scaled_up_and_down_is_routed_to_without_a_restart(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.engine("prefill-0", "p0")
    first, second = cluster.engine("decode-0", "d0"), cluster.engine("decode-0", "d1")
    router = cluster.proxy(_config(tmp_path))
    base = "http://" + _docker("port", router, str(_PROXY_PORT)).splitlines()[0]

    # Two pods behind decode-0: a backend each, by address.
    _until(lambda: len(_healthy_decoders(base)) == 2, "two decoders found")
    assert all(name.startswith("decode-0@") for name in _healthy_decoders(base))
    assert _answered_by(base, 6) == {"d0", "d1"}

    cluster.engine("decode-0", "d2")  # kubectl scale ... --replicas 3
    _until(lambda: len(_healthy_decoders(base)) == 3, "the third decoder found")
    assert _answered_by(base, 9) == {"d0", "d1", "d2"}

    cluster.remove(first)  # scaled back to one: the name as written again
    cluster.remove(second)
    _until(lambda: _healthy_decoders(base) == {"decode-0"}, "back to the backend as written")
    assert _answered_by(base, 3) == {"d2"}
    assert _docker("inspect", "-f", "{{.RestartCount}} {{.State.Running}}", router) == "0 true"
