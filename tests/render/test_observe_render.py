"""Rendering with observe: on, the observe files land in the first host's folder and are
listed in its manifest; off, every shipped stack renders exactly as committed (the golden
tests in test_shipped_stacks.py and `render --all --check` hold that)."""

from __future__ import annotations

from pathlib import PurePosixPath

import yaml

from generator.observe.files import OBSERVE_DIR, PROMETHEUS_FILE, RULES_FILE
from generator.paths import Workspace
from generator.planner import make_plan
from generator.render import render_stack
from generator.render.manifest import MANIFEST_NAME
from generator.stack import load_spec
from tests.observe.helpers import OBSERVED


def _rendered(workspace: Workspace, stack: str, *overrides: str) -> dict[PurePosixPath, str]:
    spec = load_spec(workspace.stack_file(stack), overrides)
    return render_stack(make_plan(spec), workspace).files


def test_observe_adds_its_files_and_changes_nothing_else_but_the_plan(
    workspace: Workspace,
) -> None:
    plain = _rendered(workspace, "cpu-1p1d")
    observed = _rendered(workspace, "cpu-1p1d", *OBSERVED)
    folder = PurePosixPath("compose/cpu-1p1d")
    added = set(observed) - set(plain)
    assert added == {folder / PROMETHEUS_FILE, folder / RULES_FILE}
    changed = {path for path in plain if plain[path] != observed[path]}
    assert changed == {folder / "plan.json", folder / MANIFEST_NAME}
    manifest = observed[folder / MANIFEST_NAME]
    assert str(PROMETHEUS_FILE) in manifest
    assert str(RULES_FILE) in manifest
    for path in added:
        assert yaml.safe_load(observed[path])


def test_a_multi_host_stack_renders_observe_into_its_first_host_s_folder(
    workspace: Workspace,
) -> None:
    files = _rendered(workspace, "xpyd-mp-2host", *OBSERVED)
    observe = {path for path in files if OBSERVE_DIR.name in path.parts}
    assert observe == {
        PurePosixPath("compose/xpyd-mp-2host/gpu-a") / PROMETHEUS_FILE,
        PurePosixPath("compose/xpyd-mp-2host/gpu-a") / RULES_FILE,
    }
