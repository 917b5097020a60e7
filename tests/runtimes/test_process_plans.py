"""Process plans of every shipped stack (runtime: process): what the process runtime would
run, with no container path left in a command or environment, read back intact from the
rendered processes.yaml. Multi-host stacks refuse the process runtime."""

from __future__ import annotations

from pathlib import Path

import pytest

from generator.errors import SpecError
from generator.paths import Workspace
from generator.plan import Plan
from generator.planner import make_plan
from generator.render import RenderedStack, render_stack
from generator.serializers.process_file import load_process_project
from generator.stack import load_spec

ROOT = Path(__file__).resolve().parents[2]
SINGLE_HOST = ["cpu-1p1d", "cpu-lmcache-pd", "xpyd", "xpyd-mp"]
MULTI_HOST = ["cpu-2host", "xpyd-mp-2host", "xpyd-tp8"]
CONTAINER_PATHS = ("/etc/xpyd", "/opt/xpyd", "/root/.cache", "/run/secrets")


def rendered(stack: str, *overrides: str) -> tuple[Plan, RenderedStack]:
    plan = make_plan(load_spec(Workspace(ROOT).stack_file(stack), ["runtime=process", *overrides]))
    return plan, render_stack(plan, Workspace(ROOT))


@pytest.mark.parametrize("stack", SINGLE_HOST)
def test_no_container_path_is_left(stack: str) -> None:
    plan, stack_files = rendered(stack)
    (project,) = stack_files.processes
    assert plan.network == "host"
    for service in project.services:
        values = [*service.command, *service.env.values(), *service.health]
        leftovers = [v for v in values if any(v.startswith(path) for path in CONTAINER_PATHS)]
        assert leftovers == [], f"{service.name}: {leftovers}"
        assert "HF_HOME" not in service.env  # the caller's own cache, unless hf.cache_dir
    names = [service.name for service in project.services]
    assert names[-2:] == ["router", "bench"]  # the start order of the compose file


@pytest.mark.parametrize("stack", SINGLE_HOST)
def test_the_rendered_plan_reads_back_the_same(stack: str, tmp_path: Path) -> None:
    _, stack_files = rendered(stack)
    (project,) = stack_files.processes
    path = tmp_path / project.plan_file
    path.parent.mkdir(parents=True)
    path.write_text(project.text)
    loaded = load_process_project(path, tmp_path)
    assert loaded.services == project.services
    assert loaded.secrets == project.secrets
    assert (loaded.name, loaded.host, loaded.directory) == (
        project.name,
        project.host,
        project.directory,
    )


def test_configs_and_caches_map_to_host_paths() -> None:
    _, stack_files = rendered("cpu-lmcache-pd")
    (project,) = stack_files.processes
    prefill = project.service("prefill-0")
    assert prefill.env["LMCACHE_CONFIG_FILE"] == "compose/cpu-lmcache-pd/lmcache/prefill-0.yaml"
    assert prefill.env["VLLM_CACHE_ROOT"] == ".cache/process/xpyd-cpu-lmcache-pd/vllm-cache"
    assert prefill.command[prefill.command.index("--model") + 1] == ".cache/models/tiny-llama"
    router = project.service("router")
    assert router.interpreter == "router"
    assert router.command[-2:] == ("--config", "compose/cpu-lmcache-pd/router.yaml")


def test_a_cache_dir_and_a_token_file_become_host_paths() -> None:
    _, stack_files = rendered("xpyd-mp", "hf.cache_dir=/data/hf", "hf.token={file: secrets/hf}")
    (project,) = stack_files.processes
    prefill = project.service("prefill-0")
    assert prefill.env["HF_HOME"] == "/data/hf"
    assert prefill.env["HF_TOKEN_PATH"] == "secrets/hf"  # the file's path, never its content


@pytest.mark.parametrize("stack", MULTI_HOST)
def test_multi_host_stacks_refuse_the_process_runtime(stack: str) -> None:
    with pytest.raises(SpecError, match="runtime") as caught:
        rendered(stack)
    assert "the process runtime starts every service on this machine" in str(caught.value)
