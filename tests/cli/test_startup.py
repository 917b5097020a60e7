"""The command line starts quickly: importing it, and `--help` of the app and of each command
that reads the most, load none of the modules a command needs only once it runs. Their
import is deferred to the command bodies (and ``TYPE_CHECKING`` for hints).

Checked by what a fresh interpreter imported, never by a timer (a timed test fails on a busy
machine): `python tests/benchmarks/bench_cli_start.py` prints the seconds."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

# Module prefixes `--help` must not import, and why each is heavy or needless there.
FORBIDDEN = {
    "pydantic": "the spec's models: about a third of a second to import",
    "pydantic_core": "pydantic's core",
    "generator.spec": "pydantic models, read when a command loads a spec",
    "generator.plan": "pydantic models (imported for a type hint once, ~0.35 s)",
    "generator.planner": "imports the spec, the plan and every unit",
    "generator.topologies": "imports the plan",
    "generator.routers": "imports the plan",
    "generator.services": "imports the plan",
    "generator.stack": "imports the spec",
    "generator.workflow": "the run's engine: docker, probes, records",
    "generator.bench": "the benchmark and drills: probes, plots",
    "generator.docker": "python_on_whales",
    "python_on_whales": "Docker's client (pydantic models of its own)",
    "httpx": "the probes' HTTP client",
    "matplotlib": "the bench report's plots (seconds to import)",
    "numpy": "matplotlib's",
    "psutil": "the idle CPU sampler's",
    "yaml": "spec files",
    "jinja2": "render's templates",
    "tenacity": "the probes' waits",
}
# typer 0.29 itself coerces a command's values through pydantic (typer/_coercion.py builds a
# TypeAdapter for its group's --help as soon as a command is named): `python -m generator
# COMMAND ...` imports pydantic whatever we defer. Our own models stay forbidden there.
TYPER_OWN = ("pydantic", "pydantic_core")


def imported_by(*code: str) -> set[str]:
    """Every module a fresh interpreter imported running ``code`` (``-X importtime``: what
    `-c` or `-m` loaded, including while printing help)."""
    env = {**os.environ, "XPYD_ROOT": str(ROOT), "COLUMNS": "100", "NO_COLOR": "1"}
    result = subprocess.run(
        [sys.executable, "-X", "importtime", *code],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("import time:")]
    return {line.rpartition("|")[2].strip() for line in lines[1:]}  # the first: a header


def forbidden_in(modules: set[str], allowed: tuple[str, ...] = ()) -> list[str]:
    return sorted(
        f"{module} ({why})"
        for module in modules
        for prefix, why in FORBIDDEN.items()
        if (module == prefix or module.startswith(f"{prefix}.")) and prefix not in allowed
    )


def test_the_check_sees_a_forbidden_import() -> None:
    modules = imported_by("-c", "import generator.cli, generator.plan")
    assert "generator.plan (pydantic models (imported for a type hint once, ~0.35 s))" in (
        forbidden_in(modules)
    )
    assert "generator.cli.bench_command" in modules


def test_importing_the_cli_loads_nothing_heavy() -> None:
    assert forbidden_in(imported_by("-c", "import generator.cli")) == []


def test_help_loads_nothing_heavy() -> None:
    assert forbidden_in(imported_by("-m", "generator", "--help")) == []


@pytest.mark.parametrize("command", ["bench", "up", "drill", "doctor", "plan"])
def test_a_commands_help_loads_nothing_heavy_of_ours(command: str) -> None:
    modules = imported_by("-m", "generator", command, "--help")
    assert "pydantic" in modules  # typer's (TYPER_OWN): if this fails, forbid it here again
    assert forbidden_in(modules, allowed=TYPER_OWN) == []
