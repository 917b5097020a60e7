"""The process runtime's task before anything starts: the Pythons the services run with,
made where they are missing (what `python -m generator env` does), then checked; and the
synthetic model."""

from __future__ import annotations

import subprocess
from pathlib import Path

from generator.errors import StackError
from generator.runtimes.process import ProcessStack, Pythons
from generator.serializers.process import Interpreter
from generator.topologies import topology_of
from generator.workflow.context import RunContext
from generator.workflow.steps.prepare import every

__all__ = ["check_pythons"]


def check_pythons(context: RunContext) -> str:
    """The process runtime's Pythons: the engines' imports vLLM, the router's runs the router;
    then the synthetic model, where the stack uses one (the image build makes it otherwise).
    Where the default Pythons (what `python -m generator env` makes) are missing or lack what
    this stack needs, they are made first: `up` under compose builds what it needs, so `up
    --runtime process` does too. A Python the spec names (process.python) is the user's: it is
    checked, never made."""
    from generator.envs import make_synthetic_model

    stack = next(iter(context.hosts.values()))
    runtime = stack.runtime if isinstance(stack.runtime, ProcessStack) else None
    assert runtime is not None  # the DAG adds this task under the process runtime only
    pythons = runtime.pythons
    if runtime.commands.images is not None:
        # The images' Pythons, asked where the steps run (the spec refuses a synthetic model).
        return "; ".join(_probe_in_images(context, runtime))
    try:
        found = _probe_pythons(context, pythons)
    except StackError:
        if not _default_pythons(context, pythons):
            raise
        found = [_make_envs(context), *_probe_pythons(context, pythons)]
    if context.plan.model.source == "synthetic":
        found.append(
            make_synthetic_model(
                context.plan, context.workspace, pythons.engine, every(context, "model")
            )
        )
    return "; ".join(found)


def _probe_pythons(context: RunContext, pythons: Pythons) -> list[str]:
    probe = _ENGINE_PROBE
    if topology_of(context.plan).needs_cpu_connector(context.plan.profile):
        probe = "import xpyd_lmcache_cpu; " + probe  # LMCache's CPU connector (env installs it)
    return [
        _answers(pythons.engine, probe, "the engines' Python"),
        _answers(pythons.router, _ROUTER_PROBE, "the router's Python"),
    ]


def _probe_in_images(context: RunContext, runtime: ProcessStack) -> list[str]:
    images = runtime.commands.images
    assert images is not None
    asked: tuple[tuple[Interpreter, str, str], ...] = (
        ("engine", _ENGINE_PROBE, f"the engines' Python in {images.engine}"),
        ("router", _ROUTER_PROBE, f"the router's Python in {images.router}"),
    )
    found = []
    for interpreter, probe, what in asked:
        done = runtime.ask_python(interpreter, probe, timeout_s=_IMAGE_PROBE_TIMEOUT_S)
        if done.returncode != 0:
            tail = "\n".join(done.stderr.strip().splitlines()[-5:])
            raise StackError(
                f"{what} cannot import what it runs:\n{tail}",
                hint="use an image with the stack's lock (its engine or router image), or set "
                "slurm.container.engine_python / router_python to the Python in it that has it",
            )
        found.append(done.stdout.strip())
    return found


# An image's first start on a node imports it (enroot): minutes for an engine image.
_IMAGE_PROBE_TIMEOUT_S = 1800.0


def _default_pythons(context: RunContext, pythons: Pythons) -> bool:
    from generator.envs import default_pythons

    return pythons == default_pythons(context.workspace, context.plan.profile)


def _make_envs(context: RunContext) -> str:
    from generator.envs import make_envs

    context.progress("making the stack's Pythons (what `python -m generator env` does)")
    made = make_envs(context.plan, context.workspace, every(context, "env"))
    return f"made {made.engine.parent.parent.name} and {made.router.parent.parent.name}"


_ENGINE_PROBE = (
    "import vllm, sys; print(f'vllm {vllm.__version__}, Python {sys.version.split()[0]}')"
)
_ROUTER_PROBE = "import aiohttp, sys; print(f'router env, Python {sys.version.split()[0]}')"


def _answers(python: Path, probe: str, what: str) -> str:
    if not python.exists():
        raise StackError(
            f"{what} {python} does not exist",
            hint="make it: python -m generator env <stack> (or set process.python / "
            "process.router_python to a Python with the stack's lock)",
        )
    done = subprocess.run(
        [str(python), "-c", probe], capture_output=True, text=True, timeout=300, check=False
    )
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise StackError(
            f"{what} {python} cannot import what it runs:\n{tail}",
            hint="install the stack's lock into it: python -m generator env <stack>",
        )
    return done.stdout.strip()
