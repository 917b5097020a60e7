"""Options a command's mode does not read are refused, never ignored: `bench --fault` runs a
drill with its own load, so a --request-rate beside it would change nothing while the user
believes it did. Only options written on the command line count (a default, or one an
environment variable sets for every command, is no request)."""

from __future__ import annotations

from collections.abc import Iterable

import typer

__all__ = ["given_options", "refuse_unused"]


def given_options(ctx: typer.Context, names: Iterable[str]) -> list[str]:
    """The flags of ``names`` (parameter names) written on the command line, in order."""
    flags = {param.name: param.opts[0] for param in ctx.command.params if param.opts}
    return [flags[name] for name in names if _on_command_line(ctx, name)]


def _on_command_line(ctx: typer.Context, name: str) -> bool:
    # By name: typer carries its own copy of click, whose enum is not click's.
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


def refuse_unused(ctx: typer.Context, names: Iterable[str], *, mode: str, reason: str) -> None:
    """BadParameter (exit 2) naming the first of ``names`` given: "Invalid value for --p2p:
    has no effect with --fault: <reason>"."""
    given = given_options(ctx, names)
    if given:
        raise typer.BadParameter(f"has no effect {mode}: {reason}", param_hint=given[0])
