"""Read a stack file, apply ``--set`` overrides, validate. The only place pydantic's
``ValidationError`` is translated (into ``SpecError`` with one ``SpecIssue`` per problem).

The spec knows no topology or router: the rules of those units come from the layer above
(``generator/stack.py`` passes them as ``rules``) and are reported with the spec's own."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from generator.errors import SpecError, SpecIssue, dotted_field
from generator.limits import BASELINE_SUFFIX
from generator.spec.checks import check_spec
from generator.spec.models import Spec
from generator.spec.overrides import apply_overrides
from generator.spec.secrets import inline_secrets
from generator.spec.source import parse_yaml, read_spec

__all__ = ["Rule", "apply_overrides", "read_spec_file", "validate_spec"]

Rule = Callable[[Spec], Iterable[SpecIssue]]  # a check a layer above the spec adds

_MAX_SHOWN = 80  # characters of a refused value shown back


def read_spec_file(path: Path, overrides: Sequence[str] = (), *, rules: Sequence[Rule]) -> Spec:
    text = read_spec(path, missing_fix=_missing_file_fix(path))
    raw = parse_yaml(text, source=str(path))
    return validate_spec(raw, source=str(path), overrides=overrides, rules=rules)


def validate_spec(
    raw: object,
    *,
    source: str,
    overrides: Sequence[str] = (),
    baseline: bool = False,
    rules: Sequence[Rule],
) -> Spec:
    """``baseline``: the spec bench derives (``generator.stack.baseline_spec``), which alone
    may carry the baseline's name. ``rules``: the checks of the layers above the spec."""
    if not isinstance(raw, dict):
        raise SpecError(
            source, [SpecIssue("<file>", "must be a YAML mapping", "see stacks/xpyd.yaml")]
        )
    data = apply_overrides(raw, overrides, source=source)
    secret_issues = list(inline_secrets(data))
    if secret_issues:
        raise SpecError(source, secret_issues)  # never echo the rest of a file holding a token
    try:
        spec = Spec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(source, [_translate(error) for error in exc.errors()]) from exc
    issues = [issue for rule in rules for issue in rule(spec)]
    issues += check_spec(spec) + ([] if baseline else _name_issues(spec))
    if issues:
        raise SpecError(source, issues)
    return spec


def _name_issues(spec: Spec) -> list[SpecIssue]:
    if spec.name.endswith(BASELINE_SUFFIX):
        base = spec.name.removesuffix(BASELINE_SUFFIX)
        problem = f"is the name bench gives {base}'s colocated baseline (one compose project)"
        return [SpecIssue("name", problem, f"pick a name that does not end in {BASELINE_SUFFIX}")]
    return []


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
    if kind == "xpyd_value":  # our own types (spec/types.py): the message and fix are theirs
        context = error.get("ctx") or {}
        return SpecIssue(
            field, f"{context['problem']} (got {_shown(error, loc)})", str(context["fix"])
        )
    problem = f"{error['msg']} (got {_shown(error, loc)})"
    if kind == "string_type" and isinstance(error.get("input"), int | float | bool):
        return SpecIssue(field, problem, f'quote it if it is meant as text: {field}: "..."')
    return SpecIssue(field, problem, _FIXES.get(kind, f"correct {field}"))


# Fixes for pydantic's error types, where "correct the field" says too little.
_FIXES = {
    "literal_error": "use one of the values listed",
    "enum": "use one of the values listed",
    "int_type": "write a whole number (not true/false, not quoted, no decimals)",
    "float_type": "write a number (not true/false, not quoted)",
    "bool_type": "write true or false",
    "finite_number": "write a finite number",
    "list_type": "write a list, e.g. [a, b]",
    "dict_type": "write a mapping of settings (key: value)",
    "model_type": "write a mapping of settings (key: value)",
}


def _shown(error: ErrorDetails, loc: tuple[int | str, ...]) -> str:
    """The refused value, shortened; never anything under hf.token, nor a Docker URL's user
    part (``tcp://user:password@host``)."""
    if tuple(loc[:2]) == ("hf", "token"):
        return "a value not shown: it may be a token"
    text = repr(error.get("input"))
    if tuple(loc[-2:]) == ("docker", "url") and "@" in text:
        return "a value not shown: it may hold a password"
    return text if len(text) <= _MAX_SHOWN else f"{text[: _MAX_SHOWN - 3]}..."


def _dotted(loc: tuple[int | str, ...]) -> str:
    if loc and loc[-1] == "[key]":  # pydantic's marker: the key itself is wrong
        return f"{dotted_field(loc[:-1])} (the key)"
    return dotted_field(loc)


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
    try:
        stacks = sorted(p.stem for p in path.parent.glob("*.yaml")) if path.parent.is_dir() else []
    except OSError:
        stacks = []
    return (
        f"pick one of: {', '.join(stacks)}" if stacks else "give a stack name or a path to a .yaml"
    )
