"""The one jinja2 environment: StrictUndefined, so a missing value fails the render."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from generator.errors import RenderError

__all__ = ["render_template"]


@cache
def _environment(templates_dir: Path) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates_dir),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def render_template(templates_dir: Path, name: str, **context: Any) -> str:
    try:
        template = _environment(templates_dir).get_template(name)
        return template.render(template=name, **context)
    except jinja2.TemplateError as exc:
        raise RenderError(
            f"template {name} failed to render: {exc}",
            hint=f"check images/templates/{name} against the values generator/render passes it",
        ) from exc
