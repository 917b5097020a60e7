"""The GPU engine lock: images/locks/engine-gpu.txt, every package of the GPU engine image
pinned with hashes, resolved by uv for the vllm/vllm-openai image's platform (no GPU needed).

The pins come from ``versions.yaml`` only: this module writes the lock's input file
(engine-gpu.in) from them, then resolves it. ``--check`` (what CI runs) resolves again into a
temporary file and fails when the inputs conflict or the result differs from the committed lock.

    python -m generator.locks           re-resolve and rewrite engine-gpu.in / engine-gpu.txt
    python -m generator.locks --check   fail if a fresh resolve differs from the committed lock
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from generator.errors import DriftError, XpydError
from generator.paths import Workspace, find_workspace
from generator.render.images import GPU_ENGINE_LOCK
from generator.versions import Versions, load_versions

__all__ = [
    "GPU_LOCK_INPUT",
    "LockedPin",
    "check_gpu_lock",
    "gpu_lock_input",
    "parse_lock",
    "resolve_gpu_lock",
]

GPU_LOCK_INPUT = "images/locks/engine-gpu.in"
_COMMAND = "python -m generator.locks"
_RESOLVE_TIMEOUT_S = 600
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")
_HASH = re.compile(r"--hash=(sha256:[0-9a-f]{64})")


@dataclass(frozen=True)
class LockedPin:
    version: str
    hashes: frozenset[str]


def gpu_lock_input(versions: Versions) -> str:
    """The text of engine-gpu.in: the image's direct requirements, pinned from versions.yaml."""
    pins, engine = versions.packages, versions.gpu_engine
    others = ", ".join(engine.other_nixl_variants)
    module = engine.nixl_variant.replace("-", "_")
    return f"""\
# Written by `{_COMMAND}` from generator/versions.yaml: do not edit, re-resolve.
# Direct requirements of the GPU engine image, resolved into engine-gpu.txt (with hashes) for
# what vllm/vllm-openai:v{pins.vllm} runs: CPython {engine.python}, {engine.uv_platform},
# CUDA {engine.cuda_major}. The image installs the lock with --no-deps --require-hashes.
vllm=={pins.vllm}
lmcache=={pins.lmcache}
# NIXL for CUDA {engine.cuda_major} only: the compiled `{module}` package.
{engine.nixl_variant}=={pins.nixl}
# The `nixl` meta package provides the `nixl` module that vLLM (distributed/nixl_utils.py) and
# LMCache (`from nixl._api import ...`) import; it picks the nixl_cu<major> module matching
# torch's CUDA at import time. Nothing requires it (LMCache only in its `nixl` extra), but
# without it both fall back silently ("NIXL is not available"). Its metadata requires every
# CUDA variant unconditionally, so the resolve excludes {others} (uv --excludes) and the
# image's build check allows exactly that one missing requirement in `pip check`.
nixl=={pins.nixl}
"""


def resolve_gpu_lock(
    workspace: Workspace,
    output: Path,
    *,
    versions: Versions | None = None,
    extra_requirements: Sequence[str] = (),
) -> None:
    """Resolve engine-gpu.in (plus ``extra_requirements``, for experiments) into ``output``,
    from scratch (uv keeps the pins of an existing output file, which would let a rewrite
    differ from the check's fresh resolve); ``output`` is replaced only by a complete lock."""
    versions = versions or load_versions()
    engine = versions.gpu_engine
    with tempfile.TemporaryDirectory(prefix="xpyd-lock-") as folder:
        fresh = Path(folder) / "engine-gpu.txt"
        requirements = Path(folder) / "engine-gpu.in"
        text = (workspace.root / GPU_LOCK_INPUT).read_text(encoding="utf-8")
        requirements.write_text(text + "".join(f"{r}\n" for r in extra_requirements))
        excludes = Path(folder) / "excludes.txt"
        excludes.write_text("".join(f"{name}\n" for name in engine.other_nixl_variants))
        command = [_uv(), "pip", "compile", str(requirements), "--excludes", str(excludes)]
        command += ["--python-version", engine.python, "--python-platform", engine.uv_platform]
        command += ["--exclude-newer", engine.exclude_newer]
        # Wheels only: the image never builds a package, and the air-gapped wheelhouse can
        # hold only wheels.
        command += ["--only-binary", ":all:", "--generate-hashes", "--quiet"]
        command += ["--custom-compile-command", _COMMAND, "--output-file", str(fresh)]
        _run_uv(command)
        # uv writes the temporary input's path into the annotations: name the committed one.
        lock = fresh.read_text(encoding="utf-8").replace(str(requirements), GPU_LOCK_INPUT)
    output.write_text(lock, encoding="utf-8")


def _uv() -> str:
    # pyproject pins uv next to this interpreter; PATH is the fallback.
    beside = Path(sys.executable).parent / "uv"
    found = str(beside) if beside.is_file() else shutil.which("uv")
    if found is None:
        raise XpydError("uv not found", hint="pip install -e . (it pins uv)")
    return found


