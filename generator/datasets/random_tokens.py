"""The random dataset (vLLM's ``random``): every prompt is ``--input-len`` random tokens, so
no two share a prefix and no cache can help: the plain measure of a stack's KV transfer."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from generator.datasets.base import MAX_TOKENS, DatasetOption, DatasetSettings

__all__ = ["NAME", "UNIT", "RandomTokens"]

NAME = "random"


@dataclass(frozen=True)
class RandomTokens:
    input_len: int = 256  # tokens per prompt

    @property
    def name(self) -> str:
        return NAME

    @property
    def prompt_len(self) -> int:
        return self.input_len

    def vllm_args(self, output_len: int) -> list[str]:
        args = ["--dataset-name", "random", "--random-input-len", str(self.input_len)]
        return [*args, "--random-output-len", str(output_len)]

    def report_fields(self) -> dict[str, int | str]:
        return {}  # its one setting is the prompt length, which every report states

    def describe(self) -> str:
        return f"random dataset: {self.input_len} input"


class _Unit:
    name = NAME
    summary = "random tokens, no two prompts sharing a prefix"
    options = (
        DatasetOption(
            "input_len",
            "random: tokens per prompt (default: the preset's).",
            MAX_TOKENS,
            sets_prompt_len=True,
        ),
    )
    defaults: DatasetSettings = RandomTokens()

    def settings(
        self, given: Mapping[str, int], *, base: DatasetSettings, num_prompts: int
    ) -> DatasetSettings:
        start = base if isinstance(base, RandomTokens) else RandomTokens()
        return replace(start, **given)


UNIT = _Unit()
