"""The command line: ``python -m generator <command>``. One module per command group; the
only place expected errors become a red message and an exit code."""

from __future__ import annotations

import os
import sys

import typer

from generator.cli import (
    bench_command,
    doctor_command,
    env_command,
    fault_command,
    run_commands,
    stack_commands,
)

__all__ = ["app", "main"]

app = typer.Typer(
    name="python -m generator",
    help=(
        "Render, run and verify vLLM prefill/decode (P/D) disaggregated stacks.\n\n"
        "A stack is one YAML spec under stacks/: model, prefill and decode groups, hosts, "
        "topology and router. Topologies: [bold]lmcache-pd[/bold] (LMCache's own P/D transfer, "
        "driven by our proxy) and [bold]nixl-mp[/bold] (vLLM's NIXL hand-off plus one "
        "`lmcache server` per vLLM, driven by vllm-router).\n\n"
        "Start with: python -m generator plan cpu-1p1d\n\n"
        "--debug (or XPYD_DEBUG=1) shows tracebacks; XPYD_ROOT picks the checkout."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)
stack_commands.register(app)
run_commands.register(app)
env_command.register(app)
doctor_command.register(app)
bench_command.register(app)
fault_command.register(app)


def main() -> None:
    debug = "--debug" in sys.argv or bool(os.environ.get("XPYD_DEBUG"))
    if "--debug" in sys.argv:
        sys.argv.remove("--debug")
    from generator.errors import XpydError

    try:
        app()  # standalone: usage errors print and exit 2 there
    except XpydError as exc:
        if debug:
            raise
        from generator.console import error

        error(exc.message, exc.hint)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # a bug: one line here, the traceback with --debug
        if debug:
            raise
        from generator.console import error

        error(
            f"internal error: {type(exc).__name__}: {exc}",
            "this is a bug in xpyd-stacks: rerun with --debug for the traceback and report it",
        )
        sys.exit(1)
