"""``--set a.b.c=value``: set a nested key of the raw spec before validation. The value is
YAML (``3``, ``true``, ``[0, 1]``), read with the same bounds as a stack file; every refusal
names the assignment, what is wrong where, and what to write instead."""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from typing import Any

from generator.errors import SpecError, SpecIssue
from generator.spec.source import mask_tokens, parse_yaml

__all__ = ["MAX_KEY_PARTS", "apply_overrides"]

MAX_KEY_PARTS = 12  # the deepest spec setting is 4 levels down
_INDEX = re.compile(r"[0-9]{1,6}")


class _Refused(Exception):
    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(problem)
        self.problem, self.fix = problem, fix


def apply_overrides(
    raw: dict[str, Any], overrides: Sequence[str], *, source: str
) -> dict[str, Any]:
    data: dict[str, Any] = copy.deepcopy(raw)
    for assignment in overrides:
        label = _label(assignment)
        dotted, sep, text = assignment.partition("=")
        try:
            keys = _keys(dotted, sep)
        except _Refused as exc:
            raise SpecError(source, [SpecIssue(label, exc.problem, exc.fix)]) from exc
        fix = f"quote it as YAML text: {_label(dotted)}='\"...\"'"
        value = parse_yaml(text, source=source, field=label, syntax_fix=fix)
        try:
            _set_path(data, keys, value)
        except _Refused as exc:
            raise SpecError(source, [SpecIssue(label, exc.problem, exc.fix)]) from exc
    return data


def _label(assignment: str) -> str:
    """How the assignment is named in a message: quoted when it holds a control character."""
    shown = mask_tokens(assignment)
    return f"--set {shown}" if shown.isprintable() else f"--set {shown!r}"


def _keys(dotted: str, sep: str) -> list[str]:
    if not sep or not dotted:
        raise _Refused("is not KEY=VALUE", "write e.g. --set decode.count=3")
    keys = dotted.split(".")
    if any(not key for key in keys):
        raise _Refused("has an empty key (two dots, or a dot at an end)", "write e.g. hosts.0.gpus")
    if len(keys) > MAX_KEY_PARTS:
        raise _Refused(
            f"has {len(keys)} keys; no spec setting is that deep", "check the key against the spec"
        )
    return keys


def _set_path(data: dict[str, Any], keys: list[str], value: object) -> None:
    node: Any = data
    for position, key in enumerate(keys[:-1]):
        node = _child(node, key, ".".join(keys[:position]))
    _assign(node, keys[-1], value, ".".join(keys[:-1]))


def _child(node: object, key: str, where: str) -> object:
    """The container under ``key``; a missing (or null) mapping entry becomes ``{}``."""
    if isinstance(node, dict):
        if node.get(key) is None:
            node[key] = {}
        return node[key]
    if isinstance(node, list):
        return node[_index(node, key, where)]
    raise _not_a_container(node, where)


def _assign(node: object, key: str, value: object, where: str) -> None:
    if isinstance(node, dict):
        node[key] = value
    elif isinstance(node, list):
        node[_index(node, key, where)] = value
    else:
        raise _not_a_container(node, where)


def _index(items: list[Any], key: str, where: str) -> int:
    name = where or "the spec"
    if not _INDEX.fullmatch(key):
        raise _Refused(
            f"{name} is a list, so the key after it must be an index, not {key!r}",
            f"write {where}.0 (indexes 0 to {len(items) - 1})" if items else f"set {name} whole",
        )
    if int(key) >= len(items):
        span = f"indexes 0 to {len(items) - 1}" if items else "no entries"
        raise _Refused(
            f"{name} has {len(items)} entries ({span}); there is no index {key}",
            f"use an existing index, or set the whole list: --set '{where}=[...]'",
        )
    return int(key)


def _not_a_container(node: object, where: str) -> _Refused:
    kind = type(node).__name__
    return _Refused(
        f"{where} is a single value ({kind}), not a mapping or list, so it has no keys",
        f"set {where} itself: --set {where}=...",
    )
