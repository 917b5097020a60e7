"""What a benchmark dataset is to the rest of the tool: the protocols each unit meets (one
module per dataset, registered in ``__init__.py``). Pure and light: options in, settings and
`vllm bench serve` arguments out; nothing here imports the spec, the plan or the CLI (the
command line imports this package to declare the datasets' options, and stays quick)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = [
    "MAX_PROMPTS",
    "MAX_TOKENS",
    "DatasetError",
    "DatasetOption",
    "DatasetSettings",
    "DatasetUnit",
]

# Bounds a run can finish within: a prompt of more tokens fits no model, and more prompts no
# run (the load's own bounds, in generator/cli/bench_options.py, share these two).
MAX_TOKENS = 10_000_000
MAX_PROMPTS = 10_000_000


@dataclass(frozen=True)
class DatasetOption:
    """A command-line option of a dataset's own: a whole number from 1 to ``maximum``,
    given to `bench` and `up --bench` as ``--<name with dashes>``."""

    name: str  # the parameter: prefix_len is --prefix-len
    help: str
    maximum: int
    sets_prompt_len: bool = False  # named when a prompt is longer than the model takes

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


class DatasetError(ValueError):
    """A dataset or dataset option that cannot work; ``option`` is the flag to blame."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"{option}: {message}")
        self.option = option
        self.message = message


@runtime_checkable  # lets the registry test check that each unit's settings have every member
class DatasetSettings(Protocol):
    """One dataset's settings as ``BenchSettings.dataset`` carries them: a frozen dataclass,
    so that settings compare and hash by value."""

    @property
    def name(self) -> str:
        """Its unit's name (``--dataset``'s value)."""
        ...

    @property
    def prompt_len(self) -> int:
        """Tokens in a prompt (the longest, where they differ): checked against the model's
        context before anything starts."""
        ...

    def vllm_args(self, output_len: int) -> list[str]:
        """`vllm bench serve`'s dataset arguments: ``--dataset-name`` and its own flags."""
        ...

    def report_fields(self) -> dict[str, int | str]:
        """Its own settings in bench.json, beside the dataset's name and the prompt length."""
        ...

    def describe(self) -> str:
        """The report's words for it, e.g. "random dataset: 256 input"."""
        ...


@runtime_checkable
class DatasetUnit(Protocol):
    @property
    def name(self) -> str:
        """``--dataset``'s value."""
        ...

    @property
    def summary(self) -> str:
        """What it is, in ``--dataset``'s help."""
        ...

    @property
    def options(self) -> tuple[DatasetOption, ...]:
        """The command-line options it reads (those of every other dataset are refused)."""
        ...

    @property
    def defaults(self) -> DatasetSettings: ...

    def settings(
        self, given: Mapping[str, int], *, base: DatasetSettings, num_prompts: int
    ) -> DatasetSettings:
        """Its settings: ``base`` (a preset's, where the preset uses this dataset; else
        ``defaults``) with the options ``given`` on the command line (parameter name to
        value, its own options only). DatasetError, naming the option, where they cannot
        work with ``num_prompts`` prompts."""
        ...
