"""Tokens and other secrets written into a spec are refused before anything else reads the
spec, and the refusal never echoes them. The scan covers every key and value, a token glued
to other characters included, the env var names that hand vLLM a token, env vars whose name
says they hold a credential (VLLM_API_KEY, AWS_SECRET_ACCESS_KEY) and flags that pass one
(``--api-key sk-...``). The engines take such values from the shell that runs ``up``
(``<role>.secret_env``), never from a rendered file."""

from __future__ import annotations

from collections.abc import Iterator

from generator.errors import SpecIssue, dotted_field
from generator.spec.owned import ENGINE_API_KEY, ENGINE_API_KEY_FIX, ENGINE_API_KEY_REFUSAL
from generator.spec.secret_shapes import SECRET_VALUE, names_a_secret, plain_setting
from generator.spec.source import HF_TOKEN

__all__ = ["SECRET_FIX", "TOKEN_ENV_NAMES", "TOKEN_FIX", "inline_secrets"]

TOKEN_FIX = (
    "remove it and say where the token comes from instead: hf.token: {env: HF_TOKEN} "
    "(a compose secret read from your shell), {file: path/to/token} or {env_file: path/to/.env}"
)
SECRET_FIX = (
    "remove it; list the variable in prefill.secret_env / decode.secret_env instead: the "
    "engines then take its value from the shell that runs `up`, and no file holds it"
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
    elif isinstance(node, str) and SECRET_VALUE.search(node):
        problem = "contains what looks like a credential (an API, access or private key)"
        yield SpecIssue(dotted_field(path), problem, SECRET_FIX)


def _mapping(node: dict[object, object], path: tuple[int | str, ...]) -> Iterator[SpecIssue]:
    for key, value in node.items():
        if isinstance(key, str) and (HF_TOKEN.search(key) or SECRET_VALUE.search(key)):
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
        elif path[-1:] == ("env",) and key == ENGINE_API_KEY:
            yield SpecIssue(dotted_field(child), ENGINE_API_KEY_REFUSAL, ENGINE_API_KEY_FIX)
        elif path[-1:] == ("env",) and _credential_env(key, value):
            problem = "names a credential: its value would be written into compose.yaml"
            yield SpecIssue(dotted_field(child), f"{problem} and plan.json", SECRET_FIX)
        elif key == "extra_args" and isinstance(value, list):
            yield from _credential_args(value, child)
        else:
            yield from inline_secrets(value, child)


def _credential_env(key: object, value: object) -> bool:
    return (
        isinstance(key, str)
        and isinstance(value, str)
        and names_a_secret(key)
        and (not plain_setting(value))
    )


def _credential_args(args: list[object], path: tuple[int | str, ...]) -> Iterator[SpecIssue]:
    """``--api-key=x`` or ``--api-key x``: the flag is named, never its value."""
    for index, arg in enumerate(args):
        if not isinstance(arg, str):
            continue
        found = list(inline_secrets(arg, (*path, index)))
        if found:
            yield from found
            continue
        following = args[index + 1] if index + 1 < len(args) else None
        if (
            arg.startswith("-")
            and names_a_secret(arg.split("=", 1)[0])
            and _has_value(arg, following)
        ):
            flag = arg.split("=", 1)[0]
            if (
                flag.replace("_", "-") == "--api-key"
            ):  # vLLM's own key: no secret_env can carry it either
                yield SpecIssue(
                    dotted_field((*path, index)), ENGINE_API_KEY_REFUSAL, ENGINE_API_KEY_FIX
                )
                continue
            yield SpecIssue(
                dotted_field((*path, index)),
                f"passes a credential on the command line ({flag}), which would be written "
                "into compose.yaml and plan.json",
                SECRET_FIX,
            )


def _has_value(arg: str, following: object) -> bool:
    if "=" in arg:
        return not plain_setting(arg.split("=", 1)[1])
    return isinstance(following, str) and not following.startswith("-")
