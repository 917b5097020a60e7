"""Levelled output on stderr (stdout is for data: YAML, JSON, tables asked for).

Messages are plain text, never rich markup: they carry user input and error text, whose
square brackets would vanish or restyle the line (``[red]``, ``[/]``). Callers that want
style pass a ``rich.text.Text``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.text import Text

__all__ = ["error", "info", "status", "stderr", "success", "warn"]

stderr = Console(stderr=True, highlight=False, soft_wrap=True)


def _text(message: str | Text) -> Text:
    return message if isinstance(message, Text) else Text(message)


def info(message: str | Text) -> None:
    stderr.print(_text(message))


def success(message: str | Text) -> None:
    stderr.print(_text(message), style="green")


def warn(message: str | Text) -> None:
    stderr.print(Text.assemble(("warning:", "yellow"), " ", _text(message)))


def error(message: str | Text, hint: str | Text = "") -> None:
    stderr.print(Text.assemble(("error:", "red bold"), " ", _text(message)))
    if hint:
        stderr.print(Text.assemble(("fix:", "cyan"), " ", _text(hint)))


def _interactive() -> bool:
    return stderr.is_terminal and not os.environ.get("CI")


@contextmanager
def status(message: str) -> Iterator[None]:
    """A spinner on a terminal; one plain line in CI or when piped."""
    if _interactive():
        with stderr.status(Text(message)):
            yield
    else:
        print(f"... {message}", file=sys.stderr, flush=True)
        yield
