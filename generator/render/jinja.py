"""The one jinja2 environment: StrictUndefined, so a missing value fails the render.

Three filters put spec values into Dockerfiles and scripts safely (``shell_word``: one word
of a shell command, quoted as it must be). ``exec_form`` writes a JSON array
(COPY/RUN/CMD without a shell: a value stays one argument, whatever it holds).
``arg_value`` guards ARG defaults, which Docker splits on whitespace and expands ``$`` in:
the spec's types already refuse such values, and the filter fails a render that would
carry one anyway.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from generator.errors import RenderError

__all__ = ["render_template"]

_ARG_VALUE = re.compile(r"[^\s\"'`$\\]+")
_MOUNT_PATH = re.compile(r"[A-Za-z0-9._/+@-]+")


def exec_form(items: Iterable[str]) -> str:
    return json.dumps(list(items), ensure_ascii=False)


def arg_value(value: object) -> str:
    text = str(value)
    if not _ARG_VALUE.fullmatch(text):
        raise jinja2.TemplateRuntimeError(
            f"{text!r} cannot be an ARG default: it holds whitespace, a quote, '$' or '\\'"
        )
    return text


def bind_mount(source: str, target: str) -> str:
    """A RUN step's read-only bind mount of a build-context path (BuildKit). Its options are
    comma-separated and the flag ends at whitespace, so only plain path characters pass."""
    for path in (source, target):
        if not _MOUNT_PATH.fullmatch(path):
            raise jinja2.TemplateRuntimeError(
                f"{path!r} cannot be a build mount's path: use letters, digits and . _ / + @ -"
            )
    return f"--mount=type=bind,source={source},target={target}"


@cache
def _environment(templates_dir: Path) -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(templates_dir),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    environment.filters["exec_form"] = exec_form
    environment.filters["arg_value"] = arg_value
    environment.filters["bind_mount"] = bind_mount
    environment.filters["shell_word"] = shlex.quote  # one word in a shell script
    return environment


def render_template(templates_dir: Path, name: str, **context: Any) -> str:
    try:
        template = _environment(templates_dir).get_template(name)
        return template.render(template=name, **context)
    except jinja2.TemplateError as exc:
        raise RenderError(
            f"template {name} failed to render: {exc}",
            hint=f"check images/templates/{name} against the values generator/render passes it",
        ) from exc
