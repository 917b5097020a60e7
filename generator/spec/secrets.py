"""Tokens written into a spec are refused before anything else reads the spec, and the
refusal never echoes them. The scan covers every key and value, a token glued to other
characters included, and the env var names that hand vLLM a token."""

from __future__ import annotations

from collections.abc import Iterator

from generator.errors import SpecIssue, dotted_field
from generator.spec.source import HF_TOKEN

__all__ = ["TOKEN_ENV_NAMES", "TOKEN_FIX", "inline_secrets"]

TOKEN_FIX = (
    "remove it and say where the token comes from instead: hf.token: {env: HF_TOKEN} "
    "(a compose secret read from your shell), {file: path/to/token} or {env_file: path/to/.env}"
)
# What huggingface_hub reads a token from: a value here is a token in the spec.
TOKEN_ENV_NAMES = frozenset({"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_HUB_TOKEN"})


def inline_secrets(node: object, path: tuple[int | str, ...] = ()) -> Iterator[SpecIssue]:
    if isinstance(node, dict):
        yield from _mapping(node, path)
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from inline_secrets(item, (*path, index))
    elif isinstance(node, str) and HF_TOKEN.search(node):
        field = dotted_field(path)
        yield SpecIssue(field, "contains what looks like a Hugging Face token", TOKEN_FIX)


def _mapping(node: dict[object, object], path: tuple[int | str, ...]) -> Iterator[SpecIssue]:
    for key, value in node.items():
        if isinstance(key, str) and HF_TOKEN.search(key):
            # The key is the token: name only where it sits.
            where = dotted_field(path)
            yield SpecIssue(where, "has a key that looks like a Hugging Face token", TOKEN_FIX)
            continue
        child = (*path, key if isinstance(key, int | str) else repr(key))
        if path == ("hf",) and key == "token" and not isinstance(value, dict | None):
            yield SpecIssue(
                "hf.token",
                "holds a literal value; the token must never be written into a stack file",
                TOKEN_FIX,
            )
        elif path[-1:] == ("env",) and key in TOKEN_ENV_NAMES:
            found = list(inline_secrets(value, child))
            problem = "would write the token into the spec and the compose file"
            yield from found or [SpecIssue(dotted_field(child), problem, TOKEN_FIX)]
        else:
            yield from inline_secrets(value, child)
