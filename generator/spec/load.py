"""Read a stack file, apply ``--set`` overrides, validate. The only place pydantic's
``ValidationError`` is translated (into ``SpecError`` with one ``SpecIssue`` per problem)."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from generator.errors import SpecError, SpecIssue
from generator.spec.checks import check_spec
from generator.spec.models import Spec

__all__ = ["apply_overrides", "load_spec", "parse_spec"]

# Hugging Face user access tokens: "hf_" and ~34 letters/digits.
_HF_TOKEN = re.compile(r"\bhf_[A-Za-z0-9]{20,}\b")


def load_spec(path: Path, overrides: Sequence[str] = ()) -> Spec:
    source = str(path)
    if not path.is_file():
        raise SpecError(source, [SpecIssue("<file>", "does not exist", _missing_file_fix(path))])
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise SpecError(
            source, [SpecIssue("<file>", f"is not valid YAML: {exc}", "fix the YAML syntax")]
        ) from exc
    return parse_spec(raw, source=source, overrides=overrides)


def parse_spec(raw: object, *, source: str, overrides: Sequence[str] = ()) -> Spec:
    if not isinstance(raw, dict):
        raise SpecError(
            source, [SpecIssue("<file>", "must be a YAML mapping", "see stacks/xpyd.yaml")]
        )
    data = apply_overrides(raw, overrides, source=source)
    secret_issues = list(_inline_secrets(data, ""))
    if secret_issues:
        raise SpecError(source, secret_issues)  # never echo the rest of a file holding a token
    try:
        spec = Spec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(source, [_translate(error) for error in exc.errors()]) from exc
    issues = check_spec(spec)
    if issues:
        raise SpecError(source, issues)
    return spec


def apply_overrides(
    raw: dict[str, Any], overrides: Sequence[str], *, source: str
) -> dict[str, Any]:
    """``a.b.c=value`` sets a nested key; the value is parsed as YAML (``3``, ``true``)."""
    data: dict[str, Any] = copy.deepcopy(raw)
    for assignment in overrides:
        dotted, sep, text = assignment.partition("=")
        if not sep or not dotted:
            raise SpecError(
                source,
                [
                    SpecIssue(
                        f"--set {assignment}", "is not KEY=VALUE", "write e.g. --set decode.count=3"
                    )
                ],
            )
        _set_path(data, dotted.split("."), yaml.safe_load(text), assignment, source)
    return data


def _set_path(
    data: dict[str, Any], keys: list[str], value: object, assignment: str, source: str
) -> None:
    node: Any = data
    for position, key in enumerate(keys[:-1]):
        nxt = (
            node[int(key)]
            if isinstance(node, list) and key.isdigit() and int(key) < len(node)
            else None
        )
        if isinstance(node, dict):
            nxt = node.setdefault(key, {})
        if not isinstance(nxt, dict | list):
            where = ".".join(keys[: position + 1])
            raise SpecError(
                source,
                [
                    SpecIssue(
                        f"--set {assignment}",
                        f"{where} is not a mapping or list",
                        "set a leaf value",
                    )
                ],
            )
        node = nxt
    last = keys[-1]
    if isinstance(node, list) and last.isdigit() and int(last) < len(node):
        node[int(last)] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise SpecError(
            source,
            [
                SpecIssue(
                    f"--set {assignment}",
                    "points into a list past its end",
                    "use an existing index",
                )
            ],
        )


def _inline_secrets(node: object, path: str) -> Iterator[SpecIssue]:
    if isinstance(node, dict):
        token = node.get("token") if path == "hf" else None
        if isinstance(token, str):
            yield SpecIssue(
                "hf.token",
                "holds a literal value; the token must never be written into a stack file",
                _TOKEN_FIX,
            )
        for key, value in node.items():
            if not (path == "hf" and key == "token" and isinstance(value, str)):
                yield from _inline_secrets(value, f"{path}.{key}" if path else str(key))
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _inline_secrets(item, f"{path}[{index}]")
    elif isinstance(node, str) and _HF_TOKEN.search(node):
        yield SpecIssue(path, "contains what looks like a Hugging Face token", _TOKEN_FIX)


_TOKEN_FIX = (
    "remove it and say where the token comes from instead: hf.token: {env: HF_TOKEN} "
    "(a compose secret read from your shell), {file: path/to/token} or {env_file: path/to/.env}"
)


def _translate(error: ErrorDetails) -> SpecIssue:
    loc = error["loc"]
    field = _dotted(loc)
    kind = error["type"]
    if kind == "missing":
        return SpecIssue(
            field, "is required", f"add {field} (stacks/*.yaml in this repo are examples)"
        )
    if kind == "extra_forbidden":
        known = _known_fields(loc[:-1])
        return SpecIssue(
            field,
            "is not a known setting",
            f"remove it or fix the spelling; settings here: {', '.join(known)}",
        )
    if kind in ("literal_error", "enum"):
        return SpecIssue(
            field, f"{error['msg']} (got {error.get('input')!r})", "use one of the values listed"
        )
    return SpecIssue(field, f"{error['msg']} (got {error.get('input')!r})", f"correct {field}")


def _dotted(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "<spec>"


def _known_fields(loc: tuple[int | str, ...]) -> list[str]:
    model: type[BaseModel] | None = Spec
    for part in loc:
        if model is None or isinstance(part, int):
            continue
        field = model.model_fields.get(str(part))
        model = _model_in(field.annotation) if field is not None else None
    return sorted(model.model_fields) if model is not None else []


def _model_in(annotation: object) -> type[BaseModel] | None:
    """The BaseModel inside ``X``, ``X | None`` or ``list[X]``, if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _missing_file_fix(path: Path) -> str:
    stacks = sorted(p.stem for p in path.parent.glob("*.yaml")) if path.parent.is_dir() else []
    return (
        f"pick one of: {', '.join(stacks)}" if stacks else "give a stack name or a path to a .yaml"
    )
