"""`down` of a stack whose process run is still on record while compose/ holds its container
render (an `up --runtime process --set ...` whose render was put back since): the compose render
cannot end those processes, so `down` names the state file and how to end them."""

from __future__ import annotations

from pathlib import Path

from generator.paths import Workspace
from generator.serializers.process import state_dir
from generator.workbench import load_plan, write_stacks
from generator.workflow.runtimes import stray_process_runs


def _rendered(tmp_path: Path, *overrides: str) -> Workspace:
    write_stacks([load_plan("cpu-1p1d", list(overrides))], out=tmp_path)
    return Workspace(tmp_path)


def test_a_process_run_on_record_under_a_container_render_is_named(tmp_path: Path) -> None:
    workspace = _rendered(tmp_path)
    assert stray_process_runs("cpu-1p1d", workspace) == []
    record = tmp_path / state_dir("xpyd-cpu-1p1d") / "state.json"
    record.parent.mkdir(parents=True)
    record.write_text("{}")
    assert stray_process_runs("cpu-1p1d", workspace) == [".cache/process/xpyd-cpu-1p1d/state.json"]


def test_a_process_render_reads_its_own_records(tmp_path: Path) -> None:
    workspace = _rendered(tmp_path, "runtime=process")
    record = tmp_path / state_dir("xpyd-cpu-1p1d") / "state.json"
    record.parent.mkdir(parents=True)
    record.write_text("{}")
    assert stray_process_runs("cpu-1p1d", workspace) == []  # its own down ends them
