"""MkDocs hook: reference/spec.md, the stack spec's every key, written at each build from the
pydantic models' JSON schema (``generator.spec.Spec.model_json_schema()``), so the page cannot
drift from the code that validates specs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's generator, whichever one the venv installed

PAGE = "reference/spec.md"
Schema = dict[str, Any]

INTRO = """\
# Spec reference

Every key a stack spec (`stacks/*.yaml`) may hold, generated from the pydantic models that
validate it (`generator/spec/models.py`, top-level model `Spec`) each time the docs are built.
Unknown keys are errors and values are never coerced (`count: true` or `count: "2"` is an
error). `null` as a default means "not set": the planner picks a value for the stack's
topology and profile. A few keys also take a shorthand that the loader expands before this
schema applies: lists of GPU or CPU ids, ports and host names as one comma-separated string
(`gpus: "0,1"`), and `router.policy` as a bare policy name. Rules that tie several keys together
(placement, ports, what a topology allows) are in `generator/spec/checks.py` and the
topologies' and routers' own checks; `python -m generator validate` runs them all. What the
keys mean in practice: [Stacks and specs](../stacks.md).
"""


class _WithFactoryDefaults(GenerateJsonSchema):
    """Shows ``default_factory`` values as defaults too (pydantic leaves them out)."""

    def get_default_value(self, schema: core_schema.WithDefaultSchema) -> Any:
        factory = schema.get("default_factory")
        if factory is not None and not schema.get("default_factory_takes_data"):
            return factory()  # type: ignore[call-arg]
        return super().get_default_value(schema)


def spec_schema() -> JsonSchemaValue:
    from generator.spec import Spec

    return Spec.model_json_schema(schema_generator=_WithFactoryDefaults)


def _anchor(name: str) -> str:
    return name.lower()


def _code(value: object) -> str:
    return "`" + json.dumps(value, separators=(", ", ": ")) + "`"


_BOUNDS = (  # (inclusive low, exclusive low, inclusive high, exclusive high, how it reads)
    ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum", "{}"),
    ("minLength", "", "maxLength", "", "length {}"),
    ("minItems", "", "maxItems", "", "{} items"),
    ("minProperties", "", "maxProperties", "", "{} entries"),
)


def _range(prop: Schema, low: str, low_open: str, high: str, high_open: str) -> str:
    if low in prop and high in prop:
        return f"{prop[low]}..{prop[high]}"
    marks = [(low, ">="), (low_open, ">"), (high, "at most"), (high_open, "<")]
    return ", ".join(f"{word} {prop[key]}" for key, word in marks if key and key in prop)


def _bounds(prop: Schema) -> str:
    """Bounds as one note: `(1..4096)`, `(> 0, at most 1)`, `(length at most 65536)`."""
    found = [shape.format(_range(prop, *keys)) for *keys, shape in _BOUNDS if _range(prop, *keys)]
    return f" ({', '.join(found)})" if found else ""


def describe_type(prop: Schema, defs: Schema) -> str:
    """One line for a table cell: the type, its allowed values or bounds, links to models."""
    if "$ref" in prop:
        return _named_type(prop["$ref"].rsplit("/", 1)[-1], defs)
    if "anyOf" in prop:
        kinds = [describe_type(part, defs) for part in prop["anyOf"] if part != {"type": "null"}]
        nullable = {"type": "null"} in prop["anyOf"]
        return " or ".join(kinds) + (" or `null`" if nullable else "")
    return _plain_type(prop, defs)


def _choices(values: list[Any]) -> str:
    return " \\| ".join(_code(value) for value in values)


def _named_type(name: str, defs: Schema) -> str:
    """An enum reads as its values; a model as a link to its section."""
    target = defs[name]
    return _choices(target["enum"]) if "enum" in target else f"[{name}](#{_anchor(name)})"


def _plain_type(prop: Schema, defs: Schema) -> str:
    choices = prop.get("enum", [prop["const"]] if "const" in prop else None)
    if choices is not None:
        return _choices(choices)
    kind = prop.get("type")
    if kind == "array":
        return f"list of {describe_type(prop.get('items', {}), defs)}{_bounds(prop)}"
    if kind == "object":
        values = prop.get("additionalProperties")
        inner = describe_type(values, defs) if isinstance(values, dict) else "any"
        return f"map of string to {inner}{_bounds(prop)}"
    return f"{kind or 'any'}{_bounds(prop)}"


def _field_defaults(model: Schema) -> dict[str, Any]:
    return {key: prop.get("default") for key, prop in model.get("properties", {}).items()}


def describe_default(prop: Schema, required: bool, defs: Schema) -> str:
    if required:
        return "**required**"
    if "default" not in prop:
        return ""
    default = prop["default"]
    ref = prop.get("$ref", "").rsplit("/", 1)[-1]
    if ref and isinstance(default, dict) and default == _field_defaults(defs[ref]):
        return "its keys' defaults"
    return _code(_without_nulls(default))


def _without_nulls(value: Any) -> Any:
    """Defaults of nested models list every key; the ones left unset say nothing."""
    if isinstance(value, dict):
        return {key: _without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_without_nulls(item) for item in value]
    return value


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|").replace("<", "&lt;")


def model_section(name: str, model: Schema, paths: list[str], defs: Schema) -> list[str]:
    """A model's keys; headed by where a spec writes them, anchored by the model's name."""
    where = ", ".join(f"`{path}`" for path in paths) or "The top level"
    lines = [f"## {where} {{#{_anchor(name)}}}", "", f"Model `{name}`.", ""]
    if model.get("description"):
        lines += [_cell(model["description"]), ""]
    lines += ["| key | type | default | description |", "|---|---|---|---|"]
    required = set(model.get("required", []))
    for key, prop in model.get("properties", {}).items():
        cells = (
            f"`{key}`",
            describe_type(prop, defs),
            describe_default(prop, key in required, defs),
            _cell(prop.get("description", "")),
        )
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def _refs(prop: Schema) -> list[str]:
    """The models a property's type names, in the order they appear."""
    if "$ref" in prop:
        return [prop["$ref"].rsplit("/", 1)[-1]]
    found: list[str] = []
    for part in prop.get("anyOf", []):
        found += _refs(part)
    for key in ("items", "additionalProperties"):
        if isinstance(prop.get(key), dict):
            found += _refs(prop[key])
    return found


def models_in_order(schema: Schema) -> dict[str, list[str]]:
    """Each object model reachable from the top, breadth first, with the key paths using it."""
    defs = schema.get("$defs", {})
    order: dict[str, list[str]] = {}
    queue: list[tuple[str, Schema]] = [("", schema)]
    while queue:
        prefix, model = queue.pop(0)
        for key, prop in model.get("properties", {}).items():
            path = f"{prefix}{key}" + ("[]" if prop.get("type") == "array" else "")
            for name in _refs(prop):
                if "enum" in defs[name]:
                    continue
                if name not in order:
                    queue.append((f"{path}.", defs[name]))
                order.setdefault(name, []).append(path)
    return order


def render_spec_page(schema: Schema) -> str:
    defs = schema.get("$defs", {})
    top = schema.get("title", "Spec")
    lines = [INTRO, *model_section(top, schema, [], defs)]
    for name, paths in models_in_order(schema).items():
        lines += model_section(name, defs[name], paths, defs)
    return "\n".join(lines)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    files.append(File.generated(config, PAGE, content=render_spec_page(spec_schema())))
    return files
