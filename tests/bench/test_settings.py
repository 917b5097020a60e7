"""Bench settings: presets, load points, the options' parsing, the rendered bench service."""

from __future__ import annotations

from dataclasses import replace

import pytest
import typer
from hypothesis import given
from hypothesis import strategies as st

from generator.bench import check_fits, load_points
from generator.cli.bench_options import (
    check_sweep,
    parse_concurrencies,
    parse_goodput,
    parse_rates,
)
from generator.errors import XpydError
from generator.paths import Workspace
from generator.plan import Plan
from generator.planner import make_plan
from generator.render import render_stack
from generator.services.bench import Preset, bench_command, default_preset, preset_settings
from generator.stack import load_spec
from tests.conftest import ROOT
from tests.tools import run_cli


def _plan(stack: str) -> Plan:
    return make_plan(load_spec(Workspace(ROOT).stack_file(stack)))


def _flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_the_seed_preset_is_seed_as_published() -> None:
    seed = preset_settings(Preset.SEED_XPYD)
    command = bench_command(_plan("xpyd"), seed)
    assert _flag(command, "--random-input-len") == "7500"
    assert _flag(command, "--random-output-len") == "200"
    assert _flag(command, "--num-prompts") == "30"
    assert _flag(command, "--request-rate") == "1"
    assert _flag(command, "--burstiness") == "100"
    assert "--ignore-eos" in command


@pytest.mark.parametrize("stack", ["cpu-1p1d", "xpyd", "xpyd-mp"])
def test_the_rendered_bench_service_runs_the_profiles_default_preset(stack: str) -> None:
    plan = _plan(stack)
    services = {
        s.name: s for h in render_stack(plan, Workspace(ROOT)).deployment.hosts for s in h.services
    }
    expected = bench_command(plan, preset_settings(default_preset(plan.profile)))
    assert list(services["bench"].command) == expected
    assert _flag(expected, "--base-url").endswith(f":{plan.router.port}")


def test_goodput_detail_and_percentiles_reach_vllm() -> None:
    settings = replace(
        preset_settings(Preset.SMOKE), goodput_slo_ms=(("ttft", 500.0), ("tpot", 50.0))
    )
    command = bench_command(_plan("cpu-1p1d"), settings, "point-3.json")
    goodput = command.index("--goodput")
    assert command[goodput + 1 : goodput + 3] == ["ttft:500", "tpot:50"]
    assert "--save-detailed" in command
    assert _flag(command, "--percentile-metrics") == "ttft,tpot,itl,e2el"
    assert _flag(command, "--metric-percentiles") == "50,90,99"
    assert _flag(command, "--result-filename") == "point-3.json"


def test_a_sweep_is_every_rate_with_every_concurrency_in_order() -> None:
    points = load_points(preset_settings(Preset.SMOKE), (1.0, None), (2, 8))
    assert [p.label for p in points] == [
        "rate 1/s, concurrency 2",
        "rate 1/s, concurrency 8",
        "all at once, concurrency 2",
        "all at once, concurrency 8",
    ]
    assert [(p.settings.request_rate, p.settings.max_concurrency) for p in points] == [
        (1.0, 2),
        (1.0, 8),
        (None, 2),
        (None, 8),
    ]


def test_sweep_and_slo_options_parse_and_refuse_nonsense() -> None:
    assert parse_rates("0.5, 2,inf") == (0.5, 2.0, None)
    assert parse_concurrencies("1,4") == (1, 4)
    assert parse_goodput("ttft:500,tpot:50") == (("ttft", 500.0), ("tpot", 50.0))
    for parse, text, message in (
        (parse_rates, "1,,2", "comma-separated"),
        (parse_rates, "fast", "not a number"),
        (parse_rates, "0", "a rate is from 0.001 to 1e"),
        (parse_rates, "nan", "not a number"),
        (parse_rates, "1e-300", "a rate is from 0.001"),
        (parse_rates, "1e300", "a rate is from 0.001"),
        (parse_rates, "\u0661\u0662", "not a number"),
        (parse_concurrencies, "0", "from 1 to 1000000"),
        (parse_concurrencies, "2.5", "whole number"),
        (parse_concurrencies, "\u0661\u0662", "whole number"),
        (parse_concurrencies, "\u00b2", "whole number"),
        (parse_concurrencies, "9" * 5000, "whole number"),
        (parse_goodput, "ttft:\u0665", "METRIC:MILLISECONDS"),
        (parse_goodput, "ttft:1e400", "at most a day"),
        (parse_goodput, "itl:5", "not one of ttft, tpot, e2el"),
        (parse_goodput, "ttft", "METRIC:MILLISECONDS"),
        (parse_goodput, "ttft:-1", "METRIC:MILLISECONDS"),
        (parse_goodput, "ttft:0", "> 0"),
        (parse_goodput, "ttft:100,ttft:200", "ttft is given twice"),
        (parse_rates, ",".join(["1"] * 40_000), "lists 40000 values; a sweep has at most 64"),
        (parse_concurrencies, ",".join(["4"] * 65), "lists 65 values"),
    ):
        with pytest.raises(typer.BadParameter, match=message):
            parse(text)


def test_a_sweep_is_bounded_by_its_points_not_only_its_lists() -> None:
    check_sweep((1.0,) * 8, (1,) * 8)
    with pytest.raises(typer.BadParameter, match="8 rates x 9 concurrencies are 72 load points"):
        check_sweep((1.0,) * 8, (1,) * 9)


@given(st.text(max_size=40))
def test_any_text_is_a_sweep_or_a_bad_parameter(text: str) -> None:
    for parse in (parse_rates, parse_concurrencies, parse_goodput):
        try:
            values = parse(text)
        except typer.BadParameter:
            continue
        assert values  # parsed: one value per item at least


def test_a_prompt_longer_than_the_model_allows_is_refused_before_anything_starts() -> None:
    plan = _plan("cpu-1p1d")
    with pytest.raises(XpydError, match=r"more than cpu-1p1d.s model\.max_model_len 2048"):
        check_fits(plan, preset_settings(Preset.SEED_XPYD))
    check_fits(plan, preset_settings(Preset.SMOKE))


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--run-id", "../elsewhere"], 1, "is not a plain folder name"),
        (["--preset", "fastest"], 2, "is not a preset (seed-xpyd, smoke)"),
        (["--baseline", "disaggregated"], 2, "the one baseline is colocated"),
        (["--preset", "seed-xpyd"], 1, "more than cpu-1p1d's model.max_model_len 2048"),
        (["--request-rate", "1,,2"], 2, "comma-separated list"),
        (["--request-rate", "1e-300"], 2, "a rate is from 0.001"),
        (["--max-concurrency", "\u0661\u0662"], 2, "whole number from 1"),
        (["--max-concurrency", "9" * 5000], 2, "whole number from 1"),
        (["--seed", str(2**64)], 2, "4294967295"),
        (["--num-prompts", "9" * 5000], 2, "--num-prompts"),
    ],
)
def test_bad_bench_options_stop_before_anything_starts(
    args: list[str], code: int, message: str
) -> None:
    result = run_cli("bench", "cpu-1p1d", *args, root=ROOT, timeout_s=60)
    assert result.returncode == code, result.stderr
    assert message in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr
