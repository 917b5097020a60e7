"""Levelled output on stderr (stdout is for data: YAML, JSON, tables asked for)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console

__all__ = ["error", "info", "status", "stderr", "success", "warn"]

stderr = Console(stderr=True, highlight=False, soft_wrap=True)


def info(message: str) -> None:
    stderr.print(message)


def success(message: str) -> None:
    stderr.print(f"[green]{message}[/green]")


def warn(message: str) -> None:
    stderr.print(f"[yellow]warning:[/yellow] {message}")


def error(message: str, hint: str = "") -> None:
    stderr.print(f"[red bold]error:[/red bold] {message}", markup=True)
    if hint:
        stderr.print(f"[cyan]fix:[/cyan] {hint}")


def _interactive() -> bool:
    return stderr.is_terminal and not os.environ.get("CI")


@contextmanager
def status(message: str) -> Iterator[None]:
    """A spinner on a terminal; one plain line in CI or when piped."""
    if _interactive():
        with stderr.status(message):
            yield
    else:
        print(f"... {message}", file=sys.stderr, flush=True)
        yield
