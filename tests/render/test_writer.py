"""Rendering is all-or-nothing, deletes only what it wrote (its manifest), refuses to write
over files it did not write, and drift is reported per file."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path, PurePosixPath

import pytest

from generator.errors import RenderError, SpecError
from generator.paths import RESERVED_IMAGE_DIRS, Workspace
from generator.planner import make_plan
from generator.render import RenderedStack, render_stack
from generator.render.manifest import MANIFEST_NAME
from generator.render.writer import diff_rendered, write_all, write_rendered
from generator.stack import load_spec
from tests.conftest import spec_dict
from tests.tools import run_cli

ROOT = Path(__file__).resolve().parents[2]


def cpu_stack(workspace: Workspace, *overrides: str) -> RenderedStack:
    spec = load_spec(workspace.stack_file("cpu-1p1d"), overrides)
    return render_stack(make_plan(spec), workspace)


def with_files(rendered: RenderedStack, extra: dict[str, str]) -> RenderedStack:
    """The same stack with more files, as an older render with more hosts would have."""
    files = {**rendered.files, **{PurePosixPath(k): v for k, v in extra.items()}}
    folder = PurePosixPath("compose/cpu-1p1d")
    listed = sorted(str(p.relative_to(folder)) for p in files if folder in p.parents)
    listed.remove(MANIFEST_NAME)
    manifest = {"stack": rendered.stack, "files": listed}
    files[folder / MANIFEST_NAME] = json.dumps(manifest)
    return replace(rendered, files=files)


def test_write_then_no_drift_then_stale_and_changed_files_are_drift(
    workspace: Workspace, tmp_path: Path
) -> None:
    rendered = cpu_stack(workspace)
    written = write_rendered(rendered, tmp_path)
    assert tmp_path / "compose/cpu-1p1d/compose.yaml" in written
    assert tmp_path / f"compose/cpu-1p1d/{MANIFEST_NAME}" in written
    assert diff_rendered(rendered, tmp_path) == []
    write_rendered(
        with_files(rendered, {"compose/cpu-1p1d/old-host/compose.yaml": "{}\n"}), tmp_path
    )
    (tmp_path / "images/cpu-1p1d/router.Dockerfile").write_text("FROM scratch\n")
    problems = diff_rendered(rendered, tmp_path)
    assert problems[0] == "compose/cpu-1p1d/old-host/compose.yaml: not rendered any more (stale)"
    assert problems[1].startswith(f"compose/cpu-1p1d/{MANIFEST_NAME}: differs\n")
    assert problems[2].startswith("images/cpu-1p1d/router.Dockerfile: differs\n--- committed/")


def test_rewrite_removes_stale_rendered_files_and_keeps_the_users(
    workspace: Workspace, tmp_path: Path
) -> None:
    rendered = cpu_stack(workspace)
    write_rendered(
        with_files(rendered, {"compose/cpu-1p1d/old-host/compose.yaml": "{}\n"}), tmp_path
    )
    folder = tmp_path / "compose/cpu-1p1d"
    users = {".env": "HF_TOKEN_FILE=x\n", "compose.override.yaml": "services: {}\n"}
    for name, text in users.items():
        (folder / name).write_text(text)
    (tmp_path / "images/cpu-1p1d/notes.txt").write_text("mine\n")
    write_rendered(rendered, tmp_path)
    assert not (folder / "old-host").exists()  # stale file and its emptied folder
    for name, text in users.items():
        assert (folder / name).read_text() == text
    assert (tmp_path / "images/cpu-1p1d/notes.txt").read_text() == "mine\n"
    assert diff_rendered(rendered, tmp_path) == []  # user files are not drift
    assert sorted(p.name for p in tmp_path.iterdir()) == ["compose", "images"]
    assert not any(p.name.startswith(".") for p in (tmp_path / "compose").iterdir())


def test_up_style_rerender_keeps_env_beside_compose(tmp_path: Path) -> None:
    """`render` as a user runs it, twice, with a .env in between (what `up` does first)."""
    assert run_cli("render", "cpu-1p1d", "--out", str(tmp_path), root=ROOT).returncode == 0
    env = tmp_path / "compose/cpu-1p1d/.env"
    env.write_text("COMPOSE_PROFILES=bench\n")
    result = run_cli("render", "cpu-1p1d", "--out", str(tmp_path), root=ROOT)
    assert result.returncode == 0, result.stderr
    assert env.read_text() == "COMPOSE_PROFILES=bench\n"


def test_refuses_to_overwrite_a_file_it_did_not_write(workspace: Workspace, tmp_path: Path) -> None:
    rendered = cpu_stack(workspace)
    write_rendered(rendered, tmp_path)
    bigger = with_files(rendered, {"compose/cpu-1p1d/notes.yaml": "rendered: true\n"})
    users = tmp_path / "compose/cpu-1p1d/notes.yaml"
    users.write_text("mine: true\n")
    with pytest.raises(RenderError, match="render would overwrite files it did not write"):
        write_rendered(bigger, tmp_path)
    assert users.read_text() == "mine: true\n"


def test_a_folder_in_the_way_or_a_linked_subfolder_is_refused(
    workspace: Workspace, tmp_path: Path
) -> None:
    rendered = cpu_stack(workspace)
    (tmp_path / "compose").mkdir()
    (tmp_path / "compose/cpu-1p1d").write_text("a file where the folder goes\n")
    with pytest.raises(RenderError, match="is in the way"):
        write_rendered(rendered, tmp_path)
    (tmp_path / "compose/cpu-1p1d").unlink()
    (tmp_path / "compose/cpu-1p1d").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "compose/cpu-1p1d/lmcache").symlink_to(outside)
    pd = render_stack(make_plan(load_spec(workspace.stack_file("cpu-lmcache-pd"))), workspace)
    pd = replace(
        pd,
        stack="cpu-1p1d",
        files={
            PurePosixPath(str(p).replace("cpu-lmcache-pd", "cpu-1p1d")): t
            for p, t in pd.files.items()
        },
        owned_dirs=(PurePosixPath("compose/cpu-1p1d"), PurePosixPath("images/cpu-1p1d")),
    )
    with pytest.raises(RenderError, match="lmcache is not a plain folder"):
        write_rendered(pd, tmp_path)
    assert list(outside.iterdir()) == []


def test_a_manifest_never_sends_a_delete_outside_its_folder(
    workspace: Workspace, tmp_path: Path
) -> None:
    rendered = cpu_stack(workspace)
    write_rendered(rendered, tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    manifest = tmp_path / "compose/cpu-1p1d" / MANIFEST_NAME
    manifest.write_text(json.dumps({"files": ["../../victim.txt", "compose.yaml"]}))
    with pytest.raises(RenderError, match="is not a manifest render can trust"):
        write_rendered(rendered, tmp_path)
    assert victim.read_text() == "keep me\n"
    manifest.write_text(json.dumps({"files": "compose.yaml"}))
    with pytest.raises(RenderError, match="'files' is not a list"):
        write_rendered(rendered, tmp_path)


def test_a_folder_from_before_manifests_is_adopted(workspace: Workspace, tmp_path: Path) -> None:
    rendered = cpu_stack(workspace)
    old = cpu_stack(workspace, "decode.extra_args=['--seed', '1']")
    write_rendered(old, tmp_path)
    for folder in rendered.owned_dirs:
        (tmp_path / folder / MANIFEST_NAME).unlink()
    (tmp_path / "compose/cpu-1p1d/mine.yaml").write_text("x: 1\n")
    write_rendered(rendered, tmp_path)
    assert diff_rendered(rendered, tmp_path) == []
    assert (tmp_path / "compose/cpu-1p1d/mine.yaml").exists()


def test_failure_while_staging_writes_nothing(workspace: Workspace, tmp_path: Path) -> None:
    good = cpu_stack(workspace)
    write_rendered(good, tmp_path)
    before = (tmp_path / "compose/cpu-1p1d/compose.yaml").read_text()
    # The second owned folder cannot be staged: a file sits where its parent must be.
    (tmp_path / "images").rename(tmp_path / "images-moved")
    (tmp_path / "images").write_text("not a folder")
    changed = {PurePosixPath("compose/cpu-1p1d/compose.yaml"): "changed: true\n"}
    broken = replace(good, files={**good.files, **changed})
    with pytest.raises(RenderError, match="could not write cpu-1p1d"):
        write_rendered(broken, tmp_path)
    assert (tmp_path / "compose/cpu-1p1d/compose.yaml").read_text() == before
    assert [p.name for p in (tmp_path / "compose").iterdir()] == ["cpu-1p1d"]


def test_several_stacks_are_written_all_or_nothing(workspace: Workspace, tmp_path: Path) -> None:
    first = cpu_stack(workspace)
    second = render_stack(make_plan(load_spec(workspace.stack_file("xpyd"))), workspace)
    (tmp_path / "images").mkdir()
    (tmp_path / "images/xpyd").write_text("in the way\n")
    with pytest.raises(RenderError):
        write_all([first, second], tmp_path)
    assert not (tmp_path / "compose").exists()
    assert not (tmp_path / "images/cpu-1p1d").exists()


def test_two_specs_with_one_name_are_refused(workspace: Workspace, tmp_path: Path) -> None:
    first = cpu_stack(workspace)
    other = cpu_stack(workspace, "decode.extra_args=['--seed', '1']")
    with pytest.raises(RenderError, match="two of the specs given are named 'cpu-1p1d'"):
        write_all([first, other], tmp_path)
    assert write_all([first, first], tmp_path)  # the same stack twice: written once


def test_cli_render_of_several_stacks_writes_none_when_one_is_invalid(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ntopology: nixl-mp\n")  # no model
    out = tmp_path / "out"
    result = run_cli("render", "cpu-1p1d", str(bad), "--out", str(out), root=ROOT)
    assert result.returncode == 1
    assert "model: is required" in result.stderr
    assert not out.exists()


@pytest.mark.parametrize("name", RESERVED_IMAGE_DIRS)
def test_a_stack_named_like_the_tools_own_folders_is_refused(
    name: str, workspace: Workspace, tmp_path: Path
) -> None:
    from generator.stack import parse_spec

    with pytest.raises(SpecError, match=f"name: '{name}' is the name of the tool's own folder"):
        parse_spec(spec_dict(name=name), source="t")
    rendered = cpu_stack(workspace)
    renamed = replace(rendered, owned_dirs=(PurePosixPath(f"images/{name}"),))
    with pytest.raises(RenderError, match=f"images/{name}/ is the tool's own folder"):
        write_rendered(renamed, tmp_path)


@pytest.mark.parametrize("linked", ["compose", "compose/cpu-1p1d", "images/cpu-1p1d"])
def test_a_link_on_the_way_to_a_stack_folder_is_refused_and_its_target_untouched(
    workspace: Workspace, tmp_path: Path, linked: str
) -> None:
    rendered = cpu_stack(workspace)
    out = tmp_path / "out"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("the link target's own file\n")
    (out / linked).parent.mkdir(parents=True)
    (out / linked).symlink_to(outside)
    with pytest.raises(RenderError, match="is a symbolic link") as caught:
        write_rendered(rendered, out)
    assert str(out / linked) in caught.value.message
    assert sorted(p.name for p in outside.iterdir()) == ["keep.txt"]


def test_an_output_folder_that_is_a_link_is_the_users_choice(
    workspace: Workspace, tmp_path: Path
) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "out").symlink_to(real)
    write_rendered(cpu_stack(workspace), tmp_path / "out")
    assert (real / "compose/cpu-1p1d/compose.yaml").is_file()


def test_a_stale_file_below_a_linked_folder_is_never_deleted(
    workspace: Workspace, tmp_path: Path
) -> None:
    rendered = cpu_stack(workspace)
    write_rendered(
        with_files(rendered, {"compose/cpu-1p1d/old-host/compose.yaml": "{}\n"}), tmp_path
    )
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "compose.yaml").write_text("someone else's\n")
    old_host = tmp_path / "compose/cpu-1p1d/old-host"
    (old_host / "compose.yaml").unlink()
    old_host.rmdir()
    old_host.symlink_to(outside)
    with pytest.raises(RenderError, match="old-host is not a plain folder"):
        write_rendered(rendered, tmp_path)
    assert (outside / "compose.yaml").read_text() == "someone else's\n"


@pytest.mark.parametrize("linked", ["compose/cpu-1p1d", "compose/cpu-1p1d/compose.yaml"])
def test_check_reports_links_even_to_identical_files(
    workspace: Workspace, tmp_path: Path, linked: str
) -> None:
    """`render --check` reads no file through a link: render would refuse (a folder) or
    replace (a file) it, so a link to a copy of the right content is drift all the same."""
    rendered = cpu_stack(workspace)
    write_rendered(rendered, tmp_path)
    place = tmp_path / linked
    copy = tmp_path / "elsewhere"
    place.rename(copy)
    place.symlink_to(copy)
    problems = diff_rendered(rendered, tmp_path)
    assert problems
    assert all(f"{linked} is a symbolic link, not rendered output" in p for p in problems)
