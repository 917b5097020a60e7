"""Who maps whose GPU memory over CUDA IPC, and the supervisor watches that follow: a process
that maps a peer's GPU memory keeps it taken after the peer dies (a killed decoder on one H200
found 41.87 of 139.8 GiB free at each restart and gave up; on one H100 the engines' own
`lmcache server`s held 15.02 GiB each), so the mapper ends once the peer is gone. What the
watch itself does is in tests/test_supervise.py."""

from __future__ import annotations

from typing import Any

import yaml

from generator.paths import Workspace
from generator.plan import Plan
from generator.planner import make_plan
from generator.serializers.process_file import load_process_project
from generator.stack import load_spec
from generator.topologies import topology_of


def plan_of(workspace: Workspace, stack: str, *overrides: str) -> Plan:
    return make_plan(load_spec(workspace.stack_file(stack), list(overrides)))


def maps(workspace: Workspace, stack: str, *overrides: str) -> dict[str, tuple[str, ...]]:
    plan = plan_of(workspace, stack, *overrides)
    return topology_of(plan).maps_memory_of(plan)


def test_a_nixl_pusher_maps_its_decoders_and_each_server_its_engine(workspace: Workspace) -> None:
    """The servers too: on one H100 a dead engine's KV stayed taken by its `lmcache server`
    until LMCache's reaper dropped it (an hour for a decoder, which never pings)."""
    assert maps(workspace, "xpyd-1gpu") == {
        "prefill-0": ("decode-0",),
        "lmcache-prefill-0": ("prefill-0",),
        "lmcache-decode-0": ("decode-0",),
    }


def test_under_pull_the_decoder_maps_the_prefillers(workspace: Workspace) -> None:
    mapped = maps(workspace, "xpyd-mp")  # pull, each engine on GPUs of its own, one host
    assert mapped["decode-0"] == ("prefill-0",)
    assert "prefill-0" not in mapped
    assert mapped["lmcache-prefill-0"] == ("prefill-0",)


def test_an_lmcache_pd_sender_maps_the_decoders_on_its_host(workspace: Workspace) -> None:
    assert maps(workspace, "xpyd") == {
        "prefill-0": ("decode-0", "decode-1"),
        "prefill-1": ("decode-0", "decode-1"),
    }
    # A transfer buffer in host memory is no GPU memory.
    assert maps(workspace, "xpyd", "lmcache.pd.buffer_device=cpu") == {}


def test_across_hosts_and_off_gpus_nothing_is_mapped(workspace: Workspace) -> None:
    """CUDA IPC reaches one host's GPUs: across them only each server maps its own engine."""
    plan = plan_of(workspace, "xpyd-mp-2host")  # nixl-mp, prefill and decode on two hosts
    servers = {f"lmcache-{engine.name}": (engine.name,) for engine in plan.engines}
    assert maps(workspace, "xpyd-mp-2host") == servers
    assert maps(workspace, "xpyd-tp8") == {}  # lmcache-pd, prefill and decode on two nodes
    for stack in ("cpu-1p1d", "cpu-lmcache-pd", "cpu-p2p"):
        assert maps(workspace, stack) == {}, stack


def _commands(workspace: Workspace, stack: str) -> dict[str, list[str]]:
    document: dict[str, Any] = yaml.safe_load(
        (workspace.root / "compose" / stack / "compose.yaml").read_text()
    )
    return {name: s.get("command", []) for name, s in document["services"].items()}


def _option(command: list[str], name: str) -> list[str]:
    return [command[i + 1] for i, part in enumerate(command) if part == name]


def test_the_rendered_mappers_end_with_their_peers(workspace: Workspace) -> None:
    """Both runtimes pass the watch to the supervisor: compose in the command, the process
    plan as ``ends_with``. The push decoder ends with its prefiller too (its agent)."""
    plan = plan_of(workspace, "xpyd-1gpu")
    url = {engine.name: f"{engine.url}/metrics" for engine in plan.engines}
    commands = _commands(workspace, "xpyd-1gpu")
    assert _option(commands["prefill-0"], "--ends-with") == [url["decode-0"]]
    assert _option(commands["lmcache-prefill-0"], "--ends-with") == [url["prefill-0"]]
    assert _option(commands["lmcache-decode-0"], "--ends-with") == [url["decode-0"]]
    assert _option(commands["decode-0"], "--ends-with") == [url["prefill-0"]]
    assert _option(commands["router"], "--ends-with") == []
    for command in commands.values():
        assert _option(command, "--restarts-with") == []
    project = load_process_project(
        workspace.root / "compose" / "xpyd-1gpu" / "processes.yaml", workspace.root
    )
    assert project.service("prefill-0").ends_with == (url["decode-0"],)
    assert project.service("decode-0").ends_with == (url["prefill-0"],)
    assert project.service("lmcache-decode-0").ends_with == (url["decode-0"],)


def test_an_lmcache_pd_sender_on_a_gpu_watches_its_decoders_once(workspace: Workspace) -> None:
    """Its decoders are stale after a restart and mapped: one watch each, the one that also
    ends it when they are gone."""
    commands = _commands(workspace, "xpyd")
    for name in ("prefill-0", "prefill-1"):
        assert len(_option(commands[name], "--ends-with")) == 2
        assert _option(commands[name], "--restarts-with") == []


def test_a_push_decoder_ends_with_its_prefillers_wherever_they_run(workspace: Workspace) -> None:
    """vLLM 0.32.0's push path keeps a prefiller's NIXL agent and never replaces it; a pull
    decoder notices a new prefiller by its new engine id."""
    plan = plan_of(workspace, "xpyd-1gpu")
    assert topology_of(plan).ends_with_peers(plan) == {"decode-0": ("prefill-0",)}
    pulled = plan_of(workspace, "xpyd-mp")
    assert topology_of(pulled).ends_with_peers(pulled) == {}


def test_a_push_engine_keeps_its_nixl_engine_id_across_starts(workspace: Workspace) -> None:
    """vllm-router keeps a prefiller's push identity from its first answer: a restarted
    prefiller must keep the id (on one H100 a fresh id cycled the pair). Under pull vLLM
    draws one per process."""
    plan = plan_of(workspace, "xpyd-1gpu")
    topology = topology_of(plan)
    configs = {e.name: topology.connector_config(plan, e) or {} for e in plan.engines}
    ids = {name: config.get("engine_id") for name, config in configs.items()}
    assert ids == {"prefill-0": "xpyd-1gpu-prefill-0", "decode-0": "xpyd-1gpu-decode-0"}
    pulled = plan_of(workspace, "xpyd-mp")
    pulled_configs = [topology_of(pulled).connector_config(pulled, e) or {} for e in pulled.engines]
    assert pulled_configs
    assert all("engine_id" not in config for config in pulled_configs)
