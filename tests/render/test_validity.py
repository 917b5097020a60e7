"""Rendered files pass the real checkers: `docker compose config`, hadolint, LMCache's own
config loader. Variants cover settings no shipped stack uses."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from generator.paths import Workspace
from generator.planner import make_plan
from generator.render import RenderedStack, render_stack
from generator.render.writer import write_rendered
from generator.stack import load_spec
from tests.tools import compose_cli, hadolint

VARIANTS = {
    "cpu-1p1d": [],
    "xpyd": [],
    "xpyd-mp": [],
    "xpyd-mp-2host": [],
    "xpyd-tp8": [],
    "cpu-lmcache-pd": ["topology=lmcache-pd", "router.kind=proxy", "lmcache.server=null"],
    "host-path-model": [
        "model.source=host-path",
        "model.host_path=/srv/models/llama",
        "model.id=/models/llama",
    ],
    "token-env-file": [
        "hf.token={env_file: secrets/hf.env}",
        "images.pip.index_url=https://pypi.example/simple",
    ],
    "gpu-nvidia-runtime": ["gpu.access=nvidia-runtime", "networking.rdma=true"],
    "gpu-cdi": ["gpu.access=cdi"],
    "gpu-wheelhouse": ["images.pip.wheelhouse=wheelhouse"],
    "proxy-nixl": [
        "router.kind=proxy",
        "router.policy=least_outstanding",
        "prefill.count=3",
        "hosts.0.gpus=[0,1,2,3,4,5,6,7]",
    ],
    # observe: Prometheus built from Debian's package (cpu); pinned upstream images, Grafana
    # and the OTLP collector on a multi-host GPU stack.
    "cpu-observe": ["observe.enabled=true", "observe.kv_floor_gib_s=50"],
    "gpu-observe": ["observe.enabled=true", "observe.traces=true", "observe.publish=true"],
}
BASE = {
    "cpu-lmcache-pd": "cpu-1p1d",
    "host-path-model": "xpyd-mp",
    "token-env-file": "xpyd",
    "gpu-wheelhouse": "xpyd",
    "proxy-nixl": "xpyd-mp",
    "gpu-nvidia-runtime": "xpyd",
    "gpu-cdi": "xpyd-mp",
    "cpu-observe": "cpu-1p1d",
    "gpu-observe": "xpyd-mp-2host",
}


def render_variant(workspace: Workspace, name: str) -> RenderedStack:
    spec = load_spec(workspace.stack_file(BASE.get(name, name)), [*VARIANTS[name], f"name={name}"])
    return render_stack(make_plan(spec), workspace)


@pytest.fixture(scope="module")
def rendered_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    workspace = Workspace(Path(__file__).resolve().parents[2])
    out = tmp_path_factory.mktemp("rendered")
    for name in VARIANTS:
        write_rendered(render_variant(workspace, name), out)
    (out / "secrets").mkdir()
    (out / "secrets" / "hf.env").write_text("HF_TOKEN=not-a-real-token\n")
    return out


def compose_files(root: Path) -> list[Path]:
    return sorted(root.glob("compose/**/compose.yaml"))


def test_every_compose_file_passes_docker_compose_config(rendered_tree: Path) -> None:
    cli = compose_cli()
    files = compose_files(rendered_tree)
    assert len(files) >= len(VARIANTS)
    # Grafana's admin password comes from the shell that runs `up` (`${VAR:?...}`): any value
    # lets compose check the rest.
    env = os.environ | {"GF_SECURITY_ADMIN_PASSWORD": "for-compose-config-only"}
    for path in files:
        result = subprocess.run(
            [*cli, "-f", str(path), "config", "-q"],
            capture_output=True,
            text=True,
            check=False,
            env=env,
        )
        assert result.returncode == 0, f"{path}: {result.stderr}"


def test_compose_config_round_trip_keeps_gpu_reservations(rendered_tree: Path) -> None:
    cli = compose_cli()
    path = rendered_tree / "compose/xpyd/compose.yaml"
    result = subprocess.run(
        [*cli, "-f", str(path), "config", "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    parsed = yaml.safe_load(result.stdout)
    devices = parsed["services"]["decode-1"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [
        {"capabilities": ["gpu"], "driver": "nvidia", "device_ids": ["0", "1", "2", "3"]}
    ]


def test_every_dockerfile_passes_hadolint(rendered_tree: Path, workspace: Workspace) -> None:
    binary = hadolint()
    dockerfiles = sorted(rendered_tree.glob("images/*/*.Dockerfile"))
    assert len(dockerfiles) >= 3 * len(VARIANTS)  # prefill, decode, router (+ lmcache)
    config = workspace.root / ".hadolint.yaml"
    for path in dockerfiles:
        result = subprocess.run(
            [binary, "--config", str(config), str(path)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, f"{path}:\n{result.stdout}{result.stderr}"


# LMCache logs through its own stderr handlers (not propagated), so warnings such as
# "Unknown configuration key" are read from stderr, between per-file markers.
_LOADER = """
import json, sys
from lmcache.v1.config import LMCacheEngineConfig
results = {}
for path in sys.argv[1:]:
    print("=== " + path, file=sys.stderr, flush=True)
    config = LMCacheEngineConfig.from_file(path)
    config.validate()
    sys.stderr.flush()
    results[path] = {k: getattr(config, k) for k in config.__dict__ if not k.startswith("_")}
print(json.dumps(results, default=str))
"""


def _warnings_per_file(stderr: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    current = ""
    for line in stderr.splitlines():
        if line.startswith("=== "):
            current = line[4:]
            found[current] = []
        elif "WARNING" in line and current:
            found[current].append(line)
    return found


def test_lmcache_configs_load_with_lmcaches_own_loader(
    rendered_tree: Path, workspace: Workspace
) -> None:
    python = workspace.root / ".cache/lmcache-venv/bin/python"
    if not python.exists():
        pytest.skip(
            "LMCache's config loader not installed (.ci/setup puts it in .cache/lmcache-venv)"
        )
    paths = sorted(rendered_tree.glob("compose/**/lmcache/*.yaml"))
    assert len(paths) >= 8
    result = subprocess.run(
        [str(python), "-c", _LOADER, *map(str, paths)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    warnings = _warnings_per_file(result.stderr)
    for path in paths:
        assert warnings[str(path)] == [], path
        for key, value in yaml.safe_load(path.read_text()).items():
            assert loaded[str(path)][key] == value, f"{path}: {key}"
