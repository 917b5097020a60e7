"""doctor: check a host for a stack before `up` (and the KV path, with --kv-path)."""

from __future__ import annotations

from typing import Annotated

import typer

from generator.cli.help_text import add_command
from generator.cli.modes import refuse_unused
from generator.cli.stack_options import RuntimeOpt, runtime_overrides

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    add_command(app, doctor, "Stacks")


def doctor(
    ctx: typer.Context,
    stack: Annotated[str, typer.Argument(help="Stack name or spec path.", show_default=False)],
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a spec value, as for `up`.", show_default=False),
    ] = None,
    runtime: RuntimeOpt = None,
    host: Annotated[
        str | None,
        typer.Option(
            "--host",
            help="Which of the stack's hosts this machine is (multi-host stacks; default: the "
            "host whose address is on this machine).",
        ),
    ] = None,
    kv_path: Annotated[
        bool,
        typer.Option(
            "--kv-path",
            help="Also move real data with NIXL between each same-host prefill/decode pair, "
            "with the rendered devices and namespaces, and judge transport and GiB/s.",
        ),
    ] = False,
    process: Annotated[
        bool,
        typer.Option(
            "--process",
            help="--kv-path without Docker: two processes that see what the containers would "
            "see (their /dev, GPUs and PID namespace); needs torch and nixl in --python.",
        ),
    ] = False,
    python: Annotated[
        str, typer.Option("--python", help="Interpreter for --process (torch + nixl).")
    ] = "python3",
    layout: Annotated[
        str,
        typer.Option(
            "--kv-layout",
            help="rendered: the containers as rendered. own-gpus: each side sees only its own "
            "GPUs (the layout that silently falls back to TCP; shows what doctor catches).",
        ),
    ] = "rendered",
    size_mib: Annotated[
        int | None,
        typer.Option(
            "--size-mib", help="MiB per transfer (default 1024 GPU, 256 CPU).", min=1, max=65536
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Check that this host can run the stack, before `up` (which runs the cheap checks as its
    preflight): Docker Engine and Compose versions, the GPU access mode (NVIDIA container
    toolkit, `runtime: nvidia` or CDI), the GPUs the plan needs and the links between each
    same-host prefill/decode pair, RDMA devices and memlock where KV crosses hosts, /dev/shm,
    the host's address, every planned port (and who holds a busy one), disk for images and the
    model, and the HF token's source (never its value). With --runtime process: no Docker
    checks; the tools that runtime needs (taskset, unshare and root for isolation: container).

    Exit 1 when a required check fails. Run it on every host of a multi-host stack.
    """
    from generator.cli.tables import print_doctor
    from generator.doctor import run_doctor
    from generator.doctor.kvpath import KvLayout
    from generator.errors import XpydError

    try:
        kv_layout = KvLayout(layout)
    except ValueError as exc:
        choices = ", ".join(item.value for item in KvLayout)
        raise XpydError(
            f"--kv-layout {layout!r} is not a layout", hint=f"use one of: {choices}"
        ) from exc
    moves_data = kv_path or process or kv_layout is not KvLayout.RENDERED
    if not process:
        refuse_unused(ctx, ("python",), mode="without --process", reason="it runs the KV test")
    if not moves_data:
        refuse_unused(
            ctx, ("size_mib",), mode="without --kv-path", reason="it sizes the KV test's transfers"
        )
    report = run_doctor(
        stack,
        [*(set_ or []), *runtime_overrides(runtime, None)],
        host=host,
        kv_path=moves_data,
        process=process,
        python=python,
        layout=kv_layout,
        size_mib=size_mib,
    )
    if as_json:
        import json

        typer.echo(json.dumps(report.as_dict(), indent=2))
    else:
        print_doctor(report)
    if not report.passed:
        raise typer.Exit(1)
