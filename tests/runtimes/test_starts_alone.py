"""Engines that share a GPU start one at a time, restarts included (measured on an H100: a
prefiller restarted while its decoder was profiling found "No available memory for the cache
blocks"). The plan names the shared GPUs and the process runtime hands them to each engine's
supervisor; what the supervisor does with them is in tests/test_supervise.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from generator.paths import Workspace
from generator.plan import Plan
from generator.plan.start_order import gpus_started_alone, vllm_flag
from generator.planner import make_plan
from generator.render import RenderedStack, render_stack
from generator.runtimes.process_commands import Pythons, ServiceCommands
from generator.serializers.process_file import load_process_project
from generator.services.parts import START_LOCKS
from generator.spec import Isolation
from generator.stack import load_spec
from generator.supervise import LOCK_DIR_ENV

ROOT = Path(__file__).resolve().parents[2]
# Two engines on GPU 0 that each measure their KV cache (xpyd-1gpu gives each its size).
MEASURING = "xpyd-lmcache-1gpu"


def rendered(stack: str, *overrides: str) -> tuple[Plan, RenderedStack]:
    settings = ["runtime=process", *overrides]
    plan = make_plan(load_spec(Workspace(ROOT).stack_file(stack), settings))
    return plan, render_stack(plan, Workspace(ROOT))


def test_engines_on_one_gpu_start_alone_on_it(tmp_path: Path) -> None:
    plan, files = rendered(MEASURING)  # prefill and decode share GPU 0 (gpu.share)
    (project,) = files.processes
    url = {engine.name: engine.url for engine in plan.engines}
    for name in ("prefill-0", "decode-0"):
        service = project.service(name)
        assert service.starts_alone_on == (0,), name
        assert service.started_when == f"{url[name]}/health"
    others = [s for s in project.services if s.name not in url]
    assert others  # its lmcache servers, the router, bench: no GPU of their own to share
    assert all(s.starts_alone_on == () and s.started_when is None for s in others)
    path = tmp_path / project.plan_file
    path.parent.mkdir(parents=True)
    path.write_text(project.text)
    assert load_process_project(path, tmp_path).service("decode-0").starts_alone_on == (0,)


def test_the_supervisor_is_told_the_gpu_and_the_page(tmp_path: Path) -> None:
    plan, files = rendered(MEASURING)
    (project,) = files.processes
    python = Path(sys.executable)
    commands = ServiceCommands(
        project, ROOT, Pythons(python, python), Isolation.PLAIN, tmp_path, pins_cores=False
    )
    service = project.service("decode-0")
    argv = commands.argv(service, service.command)
    options = argv[: argv.index("--")]
    at = options.index("--starts-alone-on")
    assert options[at : at + 4] == [
        "--starts-alone-on", "gpu-0", "--started-when", f"{_url(plan, 'decode-0')}/health",
    ]  # fmt: skip
    assert options[-1] == "decode-0"


def _url(plan: Plan, engine: str) -> str:
    return next(e.url for e in plan.engines if e.name == engine)


def test_engines_on_gpus_of_their_own_start_at_once() -> None:
    plan, files = rendered("xpyd-mp")  # one host, each engine on GPUs of its own
    assert gpus_started_alone(plan, plan.engines) == frozenset()
    (project,) = files.processes
    assert all(s.starts_alone_on == () for s in project.services)
    cpu_plan, _ = rendered("cpu-1p1d")  # cores, not GPUs
    assert gpus_started_alone(cpu_plan, cpu_plan.engines) == frozenset()


def test_engines_given_their_kv_cache_size_take_no_lock() -> None:
    """Given the size (--kv-cache-memory-bytes), vLLM measures no memory at start: a pair on
    one GPU restarts at once, side by side, instead of one vLLM start after the other."""
    sized = 'model.extra_args=["--kv-cache-memory-bytes", "20G", "--load-format", "dummy"]'
    plan, files = rendered("xpyd-1gpu", sized)
    assert gpus_started_alone(plan, plan.engines) == frozenset()
    (project,) = files.processes
    assert all(s.starts_alone_on == () for s in project.services)
    # Each still watches its peers only once it serves: restarted side by side after a kill
    # (an H100), the one that was not killed ended with it and took the new one with it.
    url = {engine.name: engine.url for engine in plan.engines}
    for name in ("prefill-0", "decode-0"):
        assert project.service(name).started_when == f"{url[name]}/health"
    one = 'prefill.extra_args=["--kv-cache-memory-bytes", "20G"]'  # the decoder measures
    plan, files = rendered("xpyd-1gpu", "model.extra_args=[]", one)
    assert gpus_started_alone(plan, plan.engines) == frozenset({0})
    (project,) = files.processes
    assert project.service("prefill-0").starts_alone_on == (0,)  # it waits for the decoder too


def test_a_flag_reads_as_vllm_reads_it() -> None:
    assert vllm_flag(["--kv-cache-memory-bytes", "1G"], "--kv-cache-memory-bytes") == "1G"
    assert vllm_flag(["--kv-cache-memory-bytes=2G", "--x"], "--kv-cache-memory-bytes") == "2G"
    args = ["--kv-cache-memory-bytes", "1G", "--kv-cache-memory-bytes=3G"]
    assert vllm_flag(args, "--kv-cache-memory-bytes") == "3G"  # the last one wins
    assert vllm_flag(["--kv-cache-memory-bytes"], "--kv-cache-memory-bytes") is None
    assert vllm_flag(["--kv-cache-memory-bytes-x", "1"], "--kv-cache-memory-bytes") is None


def test_compose_engines_share_one_folder_of_locks(workspace: Workspace) -> None:
    """Docker restarts each container on its own: the engines' supervisors share a volume of
    locks, named for every stack of the host (a GPU is the host's)."""
    document = yaml.safe_load((ROOT / "compose" / MEASURING / "compose.yaml").read_text())
    assert document["volumes"][START_LOCKS] == {"name": "xpyd-start-locks"}
    for name in ("prefill-0", "decode-0"):
        service = document["services"][name]
        folder = service["environment"][LOCK_DIR_ENV]
        assert f"{START_LOCKS}:{folder}" in service["volumes"]
        command = service["command"]
        assert command[command.index("--starts-alone-on") + 1] == "gpu-0"
    assert LOCK_DIR_ENV not in document["services"]["router"].get("environment", {})
    spread = yaml.safe_load((ROOT / "compose" / "xpyd-mp" / "compose.yaml").read_text())
    assert START_LOCKS not in spread.get("volumes", {})  # each engine on GPUs of its own


def test_the_process_runtime_keeps_the_locks_with_every_stacks_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", "not-a-token")  # the engines' secret, read at start
    _, files = rendered(MEASURING)
    (project,) = files.processes
    python = Path(sys.executable)
    state = tmp_path / ".cache" / "process" / project.name
    commands = ServiceCommands(
        project, ROOT, Pythons(python, python), Isolation.PLAIN, state, pins_cores=False
    )
    env = commands.environment(project.service("prefill-0"))
    assert env[LOCK_DIR_ENV] == str(tmp_path / ".cache" / "process")
    assert LOCK_DIR_ENV not in commands.environment(project.service("router"))


def test_a_stack_that_restarts_nothing_takes_no_lock() -> None:
    """Without a supervisor nothing would take it: `up` starts the engines in turn."""
    plan = make_plan(
        load_spec(Workspace(ROOT).stack_file("xpyd-1gpu"), ["recovery.max_restarts=0"])
    )
    files = render_stack(plan, Workspace(ROOT))
    (compose,) = files.projects
    assert START_LOCKS not in yaml.safe_load(compose.text).get("volumes", {})
    assert "--starts-alone-on" not in compose.text
    processes = make_plan(
        load_spec(
            Workspace(ROOT).stack_file("xpyd-1gpu"),
            ["recovery.max_restarts=0", "runtime=process"],
        )
    )
    (project,) = render_stack(processes, Workspace(ROOT)).processes
    assert all(s.starts_alone_on == () for s in project.services)
