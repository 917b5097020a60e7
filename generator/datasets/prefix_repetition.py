"""The prefix-repetition dataset (vLLM's ``prefix_repetition``): ``--num-prefixes`` random
prefixes of ``--prefix-len`` tokens, each prompt one of them followed by ``--suffix-len``
random tokens of its own; what prefix caches, prefix-aware routing and LMCache P2P are
measured with."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from generator.datasets.base import (
    MAX_PROMPTS,
    MAX_TOKENS,
    DatasetError,
    DatasetOption,
    DatasetSettings,
)

__all__ = ["NAME", "UNIT", "PrefixRepetition"]

NAME = "prefix-repetition"


@dataclass(frozen=True)
class PrefixRepetition:
    """vLLM 0.32's --prefix-repetition-* options (its defaults)."""

    prefix_len: int = 256
    suffix_len: int = 256
    num_prefixes: int = 10  # vLLM sends num_prompts // num_prefixes prompts per prefix

    @property
    def name(self) -> str:
        return NAME

    @property
    def prompt_len(self) -> int:
        return self.prefix_len + self.suffix_len

    def vllm_args(self, output_len: int) -> list[str]:
        return [
            *["--dataset-name", "prefix_repetition"],
            *["--prefix-repetition-prefix-len", str(self.prefix_len)],
            *["--prefix-repetition-suffix-len", str(self.suffix_len)],
            *["--prefix-repetition-num-prefixes", str(self.num_prefixes)],
            *["--prefix-repetition-output-len", str(output_len)],
        ]

    def report_fields(self) -> dict[str, int | str]:
        return {
            "prefix_repetition_prefix_len": self.prefix_len,
            "prefix_repetition_suffix_len": self.suffix_len,
            "prefix_repetition_num_prefixes": self.num_prefixes,
        }

    def describe(self) -> str:
        return (
            f"prefix_repetition dataset: {self.num_prefixes} shared prefixes of "
            f"{self.prefix_len} tokens, each prompt + {self.suffix_len} random tokens"
        )


class _Unit:
    name = NAME
    summary = (
        "vLLM's prefix_repetition: --num-prefixes prefixes, each prompt one of them + its "
        "own suffix"
    )
    options = (
        DatasetOption(
            "prefix_len", "prefix-repetition: tokens [256].", MAX_TOKENS, sets_prompt_len=True
        ),
        DatasetOption(
            "suffix_len",
            "prefix-repetition: tokens after the prefix [256].",
            MAX_TOKENS,
            sets_prompt_len=True,
        ),
        DatasetOption(
            "num_prefixes",
            "prefix-repetition: distinct prefixes [10, at most --num-prompts].",
            MAX_PROMPTS,
        ),
    )
    defaults: DatasetSettings = PrefixRepetition()

    def settings(
        self, given: Mapping[str, int], *, base: DatasetSettings, num_prompts: int
    ) -> DatasetSettings:
        start = base if isinstance(base, PrefixRepetition) else PrefixRepetition()
        if "num_prefixes" not in given:  # vLLM's 10 needs 10 prompts: the smoke preset sends 8
            start = replace(start, num_prefixes=min(start.num_prefixes, num_prompts))
        chosen = replace(start, **given)
        if chosen.num_prefixes > num_prompts:
            raise DatasetError(
                "--num-prefixes",
                f"{chosen.num_prefixes} prefixes need at least as many prompts (--num-prompts "
                f"{num_prompts}): vLLM sends num_prompts // num_prefixes per prefix",
            )
        return chosen


UNIT = _Unit()
