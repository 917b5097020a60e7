"""Benchmark datasets as units: one module each behind ``DatasetUnit`` (base.py), looked up by
name here. A dataset owns its settings, the command-line options it reads and their checks,
its `vllm bench serve` arguments, its prompt length and its fields in the report; `bench`,
`up --bench`, the rendered `bench` service and the report ask it through the protocol.

Adding one (say vLLM's ``sharegpt``, prompts read from a JSON file) is a module beside these
and its entry in ``DATASETS`` below: a frozen settings dataclass (the file's path as the
container sees it, an output length cap) whose ``vllm_args`` are ``--dataset-name sharegpt
--dataset-path PATH`` and whose ``prompt_len`` is the longest prompt it lets through
(``--sharegpt-max-len``-style, so that ``check_fits`` can still refuse a prompt the model
cannot take), and a unit whose ``settings`` checks that the file exists. Its options must
also be declared where typer reads options, from signatures (generator/cli/load_options.py:
one alias beside ``--prefix-len``'s, and the parameter in `bench` and `up`); a file's path
is a text option, so ``DatasetOption`` would gain a kind. The file must be mounted into the
`bench` one-off container, which the runtimes do for ``/results`` today.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from generator.datasets import prefix_repetition, random_tokens
from generator.datasets.base import (
    MAX_PROMPTS,
    MAX_TOKENS,
    DatasetError,
    DatasetOption,
    DatasetSettings,
    DatasetUnit,
)

__all__ = [
    "DATASETS",
    "DEFAULT_DATASET",
    "MAX_PROMPTS",
    "MAX_TOKENS",
    "DatasetError",
    "DatasetOption",
    "DatasetSettings",
    "DatasetUnit",
    "dataset_option",
    "dataset_option_names",
    "dataset_settings",
    "dataset_unit",
    "default_dataset",
    "prompt_len_flags",
]

DATASETS: Mapping[str, DatasetUnit] = MappingProxyType(
    {unit.name: unit for unit in (random_tokens.UNIT, prefix_repetition.UNIT)}
)
DEFAULT_DATASET = random_tokens.NAME  # no prefix shared: nothing a cache could help with


def dataset_unit(name: str) -> DatasetUnit:
    if name not in DATASETS:
        choices = ", ".join(DATASETS)
        raise DatasetError("--dataset", f"{name!r} is not one of {choices}")
    return DATASETS[name]


def default_dataset() -> DatasetSettings:
    return DATASETS[DEFAULT_DATASET].defaults


def dataset_option_names() -> tuple[str, ...]:
    """Every dataset's options (parameter names), each once, in registry order."""
    names = (option.name for unit in DATASETS.values() for option in unit.options)
    return tuple(dict.fromkeys(names))


def dataset_option(name: str) -> DatasetOption:
    """The option ``name`` as its first dataset declares it (two datasets reading the same
    option share one flag)."""
    return next(o for unit in DATASETS.values() for o in unit.options if o.name == name)


def dataset_settings(
    name: str | None,
    given: Mapping[str, int],
    *,
    num_prompts: int,
    preset: DatasetSettings | None = None,
) -> DatasetSettings:
    """The dataset ``name`` (default: the preset's, else the default one) with the options
    ``given``; DatasetError for an unknown name, an option of another dataset, or a value
    the dataset refuses."""
    unit = dataset_unit(name or (preset.name if preset is not None else DEFAULT_DATASET))
    for option in given:
        if option not in _names(unit):
            raise DatasetError(dataset_option(option).flag, _foreign(option, unit))
    base = preset if preset is not None and preset.name == unit.name else unit.defaults
    return unit.settings(given, base=base, num_prompts=num_prompts)


def prompt_len_flags(settings: DatasetSettings) -> tuple[str, ...]:
    """The flags that set a prompt's length in this dataset (what to lower when one is too
    long)."""
    options = dataset_unit(settings.name).options
    return tuple(option.flag for option in options if option.sets_prompt_len)


def _foreign(option: str, chosen: DatasetUnit) -> str:
    owners = [unit.name for unit in DATASETS.values() if option in _names(unit)]
    lengths = " + ".join(o.flag for o in chosen.options if o.sets_prompt_len)
    why = f" ({chosen.name} prompts are {lengths} tokens)" if lengths else ""
    return f"needs --dataset {' or '.join(owners)}{why}"


def _names(unit: DatasetUnit) -> set[str]:
    return {option.name for option in unit.options}
