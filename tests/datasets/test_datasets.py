"""Benchmark datasets as units: each meets the protocol, owns its flags for vLLM and its
report fields, refuses what cannot work; and a dataset registered here alone (nothing else
touched) reaches `vllm bench serve`'s command line, the fit check and the report."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import pytest
import typer

import generator.datasets
from generator.bench import check_fits
from generator.bench.report import BenchReport, markdown, write_report
from generator.cli.load_options import LoadOptions, bench_settings
from generator.datasets import (
    DATASETS,
    DatasetError,
    DatasetOption,
    DatasetSettings,
    DatasetUnit,
    dataset_settings,
)
from generator.datasets.prefix_repetition import PrefixRepetition
from generator.datasets.random_tokens import RandomTokens
from generator.paths import Workspace
from generator.plan import Plan
from generator.planner import make_plan
from generator.services.bench import BenchSettings, Preset, bench_command, preset_settings
from generator.stack import load_spec
from tests.conftest import ROOT

SMOKE = preset_settings(Preset.SMOKE)


def plan_of(stack: str) -> Plan:
    return make_plan(load_spec(Workspace(ROOT).stack_file(stack)))


def prefix_repetition(**given: int) -> BenchSettings:
    """The smoke preset with --dataset prefix-repetition and these options, as read by the CLI."""
    load = LoadOptions(dataset="prefix-repetition", dataset_options=given)
    return bench_settings(load, Preset.SMOKE)


def vllm_dataset_args(command: list[str]) -> list[str]:
    return command[command.index("--dataset-name") : command.index("--num-prompts")]


@pytest.mark.parametrize("name", list(DATASETS))
def test_each_dataset_meets_the_protocol_and_names_itself(name: str) -> None:
    unit = DATASETS[name]
    assert isinstance(unit, DatasetUnit)
    assert isinstance(unit.defaults, DatasetSettings)
    assert unit.defaults.name == unit.name == name
    assert unit.settings({}, base=unit.defaults, num_prompts=1000) == unit.defaults
    hash(unit.defaults)  # frozen: BenchSettings compare and hash by value


def test_the_presets_prompts_are_random_tokens_of_their_length() -> None:
    assert SMOKE.dataset == RandomTokens(256)
    assert preset_settings(Preset.SEED_XPYD).dataset == RandomTokens(7500)
    assert vllm_dataset_args(bench_command(plan_of("cpu-1p1d"), SMOKE)) == [
        "--dataset-name", "random", "--random-input-len", "256", "--random-output-len", "16",
    ]  # fmt: skip


def test_prefix_repetition_reaches_vllm_with_its_own_flags() -> None:
    settings = prefix_repetition(prefix_len=512, suffix_len=32, num_prefixes=2)
    assert settings.dataset == PrefixRepetition(512, 32, 2)
    assert (settings.prompt_len, settings.output_len) == (544, 16)
    assert vllm_dataset_args(bench_command(plan_of("cpu-1p1d"), settings)) == [
        "--dataset-name", "prefix_repetition",
        "--prefix-repetition-prefix-len", "512", "--prefix-repetition-suffix-len", "32",
        "--prefix-repetition-num-prefixes", "2", "--prefix-repetition-output-len", "16",
    ]  # fmt: skip


def test_prefix_repetition_keeps_to_the_prompts_it_has() -> None:
    # vLLM's 10 prefixes need 10 prompts: the smoke preset's 8 get 8 unless told otherwise
    assert dataset_settings("prefix-repetition", {}, num_prompts=8) == PrefixRepetition(
        num_prefixes=8
    )
    with pytest.raises(DatasetError, match="9 prefixes need at least as many prompts") as caught:
        dataset_settings("prefix-repetition", {"num_prefixes": 9}, num_prompts=8)
    assert caught.value.option == "--num-prefixes"


@pytest.mark.parametrize(
    ("dataset", "given", "option", "message"),
    [
        (None, {"prefix_len": 5}, "--prefix-len", "needs --dataset prefix-repetition (random "
         "prompts are --input-len tokens)"),
        ("prefix-repetition", {"input_len": 5}, "--input-len", "needs --dataset random "
         "(prefix-repetition prompts are --prefix-len + --suffix-len tokens)"),
        ("sharegpt", {}, "--dataset", "'sharegpt' is not one of random, prefix-repetition"),
    ],
)  # fmt: skip
def test_options_of_another_dataset_are_refused_naming_the_option(
    dataset: str | None, given: dict[str, int], option: str, message: str
) -> None:
    load = LoadOptions(dataset=dataset, dataset_options=given)
    with pytest.raises(typer.BadParameter) as caught:
        bench_settings(load, Preset.SMOKE)
    assert (caught.value.param_hint, caught.value.message) == (option, message)


def test_a_report_carries_the_datasets_own_fields(tmp_path: Path) -> None:
    settings = prefix_repetition(prefix_len=64, suffix_len=8, num_prefixes=4)
    report = BenchReport("s", "smoke", settings, "test", tmp_path)
    assert report.as_dict()["settings"] == {
        "dataset": "prefix-repetition",
        "input_len": 72,
        "prefix_repetition_prefix_len": 64,
        "prefix_repetition_suffix_len": 8,
        "prefix_repetition_num_prefixes": 4,
        "output_len": 16,
        "num_prompts": 8,
        "burstiness": 1.0,
        "seed": 0,
        "goodput_slo_ms": {},
    }
    assert "prefix_repetition dataset: 4 shared prefixes of 64 tokens, each prompt + 8" in (
        markdown(report)
    )


# --- a dataset registered in this test alone ----------------------------------------------------


@dataclass(frozen=True)
class TinyFile:
    """What a ShareGPT-style dataset would be: prompts read from a file in the container."""

    path: str = "/data/tiny.jsonl"
    longest_prompt: int = 300

    @property
    def name(self) -> str:
        return "tiny-file"

    @property
    def prompt_len(self) -> int:
        return self.longest_prompt

    def vllm_args(self, output_len: int) -> list[str]:
        return ["--dataset-name", "custom", "--dataset-path", self.path,
                "--custom-output-len", str(output_len)]  # fmt: skip

    def report_fields(self) -> dict[str, int | str]:
        return {"tiny_file_path": self.path}

    def describe(self) -> str:
        return f"tiny-file dataset: prompts from {self.path} (at most {self.longest_prompt} tokens)"


class TinyFileUnit:
    name = "tiny-file"
    summary = "prompts from a file"
    options: tuple[DatasetOption, ...] = ()
    defaults: DatasetSettings = TinyFile()

    def settings(
        self, given: Mapping[str, int], *, base: DatasetSettings, num_prompts: int
    ) -> DatasetSettings:
        return base


@pytest.fixture
def tiny_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = MappingProxyType({**DATASETS, "tiny-file": TinyFileUnit()})
    monkeypatch.setattr(generator.datasets, "DATASETS", registry)


@pytest.mark.usefixtures("tiny_registered")
def test_a_dataset_registered_alone_reaches_vllm_the_fit_check_and_the_report(
    tmp_path: Path,
) -> None:
    assert isinstance(TinyFileUnit(), DatasetUnit)
    settings = bench_settings(LoadOptions(dataset="tiny-file", output_len=20), Preset.SMOKE)
    plan = plan_of("cpu-1p1d")
    assert vllm_dataset_args(bench_command(plan, settings)) == [
        "--dataset-name", "custom", "--dataset-path", "/data/tiny.jsonl",
        "--custom-output-len", "20",
    ]  # fmt: skip
    check_fits(plan, settings)  # 300 + 20 tokens: fits cpu-1p1d's 2048
    report = BenchReport("s", "smoke", settings, "test", tmp_path)
    write_report(report)
    written = json.loads((tmp_path / "bench.json").read_text())["settings"]
    assert (written["dataset"], written["input_len"]) == ("tiny-file", 300)
    assert written["tiny_file_path"] == "/data/tiny.jsonl"
    assert "tiny-file dataset: prompts from /data/tiny.jsonl" in markdown(report)


@pytest.mark.usefixtures("tiny_registered")
def test_a_registered_dataset_refuses_the_others_options_and_is_listed() -> None:
    load = LoadOptions(dataset="tiny-file", dataset_options={"input_len": 100})
    with pytest.raises(typer.BadParameter, match=r"needs --dataset random$"):
        bench_settings(load, Preset.SMOKE)
    with pytest.raises(typer.BadParameter, match="random, prefix-repetition, tiny-file"):
        bench_settings(LoadOptions(dataset="nope"), Preset.SMOKE)
