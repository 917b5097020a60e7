"""The engine settings a bench report names beside each arm, read from the plan it ran: eager
or compiled, block size, GPU share or KV cache size, and how the KV moves."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from generator.bench.engine_settings import engine_settings
from generator.bench.report import markdown
from generator.errors import SpecError
from generator.paths import Workspace
from generator.planner import make_plan
from generator.services.commands import engine_command
from generator.spec import Spec
from generator.stack import baseline_spec, load_spec
from tests.bench.test_report import report
from tests.conftest import ROOT


def _spec(stack: str) -> Spec:
    return load_spec(Workspace(ROOT).stack_file(stack))


def _with_model_args(spec: Spec, *args: str) -> Spec:
    model = spec.model.model_copy(update={"extra_args": [*spec.model.extra_args, *args]})
    return spec.model_copy(update={"model": model})


def test_a_gpu_stack_runs_cuda_graphs_unless_asked_for_eager() -> None:
    spec = _spec("xpyd-1gpu")
    settings = engine_settings(make_plan(spec))
    assert settings["execution"] == "CUDA graphs"
    assert settings["GPU memory share"] == "0.4"
    assert settings["block size"] == "128"  # nixl-mp's choice on GPUs
    assert settings["KV transfer"] == "push (the prefiller writes), KV in cuda memory"
    eager = engine_settings(make_plan(_with_model_args(spec, "--enforce-eager")))
    assert eager["execution"] == "eager (--enforce-eager)"


def _engine_args(spec: Spec) -> list[str]:
    plan = make_plan(spec)
    return engine_command(plan, plan.engines[0])


def test_the_block_size_is_the_specs_else_the_topologys_else_vllms() -> None:
    """nixl-mp on GPUs moves KV in 128-token blocks (fewer NIXL descriptors: 4x the KV rate on
    an H100); lmcache-pd moves LMCache's chunks, the cpu profile keeps vLLM's."""
    gpu = _spec("xpyd-1gpu")
    args = _engine_args(gpu)
    assert args[args.index("--block-size") + 1] == "128"
    model = gpu.model.model_copy(update={"block_size": 64})
    chosen = gpu.model_copy(update={"model": model})
    assert engine_settings(make_plan(chosen))["block size"] == "64"
    args = _engine_args(chosen)
    assert args[args.index("--block-size") + 1] == "64"
    for stack in ("xpyd-lmcache-1gpu", "cpu-1p1d", "cpu-lmcache-pd"):
        assert "--block-size" not in _engine_args(_spec(stack)), stack
        assert engine_settings(make_plan(_spec(stack)))["block size"] == "vLLM's default"


def test_a_block_size_in_extra_args_names_the_setting() -> None:
    with pytest.raises(SpecError, match=r"model\.block_size"):
        load_spec(
            Workspace(ROOT).stack_file("xpyd-1gpu"), ['model.extra_args=["--block-size", "32"]']
        )


def test_cpu_stacks_name_their_kv_cache_and_transfer_and_the_baseline_moves_none() -> None:
    spec = _spec("cpu-1p1d")
    plan = make_plan(spec)
    settings = engine_settings(plan)
    assert settings["execution"] == "eager (--enforce-eager)"
    assert settings["KV cache"] == "256M"
    assert "GPU memory share" not in settings
    assert settings["KV transfer"] == "pull (the decoder reads), KV in host memory"
    baseline = engine_settings(make_plan(baseline_spec(spec, plan)))
    assert baseline["KV transfer"] == "none (each engine serves whole requests)"


def test_the_report_names_them_beside_each_arm(tmp_path: Path) -> None:
    made = report(tmp_path)
    arms = [replace(arm, engine_settings={"execution": "CUDA graphs"}) for arm in made.arms]
    text = markdown(replace(made, arms=arms))
    assert text.count("; engines: execution CUDA graphs") == len(arms)


@pytest.mark.parametrize(
    ("overrides", "refused"),
    [
        (["lmcache.chunk_size=192"], True),  # 1.5 blocks of nixl-mp's 128 on GPUs
        (["lmcache.chunk_size=192", "model.block_size=64"], False),
        (["lmcache.chunk_size=384"], False),
        (["lmcache.chunk_size=100", "model.block_size=16"], True),
    ],
)
def test_an_lmcache_chunk_holds_whole_kv_blocks(overrides: list[str], refused: bool) -> None:
    """LMCache's MP connector refuses at start a chunk that is not whole blocks: said first."""
    spec_file = Workspace(ROOT).stack_file("xpyd-mp")
    if not refused:
        load_spec(spec_file, overrides)
        return
    with pytest.raises(SpecError, match=r"lmcache\.chunk_size.*not a whole number of KV"):
        load_spec(spec_file, overrides)


def _cudagraph_args(spec: Spec) -> list[list[str]]:
    plan = make_plan(spec)
    return [
        [arg for arg in engine_command(plan, engine) if "cudagraph_mode" in arg]
        for engine in plan.engines
    ]


def test_lmcache_pd_on_gpus_runs_piecewise_cuda_graphs_unless_the_args_choose() -> None:
    """Under vLLM's default full CUDA graphs LMCache's receiver skipped its loads (an H100 and
    an H200); piecewise graphs loaded every request's KV on the H200. Both engines get it, as
    measured; nixl-mp and the cpu profile keep vLLM's default; an engine whose arguments set
    eager mode, a CUDA graph mode, the compile mode or a whole compilation config keeps
    theirs, and another compilation field (a capture size) does not count as a choice."""
    lmcache_gpu = _spec("xpyd-lmcache-1gpu")
    assert _cudagraph_args(lmcache_gpu) == [["-cc.cudagraph_mode=PIECEWISE"]] * 2
    assert engine_settings(make_plan(lmcache_gpu))["execution"] == (
        "CUDA graphs (piecewise: attention eager)"
    )
    for stack in ("xpyd-1gpu", "cpu-lmcache-pd", "cpu-1p1d"):
        assert _cudagraph_args(_spec(stack)) == [[], []], stack
    for theirs in (
        ["--enforce-eager"],
        ["-cc.cudagraph_mode=FULL_AND_PIECEWISE"],
        ["--compilation-config.cudagraph_mode", "NONE"],
        ["-cc.mode=none"],
        ["--compilation-config", '{"cudagraph_mode": "FULL"}'],
        ["-O0"],
    ):
        chosen = _with_model_args(lmcache_gpu, *theirs)
        ours = [a for args in _cudagraph_args(chosen) for a in args if a.endswith("=PIECEWISE")]
        assert ours == [], theirs
    capture = _with_model_args(lmcache_gpu, "-cc.max_cudagraph_capture_size=64")
    assert _cudagraph_args(capture)[0] == ["-cc.cudagraph_mode=PIECEWISE"]


@pytest.mark.parametrize(
    ("theirs", "execution"),
    [
        (["-cc.cudagraph_mode=PIECEWISE"], "CUDA graphs (piecewise: attention eager)"),
        (["--compilation-config.cudagraph_mode", "full_and_piecewise"], "vLLM's default"),
        (["-cc.cudagraph_mode=FULL"], "CUDA graphs (FULL)"),
        (["-cc.cudagraph_mode=NONE"], "no CUDA graphs"),
    ],
)
def test_a_graph_mode_the_arguments_choose_is_named(theirs: list[str], execution: str) -> None:
    """Two arms that differ only in their CUDA graph mode must not read the same."""
    settings = engine_settings(make_plan(_with_model_args(_spec("xpyd-1gpu"), *theirs)))
    assert execution in settings["execution"]
