"""The docs: the README stays one screen with its two commands and links that resolve, and the
MkDocs site builds strictly (a broken link, anchor or nav entry fails it) with its reference
pages generated from the code."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from generator.spec import Spec
from tests.conftest import ROOT

README = ROOT / "README.md"
README_MAX_BYTES = 12 * 1024
# The README's two commands, each for a fresh machine: the main job, then what CI runs.
README_COMMANDS = [
    "bash .ci/setup && .venv/bin/python -m generator up cpu-1p1d",
    "bash .ci/test",
]
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*(?:\{#([\w-]+)\})?\s*$", re.MULTILINE)


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict`, as a user runs it. Never with -q: mkdocs 1.6 then drops the
    warnings before strict mode counts them, and a broken link builds."""
    pytest.importorskip("mkdocs", reason='mkdocs not installed (pip install -e ".[dev]")')
    command = [sys.executable, "-m", "mkdocs", "build", "--strict"]
    command += ["--config-file", str(config), "--site-dir", str(site)]
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=120, check=False
    )


def heading_anchors(markdown: str) -> set[str]:
    """The anchors MkDocs' toc (and GitHub, for these headings) gives a page's headings."""
    from markdown.extensions.toc import slugify

    anchors = set()
    for text, explicit in _HEADING.findall(markdown):
        plain = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text).replace("`", "")
        anchors.add(explicit or slugify(plain, "-"))
    return anchors


def link_problems(markdown: str, base: Path) -> list[str]:
    """Every relative link of a markdown text whose file, or whose heading, is not there."""
    problems = []
    for target in _LINK.findall(markdown):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path, _, anchor = target.partition("#")
        file = base / path
        if not file.exists():
            problems.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in heading_anchors(file.read_text()):
            problems.append(f"{target}: no heading with that anchor")
    return problems


def test_readme_is_one_screen_with_its_two_commands() -> None:
    text = README.read_text()
    commands = re.findall(r"```bash\n(.*?)\n```", text, re.DOTALL)
    assert len(text.encode()) <= README_MAX_BYTES
    assert commands == README_COMMANDS


def test_readme_links_point_at_files_and_headings() -> None:
    assert link_problems(README.read_text(), ROOT) == []


def test_a_broken_readme_link_is_reported() -> None:
    broken = "[a](docs/nowhere.md) [b](docs/concepts.md#no-such-heading) [c](docs/concepts.md)"
    assert link_problems(broken, ROOT) == [
        "docs/nowhere.md: no such file",
        "docs/concepts.md#no-such-heading: no heading with that anchor",
    ]


def test_readme_lists_every_shipped_stack() -> None:
    section = README.read_text().partition("## Shipped stacks")[2].partition("\n## ")[0]
    listed = set(re.findall(r"^- `([\w-]+)`", section, re.MULTILINE))
    assert listed == {path.stem for path in (ROOT / "stacks").glob("*.yaml")}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    built = tmp_path_factory.mktemp("site")
    result = mkdocs_build(ROOT / "mkdocs.yml", built)
    assert result.returncode == 0, result.stderr + result.stdout
    return built


def test_cli_reference_has_every_command(site: Path) -> None:
    from typer.main import get_command

    from generator.cli import app

    page = (site / "reference" / "cli" / "index.html").read_text()
    commands = list(get_command(app).commands)  # type: ignore[attr-defined]
    assert [name for name in commands if f'id="cmd-{name}"' not in page] == []
    assert "--fault-deadline-s" in page  # an option deep in one command, as --help says it


def test_spec_reference_has_every_key(site: Path) -> None:
    page = (site / "reference" / "spec" / "index.html").read_text()
    assert [key for key in Spec.model_fields if f"<code>{key}</code>" not in page] == []
    assert "<code>stall_s</code>" in page  # a nested model's key, with its description
    assert "leaves rotation for as long again" in page


def test_stacks_reference_has_every_stack(site: Path) -> None:
    page = (site / "reference" / "stacks" / "index.html").read_text()
    stacks = [path.stem for path in (ROOT / "stacks").glob("*.yaml")]
    assert [name for name in stacks if f"<code>{name}</code>" not in page] == []


def _tiny_site(root: Path, index: str, nav: list[str]) -> Path:
    """A one-page site with the real mkdocs.yml's theme, extensions and validation rules."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    config.update(docs_dir="docs", nav=nav)
    for key in ("hooks", "exclude_docs"):
        config.pop(key)
    (root / "docs").mkdir()
    (root / "docs" / "index.md").write_text(index)
    (root / "mkdocs.yml").write_text(yaml.safe_dump(config))
    return root / "mkdocs.yml"


def test_strict_build_fails_on_a_broken_link_anchor_or_nav_entry(tmp_path: Path) -> None:
    index = "# Home\n\n[gone](missing.md) [nowhere](#no-such-heading)\n"
    config = _tiny_site(tmp_path, index, nav=["index.md", "absent.md"])
    result = mkdocs_build(config, tmp_path / "site")
    assert result.returncode == 1
    # Each breakage is one warning, and nothing else is: the tiny site is sound without them.
    assert "Aborted with 3 warnings in strict mode" in result.stdout + result.stderr
    for named in ("'missing.md'", "'#no-such-heading'", "'absent.md'"):
        assert named in result.stderr
