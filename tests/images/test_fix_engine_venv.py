"""images/assets/fix_engine_venv.py on fake site-packages folders: the vllm alias, and NIXL's
patch (made once, kept when run again, refused when NIXL's line changed, made where Python
imports each variant from). The real NIXL is
patched in every cpu image build, whose check measures the idle thread (test_check_engine_image)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.tools import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "images/assets/fix_engine_venv.py"
UPSTREAM = "class A:\n    def __init__(self):\n        agent_config.pthrDelay = 0\n        more()\n"


@pytest.fixture(scope="module")
def fix() -> ModuleType:
    return load_script(SCRIPT)


def nixl(site: Path, text: str, variant: str = "nixl_cu12") -> Path:
    (site / variant).mkdir(parents=True)
    api = site / variant / "_api.py"
    api.write_text(text)
    return api


def test_the_delay_is_read_from_the_environment_once(fix: ModuleType, tmp_path: Path) -> None:
    api = nixl(tmp_path, UPSTREAM)
    fix.patch_nixl_delay([tmp_path], "XPYD_NIXL_PTHR_DELAY_US")
    patched = api.read_text()
    assert (
        'pthrDelay = int(__import__("os").environ.get("XPYD_NIXL_PTHR_DELAY_US", "0"))' in patched
    )
    assert "pthrDelay = 0\n" not in patched
    fix.patch_nixl_delay([tmp_path], "XPYD_NIXL_PTHR_DELAY_US")  # again: nothing changes
    assert api.read_text() == patched
    compile(patched, str(api), "exec")  # still Python


def test_a_nixl_that_changed_the_line_is_refused(fix: ModuleType, tmp_path: Path) -> None:
    nixl(tmp_path, UPSTREAM.replace("pthrDelay = 0", "pthrDelay = config.delay"))
    with pytest.raises(SystemExit, match="no longer hard-codes pthrDelay = 0"):
        fix.patch_nixl_delay([tmp_path], "X")


def test_the_vllm_alias_names_the_cpu_build(fix: ModuleType, tmp_path: Path) -> None:
    alias = fix.add_vllm_alias(tmp_path, "0.32.0")
    assert (alias / "METADATA").read_text() == (
        "Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\n"
    )
    assert alias.name == "vllm-0.32.0.dist-info"


def test_each_variant_is_patched_where_python_imports_it(fix: ModuleType, tmp_path: Path) -> None:
    venv, system = tmp_path / "venv", tmp_path / "system"
    imported = nixl(venv, UPSTREAM, "nixl_cu13")
    shadowed = nixl(system, UPSTREAM, "nixl_cu13")
    only_system = nixl(system, UPSTREAM, "nixl_cu12")
    patched, left = fix.patch_nixl_delay([tmp_path / "absent", venv, system], "D")
    assert (patched, left) == ([imported, only_system], [])
    assert "pthrDelay = 0\n" in shadowed.read_text()
    assert "pthrDelay = 0\n" not in imported.read_text()


def test_no_nixl_on_the_path_is_an_error(fix: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no nixl_cu"):
        fix.patch_nixl_delay([tmp_path], "D")


def test_a_venv_only_patch_leaves_the_hosts_own_nixl_alone(fix: ModuleType, tmp_path: Path) -> None:
    """A GPU venv over the system's site-packages may import the host's NIXL: the process
    runtime's env patches only what lies in the venv."""
    venv, system = tmp_path / "venv", tmp_path / "system"
    ours = nixl(venv, UPSTREAM, "nixl_cu13")
    theirs = nixl(system, UPSTREAM, "nixl_cu12")
    patched, left = fix.patch_nixl_delay([venv, system], "D", inside=venv)
    assert (patched, left) == ([ours], [theirs])
    assert theirs.read_text() == UPSTREAM


def test_a_linked_api_file_is_not_written_through(fix: ModuleType, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.py"
    target.write_text(UPSTREAM)
    (tmp_path / "site" / "nixl_cu12").mkdir(parents=True)
    (tmp_path / "site" / "nixl_cu12" / "_api.py").symlink_to(target)
    with pytest.raises(SystemExit, match="is a link"):
        fix.patch_nixl_delay([tmp_path / "site"], "D")
    assert target.read_text() == UPSTREAM
