"""Command help from docstrings: rich's help rewraps only a command's first paragraph and
keeps the source's line breaks in the others, so every paragraph is joined into one line."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import typer

__all__ = ["add_command", "paragraphs"]


def paragraphs(text: str | None) -> str:
    """Blank-line separated paragraphs, each on one line."""
    blocks = inspect.cleandoc(text or "").split("\n\n")
    return "\n\n".join(" ".join(block.split()) for block in blocks)


def add_command(app: typer.Typer, function: Callable[..., Any], panel: str) -> None:
    app.command(rich_help_panel=panel, help=paragraphs(function.__doc__))(function)