def _run_uv(command: list[str]) -> None:
    # No interpreter download: uv resolves for the target Python from metadata alone.
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
    try:
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env=env,
            timeout=_RESOLVE_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise XpydError(
            f"uv did not resolve the GPU lock in {_RESOLVE_TIMEOUT_S} s",
            hint="check the network/proxy (uv reads PyPI; SSL_CERT_FILE for a proxy CA)",
        ) from exc
    if result.returncode != 0:
        raise XpydError(
            f"uv could not resolve the GPU engine lock:\n{result.stderr.strip()}",
            hint="fix the pins in generator/versions.yaml (or the inputs in generator/locks.py)",
        )


def parse_lock(text: str) -> dict[str, LockedPin]:
    """``name -> (version, hashes)`` of a requirements file written with --generate-hashes."""
    pins: dict[str, LockedPin] = {}
    for entry in re.split(r"\n(?=[A-Za-z0-9])", text):
        match = _PIN.match(entry)
        if match:
            pins[_normalized(match.group(1))] = LockedPin(
                match.group(2), frozenset(_HASH.findall(entry))
            )
    return pins


def check_gpu_lock(
    workspace: Workspace, *, versions: Versions | None = None, strict: bool = True
) -> str:
    """Resolve again and compare with the committed input and lock (DriftError if they differ).

    Not ``strict``: only the direct requirements (engine-gpu.in's pins) must match; transitive
    pins that PyPI moved since are reported, not raised. PyPI's index is not frozen (packages
    published before the lock's exclude-newer date can still appear), so the strict check
    belongs to whoever re-locks, not to every test run."""
    versions = versions or load_versions()
    committed_input = (workspace.root / GPU_LOCK_INPUT).read_text(encoding="utf-8")
    if committed_input != gpu_lock_input(versions):
        raise DriftError(
            f"{GPU_LOCK_INPUT} does not match generator/versions.yaml",
            hint=f"run `{_COMMAND}` and commit the result",
        )
    with tempfile.TemporaryDirectory(prefix="xpyd-lock-") as folder:
        fresh_path = Path(folder) / "engine-gpu.txt"
        resolve_gpu_lock(workspace, fresh_path, versions=versions)
        fresh = parse_lock(fresh_path.read_text(encoding="utf-8"))
    committed = parse_lock((workspace.root / GPU_ENGINE_LOCK).read_text(encoding="utf-8"))
    differences = _differences(committed, fresh)
    direct = _requirement_names(committed_input)
    binding = differences if strict else [d for d in differences if _name_of(d) in direct]
    if binding:
        shown = "\n".join(f"  {line}" for line in binding[:20])
        raise DriftError(
            f"{GPU_ENGINE_LOCK} differs from a fresh resolve ({len(binding)} packages):\n{shown}",
            hint=f"run `{_COMMAND}`, review the diff and commit it",
        )
    if differences:
        moved = ", ".join(differences[:5]) + (", ..." if len(differences) > 5 else "")
        return (
            f"{GPU_ENGINE_LOCK}: {len(committed)} pins, direct ones as a fresh resolve; "
            f"{len(differences)} transitive pins moved on PyPI since ({moved}): "
            f"`{_COMMAND}` follows them"
        )
    return f"{GPU_ENGINE_LOCK}: {len(committed)} pins, as a fresh resolve"


def _requirement_names(requirements: str) -> frozenset[str]:
    """The normalized names pinned in a requirements input (comments skipped)."""
    pins = (_PIN.match(line.strip()) for line in requirements.splitlines())
    return frozenset(_normalized(match.group(1)) for match in pins if match)


def _name_of(difference: str) -> str:
    # _differences' lines start with the name: "x: 1 -> 2", "x: added", "x 1.0: hashes differ".
    return re.split(r"[: ]", difference, maxsplit=1)[0]


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _differences(committed: dict[str, LockedPin], fresh: dict[str, LockedPin]) -> list[str]:
    lines = []
    for name in sorted(committed.keys() | fresh.keys()):
        old, new = committed.get(name), fresh.get(name)
        if old is None or new is None:
            lines.append(f"{name}: {'added' if old is None else 'removed'}")
        elif old.version != new.version:
            lines.append(f"{name}: {old.version} -> {new.version}")
        elif old.hashes != new.hashes:
            # Same version, other files: PyPI got a new wheel (or one was yanked/replaced).
            lines.append(f"{name} {old.version}: hashes differ")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=_COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    arguments = parser.parse_args(argv)
    workspace = find_workspace()
    try:
        if arguments.check:
            print(check_gpu_lock(workspace))
            return 0
        (workspace.root / GPU_LOCK_INPUT).write_text(gpu_lock_input(load_versions()))
        resolve_gpu_lock(workspace, workspace.root / GPU_ENGINE_LOCK)
    except XpydError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {GPU_LOCK_INPUT} and {GPU_ENGINE_LOCK}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
