"""The load and dataset options, defined once (generator/cli/load_options.py): `bench` and
`up --bench` take the same flags with the same help, every dataset's options among them, and
they turn into the settings of `vllm bench serve` the same way."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.main import get_command

from generator.cli import app
from generator.cli.load_options import LOAD_OPTIONS, LoadOptions, bench_settings
from generator.datasets import dataset_option_names
from generator.datasets.prefix_repetition import PrefixRepetition
from generator.datasets.random_tokens import RandomTokens
from generator.services.bench import Preset, preset_settings

SMOKE, SEED = preset_settings(Preset.SMOKE), preset_settings(Preset.SEED_XPYD)


def command(name: str) -> Any:
    return get_command(app).commands[name]  # type: ignore[attr-defined]


def help_records(name: str) -> dict[str, tuple[str, str]]:
    cli = command(name)
    context = cli.make_context(name, ["s"], resilient_parsing=True)
    return {p.name: p.get_help_record(context) for p in cli.params if p.name in LOAD_OPTIONS}


def load_of(*args: str) -> LoadOptions:
    """What `bench s ARGS` reads as its load options."""
    return LoadOptions.of(command("bench").make_context("bench", ["s", *args]))


def test_bench_and_up_take_every_load_and_dataset_option_alike() -> None:
    assert set(dataset_option_names()) <= set(LOAD_OPTIONS)
    bench, up = help_records("bench"), help_records("up")
    assert set(bench) == set(up) == set(LOAD_OPTIONS)
    assert bench == up  # same flags, bounds and help


def test_options_given_are_read_the_others_are_the_presets() -> None:
    assert load_of() == LoadOptions()
    assert bench_settings(load_of(), Preset.SMOKE) == SMOKE
    assert bench_settings(load_of(), Preset.SEED_XPYD) == SEED
    load = load_of("--request-rate", "2,inf", "--max-concurrency", "4", "--input-len", "64")
    assert load == LoadOptions(
        request_rates=(2.0, None), max_concurrencies=(4,), dataset_options={"input_len": 64}
    )
    settings = bench_settings(load, Preset.SEED_XPYD)
    assert (settings.request_rate, settings.max_concurrency) == (2.0, 4)  # the first point
    assert (settings.dataset, settings.output_len) == (RandomTokens(64), 200)
    assert load.sweep(settings) == ((2.0, None), (4,))
    assert LoadOptions().sweep(SEED) == ((1.0,), (None,))


def test_a_dataset_chosen_replaces_the_presets_prompts() -> None:
    load = load_of("--dataset", "prefix-repetition", "--num-prompts", "4", "--suffix-len", "8")
    settings = bench_settings(load, Preset.SEED_XPYD)
    assert settings.dataset == PrefixRepetition(suffix_len=8, num_prefixes=4)
    assert settings.num_prompts == 4


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--request-rate", "1,2"], "--request-rate"),
        (["--max-concurrency", "1,2"], "--max-concurrency"),
    ],
)
def test_one_point_refuses_a_sweep(args: list[str], flag: str) -> None:
    assert load_of("--request-rate", "3").one_point().request_rates == (3.0,)
    with pytest.raises(typer.BadParameter, match="runs one load point") as caught:
        load_of(*args).one_point()
    assert caught.value.param_hint == flag
