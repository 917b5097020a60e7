"""MkDocs hook: reference/stacks.md, one row per shipped stack (stacks/*.yaml), each loaded and
planned as `validate` does at every build: a stack that stops validating breaks the docs build,
and a new stack appears without anyone editing a page."""

from __future__ import annotations

import sys
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's generator, whichever one the venv installed

PAGE = "reference/stacks.md"

INTRO = """\
# Shipped stacks

Every spec under `stacks/`, as the planner resolves it (router kind and runtime included),
generated when the docs are built. Their rendered Dockerfiles and compose projects are
committed under `images/<stack>/` and `compose/<stack>/`; `python -m generator plan STACK`
shows every engine's GPUs or cores and every port. What each setting means:
[Stacks and specs](../stacks.md) and the [spec reference](spec.md).

| stack | what | topology | profile | runtime | router | engines (TP) | hosts |
|---|---|---|---|---|---|---|---|
"""


def stack_row(path: Path) -> str:
    from generator.planner import make_plan
    from generator.stack import load_spec

    spec = load_spec(path)
    plan = make_plan(spec)
    engines = f"{len(plan.prefill)}P (TP {plan.prefill[0].tp}) + {len(plan.decode)}D"
    engines += f" (TP {plan.decode[0].tp})"
    cells = (
        f"`{path.stem}`",
        spec.description,
        spec.topology.value,
        spec.profile.value,
        plan.runtime.value,
        plan.router.kind,
        engines,
        ", ".join(host.name for host in plan.hosts),
    )
    return "| " + " | ".join(cells) + " |"


def render_stacks_page() -> str:
    rows = [stack_row(path) for path in sorted((ROOT / "stacks").glob("*.yaml"))]
    return INTRO + "\n".join(rows) + "\n"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    files.append(File.generated(config, PAGE, content=render_stacks_page()))
    return files
