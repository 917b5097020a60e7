"""The engine settings a bench report names beside each arm, read from the plan it ran: eager
or compiled, block size, GPU share or KV cache size, and how the KV moves."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from generator.bench.engine_settings import engine_settings
from generator.bench.report import markdown
from generator.paths import Workspace
from generator.planner import make_plan
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
    assert settings["block size"] == "vLLM's default"
    assert settings["KV transfer"] == "push (the prefiller writes), KV in cuda memory"
    eager = engine_settings(make_plan(_with_model_args(spec, "--enforce-eager")))
    assert eager["execution"] == "eager (--enforce-eager)"


def test_the_last_block_size_flag_wins_in_either_spelling() -> None:
    spec = _with_model_args(_spec("xpyd-1gpu"), "--block-size", "32", "--block-size=64")
    assert engine_settings(make_plan(spec))["block size"] == "64"


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
