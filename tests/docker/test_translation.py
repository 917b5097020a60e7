"""Docker failures reach users as a DockerError with a hint: every python-on-whales call runs
inside ``translated`` (or handles DockerException itself), every ``translated`` names what to
do, and a hung engine's TimeoutExpired is translated too."""

from __future__ import annotations

import ast
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from generator.docker.compose import OneOff
from generator.docker.endpoint import LOCAL, translated
from generator.docker.engine import engine_facts
from generator.errors import DockerError

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "generator" / "docker"


def _trees() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted((ROOT / "generator").rglob("*.py")):
        yield str(path.relative_to(ROOT)), ast.parse(path.read_text(encoding="utf-8"))


def _is_translated(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "translated"
    )


def _hint_of(call: ast.Call) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == "hint"), None)


def _empty(value: ast.expr | None) -> bool:
    return value is None or (isinstance(value, ast.Constant) and not value.value)


def test_every_translated_call_gives_a_hint() -> None:
    calls = [node for _, tree in _trees() for node in ast.walk(tree) if _is_translated(node)]
    assert len(calls) >= 15  # the check sees the calls it holds to a hint
    missing = [
        (name, node.lineno)
        for name, tree in _trees()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and _is_translated(node) and _empty(_hint_of(node))
    ]
    assert missing == []


def _whales_calls(tree: ast.Module) -> Iterator[ast.Call]:
    """Calls of a python-on-whales client: ``client(...).x.y(...)``, ``self._client.x(...)``,
    ``engine.x(...)`` where ``engine = client(...)``."""
    clients = {"engine", "_client"}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        root: ast.expr = node.func
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Call) and isinstance(root.func, ast.Name):
            if root.func.id == "client":
                yield node
        elif isinstance(root, ast.Name) and root.id in clients | {"self"}:
            chain = ast.unparse(node.func)
            if root.id != "self" or chain.startswith("self._client."):
                yield node


def _guarded(tree: ast.Module, call: ast.Call) -> bool:
    """Inside ``with translated(...)`` or a ``try`` that catches DockerException."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.With | ast.Try):
            continue
        if not any(call in ast.walk(child) for child in node.body):
            continue
        if isinstance(node, ast.With) and any(_is_translated(i.context_expr) for i in node.items):
            return True
        if isinstance(node, ast.Try) and any(
            "DockerException" in ast.unparse(h.type) for h in node.handlers if h.type is not None
        ):
            return True
    return False


def test_every_python_on_whales_call_is_translated() -> None:
    seen, bare = 0, []
    for path in sorted(DOCKER.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for call in _whales_calls(tree):
            seen += 1
            if not _guarded(tree, call):
                bare.append(f"{path.name}:{call.lineno}: {ast.unparse(call)[:60]}")
    assert seen >= 15
    assert bare == []


def test_the_guard_check_finds_a_bare_call() -> None:
    tree = ast.parse("def f():\n    engine = client(LOCAL)\n    return engine.image.exists('x')\n")
    calls = list(_whales_calls(tree))
    assert len(calls) == 1
    assert not _guarded(tree, calls[0])


def test_translated_keeps_what_docker_printed_and_the_hint() -> None:
    # the adapter's input: what python-on-whales raises
    from python_on_whales.exceptions import DockerException  # noqa: TID251

    with pytest.raises(DockerError) as caught, translated("removing x", hint="docker rm -f x"):
        raise DockerException(["docker", "rm", "x"], 1, b"", b"Error: No such container: x")
    assert caught.value.message == "removing x failed: Error: No such container: x"
    assert caught.value.hint == "docker rm -f x"


@pytest.fixture
def hung_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in for a hung engine (no Docker here): a `docker` on PATH that never answers."""
    fake = tmp_path / "docker"
    fake.write_text("#!/bin/sh\nexec sleep 30\n", encoding="utf-8")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


@pytest.mark.usefixtures("hung_docker")
def test_a_hung_engine_is_a_docker_error_in_engine_facts() -> None:
    with pytest.raises(DockerError, match=r"did not answer within 0.5 s") as caught:
        engine_facts(LOCAL, timeout_s=0.5)
    assert caught.value.hint == "check that `docker info` answers within a few seconds"
    assert caught.value.command[:2] == ["docker", "info"]


@pytest.mark.usefixtures("hung_docker")
def test_a_hung_engine_is_a_docker_error_when_reading_a_one_offs_output() -> None:
    with pytest.raises(DockerError, match=r"`docker logs bench-1`.*did not answer") as caught:
        OneOff("bench-1").output(timeout_s=0.5)
    assert "docker logs bench-1" in caught.value.hint
