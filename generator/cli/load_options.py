"""The benchmark's load and dataset options, defined once for `bench` and `up --bench`: the
same flags, bounds and help in both, one dataclass that holds them as given, and one function
that turns them and a preset into the settings of `vllm bench serve`.

A dataset's own options are declared by its unit (generator/datasets/); typer reads a
command's options from its signature, so each one also has an alias here and a parameter in
`bench` and `up` (tests/cli/test_load_options.py checks that none is missing)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Annotated, Any

import typer

from generator.cli.bench_options import (
    MAX_PROMPTS,
    MAX_TOKENS,
    check_sweep,
    parse_concurrencies,
    parse_rates,
)
from generator.cli.stack_options import not_nan
from generator.datasets import DATASETS, dataset_option, dataset_option_names

if TYPE_CHECKING:
    from generator.services.bench import BenchSettings, Preset

__all__ = [
    "DATASET_PANEL",
    "LOAD_OPTIONS",
    "LOAD_PANEL",
    "BurstinessOpt",
    "DatasetOpt",
    "InputLenOpt",
    "LoadOptions",
    "MaxConcurrencyOpt",
    "NumPrefixesOpt",
    "NumPromptsOpt",
    "OutputLenOpt",
    "PrefixLenOpt",
    "RequestRateOpt",
    "SuffixLenOpt",
    "bench_settings",
    "parse_preset",
]

LOAD_PANEL = "Load (default: the preset's)"
DATASET_PANEL = "Dataset (default: the preset's: random)"


def _dataset_option(name: str) -> Any:  # typer's OptionInfo, from the dataset's declaration
    option = dataset_option(name)
    return typer.Option(
        min=1,
        max=option.maximum,
        help=option.help,
        rich_help_panel=DATASET_PANEL,
        show_default=False,
    )


def _datasets_help() -> str:
    listed = " or ".join(f"{unit.name} ({unit.summary})" for unit in DATASETS.values())
    return f"The prompts: {listed}."


OutputLenOpt = Annotated[
    int | None,
    typer.Option(
        min=1,
        max=MAX_TOKENS,
        help="Tokens each request generates (EOS ignored).",
        rich_help_panel=LOAD_PANEL,
        show_default=False,
    ),
]
NumPromptsOpt = Annotated[
    int | None,
    typer.Option(
        min=1,
        max=MAX_PROMPTS,
        help="Requests per load point.",
        rich_help_panel=LOAD_PANEL,
        show_default=False,
    ),
]
RequestRateOpt = Annotated[
    str | None,
    typer.Option(
        help="Requests/s, or a sweep: 1,2,4 (inf: all at once; `up --bench`: one rate).",
        rich_help_panel=LOAD_PANEL,
        show_default=False,
    ),
]
MaxConcurrencyOpt = Annotated[
    str | None,
    typer.Option(
        help="Requests in flight at most, or a sweep: 1,4,16 (`up --bench`: one value).",
        rich_help_panel=LOAD_PANEL,
        show_default=False,
    ),
]
BurstinessOpt = Annotated[
    float | None,
    typer.Option(
        min=0.001,
        max=1e6,
        callback=not_nan,
        help="Burstiness of arrivals (1: Poisson; larger: more regular).",
        rich_help_panel=LOAD_PANEL,
        show_default=False,
    ),
]
DatasetOpt = Annotated[
    str | None,
    typer.Option(help=_datasets_help(), rich_help_panel=DATASET_PANEL, show_default=False),
]
# One per dataset option (generator/datasets/): the parameter's name is the option's.
InputLenOpt = Annotated[int | None, _dataset_option("input_len")]
PrefixLenOpt = Annotated[int | None, _dataset_option("prefix_len")]
SuffixLenOpt = Annotated[int | None, _dataset_option("suffix_len")]
NumPrefixesOpt = Annotated[int | None, _dataset_option("num_prefixes")]

# The parameters above, by name: refused together where no benchmark runs.
LOAD_OPTIONS = (
    "output_len", "num_prompts", "request_rate", "max_concurrency", "burstiness", "dataset",
    *dataset_option_names(),
)  # fmt: skip


@dataclass(frozen=True)
class LoadOptions:
    """The load and dataset options as given on the command line (None, or empty: the
    preset's), the sweeps already parsed and bounded."""

    output_len: int | None = None
    num_prompts: int | None = None
    burstiness: float | None = None
    request_rates: tuple[float | None, ...] = ()  # None in it: all at once
    max_concurrencies: tuple[int | None, ...] = ()
    dataset: str | None = None
    dataset_options: Mapping[str, int] = field(default_factory=dict)  # only those given

    @classmethod
    def of(cls, ctx: typer.Context) -> LoadOptions:
        """From a command whose parameters carry these options' names (LOAD_OPTIONS)."""
        params = ctx.params
        rates = parse_rates(params["request_rate"]) if params["request_rate"] else ()
        concurrency = params["max_concurrency"]
        concurrencies = parse_concurrencies(concurrency) if concurrency else ()
        check_sweep(rates, concurrencies)
        given = {name: params[name] for name in dataset_option_names() if params[name] is not None}
        return cls(
            output_len=params["output_len"],
            num_prompts=params["num_prompts"],
            burstiness=params["burstiness"],
            request_rates=rates,
            max_concurrencies=concurrencies,
            dataset=params["dataset"],
            dataset_options=given,
        )

    def sweep(
        self, settings: BenchSettings
    ) -> tuple[tuple[float | None, ...], tuple[int | None, ...]]:
        """The rates and concurrencies to run (every rate at every concurrency), each the
        settings' own where none was given."""
        rates = self.request_rates or (settings.request_rate,)
        return rates, self.max_concurrencies or (settings.max_concurrency,)

    def one_point(self) -> LoadOptions:
        """These options, where they make one load point (`up --bench`); else BadParameter."""
        for flag, values in (
            ("--request-rate", self.request_rates),
            ("--max-concurrency", self.max_concurrencies),
        ):
            if len(values) > 1:
                raise typer.BadParameter(
                    f"`up --bench` runs one load point, and {len(values)} values are a sweep: "
                    "give one, or run the sweep with `bench`",
                    param_hint=flag,
                )
        return self


def bench_settings(load: LoadOptions, preset: Preset) -> BenchSettings:
    """The preset's settings with the options given, at the sweep's first load point (each
    point sets its own rate and concurrency); BadParameter for a dataset, or a dataset
    option, that cannot work."""
    from generator.datasets import DatasetError, dataset_settings
    from generator.services.bench import preset_settings

    given = preset_settings(preset)
    num_prompts = load.num_prompts or given.num_prompts
    try:
        dataset = dataset_settings(
            load.dataset, load.dataset_options, num_prompts=num_prompts, preset=given.dataset
        )
    except DatasetError as error:
        raise typer.BadParameter(error.message, param_hint=error.option) from None
    rates, concurrencies = load.sweep(given)
    return replace(
        given,
        output_len=load.output_len or given.output_len,
        num_prompts=num_prompts,
        burstiness=load.burstiness or given.burstiness,
        request_rate=rates[0],
        max_concurrency=concurrencies[0],
        dataset=dataset,
    )


def parse_preset(name: str) -> Preset:
    from generator.services.bench import Preset

    try:
        return Preset(name)
    except ValueError:
        choices = ", ".join(p.value for p in Preset)
        raise typer.BadParameter(f"{name!r} is not a preset ({choices})") from None
