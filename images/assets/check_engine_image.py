"""Build-time checks of an xpyd engine image, run inside it right after its packages are
installed, so that a broken image fails while building, not while serving.

vLLM and LMCache degrade silently when a piece is missing (vLLM logs "NIXL is not available",
LMCache stays on its torch baseline without its CUDA ops), so each piece is imported here:

- ``pip check``, where only ``--allow-missing DIST:REQ`` gaps (a requirement not installed on
  purpose) are accepted; version conflicts never are;
- ``nixl._api`` (what vLLM and LMCache import) and NIXL's UCX plugin, listed by an agent made
  without any backend (no transfer, no network, no GPU);
- each ``--connector`` loads through vLLM's KV connector factory;
- with ``--nixl-idle-delay-us N``: a NIXL agent with the UCX backend and its progress thread, as
  vLLM makes it, uses (almost) no CPU while idle once ``XPYD_NIXL_PTHR_DELAY_US`` is N (the cpu
  image patches NIXL's hard-coded zero poll timeout; unpatched, the thread spins a core);
- with ``--amx-permission``: a process spawned the way vLLM spawns its workers may use AMX tile
  data where the CPU has AMX (the cpu venv's ``xpyd_cpu_features`` .pth asks for it; vLLM's AMX
  attention kernel dies of SIGILL without it), and says "no AMX" elsewhere;
- with ``--cuda-major N``: torch is a CUDA N build, NIXL's only variant is nixl-cuN, and
  ``lmcache.cuda_ops`` imports. Importing it needs libcudart (in the image), not the driver's
  libcuda, so this works in ``docker build``, which has no GPU.

Runs inside the image, where xpyd-stacks is not installed: it imports only the standard library
and the image's own packages. Prints one line per check; each failure is one line on stderr,
and the exit status is 1 if any check failed.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import multiprocessing
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

_NOT_INSTALLED = re.compile(r"^(\S+) \S+ requires (\S+), which is not installed\.$")
_NIXL_VARIANT = re.compile(r"^nixl-cu(\d+)$")
NIXL_DELAY_ENV = "XPYD_NIXL_PTHR_DELAY_US"  # read by the cpu image's patched nixl_cu12/_api.py
_IDLE_CPU_SHARE = 0.2  # of one core; an unpatched progress thread takes all it gets


class CheckFailedError(Exception):
    """One check failed; the message is the one line a build log shows."""


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def unexpected_pip_problems(output: str, allowed: set[tuple[str, str]]) -> list[str]:
    """The lines of ``pip check``'s output that are not an allowed missing requirement."""
    problems = []
    for line in output.splitlines():
        match = _NOT_INSTALLED.match(line.strip())
        if match and (normalized(match[1]), normalized(match[2])) in allowed:
            continue
        if line.strip() and line.strip() != "No broken requirements found.":
            problems.append(line.strip().rstrip("."))
    return problems


def check_pip(allowed: set[tuple[str, str]]) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "pip", "check"], capture_output=True, text=True, check=False
    )
    # pip check writes its findings to stdout; stderr only carries pip's own warnings.
    problems = unexpected_pip_problems(result.stdout, allowed)
    if result.returncode != 0 and not result.stdout.strip():
        problems = [result.stderr.strip() or f"exit status {result.returncode}"]
    if problems:
        raise CheckFailedError(f"pip check: {'; '.join(problems)}")
    return f"pip check: consistent ({len(allowed)} gaps allowed on purpose)"


def check_nixl(cuda_major: int | None) -> str:
    try:
        api = importlib.import_module("nixl._api")
    except ImportError as exc:
        raise CheckFailedError(f"NIXL: `import nixl._api` failed: {exc}") from exc
    # The meta package hands out the compiled module of one variant (nixl_cuNN._api).
    if cuda_major is not None and not api.__name__.startswith(f"nixl_cu{cuda_major}."):
        raise CheckFailedError(f"NIXL: nixl._api is {api.__name__}, not nixl_cu{cuda_major}'s")
    # No backend, no progress thread: the agent only discovers its plugins.
    config = api.nixl_agent_config(enable_prog_thread=False, backends=[])
    try:
        plugins = list(api.nixl_agent("xpyd-build-check", config).get_plugin_list())
    except Exception as exc:  # NIXL raises RuntimeError and its own nixlBind errors
        raise CheckFailedError(f"NIXL: an agent fails: {type(exc).__name__}: {exc}") from exc
    if "UCX" not in plugins:
        raise CheckFailedError(f"NIXL: no UCX plugin (plugins found: {sorted(plugins)})")
    return f"NIXL: {api.__name__} lists the UCX plugin ({len(plugins)} plugins)"


def check_nixl_idle(delay_us: int) -> str:
    os.environ[NIXL_DELAY_ENV] = str(delay_us)
    try:
        api = importlib.import_module("nixl._api")
    except ImportError as exc:
        raise CheckFailedError(f"NIXL idle: `import nixl._api` failed: {exc}") from exc
    # vLLM's NixlConnector: UCX, the progress thread, 4 transfer threads.
    agent = api.nixl_agent("xpyd-idle-check", api.nixl_agent_config(num_threads=4))
    time.sleep(0.5)  # past the backend's start
    cpu_s, wall_s = time.process_time(), time.monotonic()
    time.sleep(2)
    share = (time.process_time() - cpu_s) / (time.monotonic() - wall_s)
    del agent
    if share > _IDLE_CPU_SHARE:
        raise CheckFailedError(
            f"NIXL: an idle agent uses {share:.0%} of a core with {NIXL_DELAY_ENV}={delay_us}"
            " (is nixl_cu12/_api.py patched?)"
        )
    return f"NIXL: an idle agent uses {share:.1%} of a core with {NIXL_DELAY_ENV}={delay_us}"


def _spawned_amx_state() -> tuple[bool, bool, bool]:
    """In a fresh process: whether the CPU has AMX, the kernel supports it, and it may be used."""
    features: Any = importlib.import_module("xpyd_cpu_features").cpu_features()
    return features.amx_in_cpu, features.amx_in_kernel, features.amx_permitted


def check_amx_permission() -> str:
    try:
        importlib.import_module("xpyd_cpu_features")
    except ImportError as exc:
        raise CheckFailedError(f"AMX: `import xpyd_cpu_features` failed: {exc}") from exc
    # vLLM's CPU platform starts its workers with spawn: an exec, which clears the permission.
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        in_cpu, in_kernel, permitted = pool.apply(_spawned_amx_state)
    if not in_cpu:
        return "AMX: no AMX on this CPU (nothing to ask; a spawned process starts fine)"
    if not in_kernel:
        return "AMX: the CPU has AMX but this kernel does not support it (torch will not use it)"
    if not permitted:
        raise CheckFailedError(
            "AMX: a spawned process may not use AMX tile data (is xpyd-amx-permission.pth "
            "in site-packages?): vLLM's AMX attention would die of SIGILL"
        )
    return "AMX: a spawned process may use AMX tile data (asked at start by the .pth)"


def check_nixl_variants(cuda_major: int) -> str:
    variants = sorted(
        name
        for name in {normalized(d.metadata["Name"]) for d in importlib.metadata.distributions()}
        if _NIXL_VARIANT.match(name)
    )
    if variants != [f"nixl-cu{cuda_major}"]:
        raise CheckFailedError(
            f"NIXL: installed variants are {variants or 'none'}, want only nixl-cu{cuda_major}"
        )
    return f"NIXL: only nixl-cu{cuda_major} is installed"


def check_torch_cuda(cuda_major: int) -> str:
    torch: Any = importlib.import_module("torch")
    built_for = torch.version.cuda
    if built_for is None or built_for.split(".")[0] != str(cuda_major):
        raise CheckFailedError(f"torch {torch.__version__} is built for CUDA {built_for}")
    return f"torch {torch.__version__}: CUDA {built_for}"


def check_lmcache_cuda_ops() -> str:
    try:
        ops = importlib.import_module("lmcache.cuda_ops")
    except ImportError as exc:
        raise CheckFailedError(f"LMCache: `import lmcache.cuda_ops` failed: {exc}") from exc
    return f"LMCache: CUDA ops import ({ops.__file__})"


def check_connector(name: str) -> str:
    module = "vllm.distributed.kv_transfer.kv_connector.factory"
    try:
        factory: Any = importlib.import_module(module).KVConnectorFactory
        connector = factory.get_connector_class_by_name(name)
    except Exception as exc:  # any failure to load is the finding; its type is in the message
        raise CheckFailedError(
            f"vLLM: KV connector {name} does not load: {type(exc).__name__}: {exc}"
        ) from exc
    return f"vLLM: KV connector {name} -> {connector.__module__}"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cuda-major", type=int, help="the image's CUDA major (GPU images)")
    parser.add_argument(
        "--connector", action="append", default=[], help="a vLLM KV connector that must load"
    )
    parser.add_argument(
        "--nixl-idle-delay-us",
        type=int,
        help=f"check that an idle NIXL agent sleeps with {NIXL_DELAY_ENV} set to this",
    )
    parser.add_argument(
        "--amx-permission",
        action="store_true",
        help="check that spawned processes may use AMX where the CPU has it (cpu images)",
    )
    parser.add_argument(
        "--allow-missing",
        action="append",
        default=[],
        metavar="DIST:REQ",
        help="a requirement of DIST that pip check may find not installed (on purpose)",
    )
    return parser.parse_args(argv)


Check = tuple[str, Callable[[], str]]


def planned_checks(arguments: argparse.Namespace) -> list[Check]:
    allowed = {
        (normalized(dist), normalized(requirement))
        for dist, _, requirement in (item.partition(":") for item in arguments.allow_missing)
    }
    cuda_major: int | None = arguments.cuda_major
    checks: list[Check] = [("pip check", lambda: check_pip(allowed))]
    # Connectors before NIXL: vLLM sets UCX's cache limit only if NIXL is not imported yet.
    checks += [(f"KV connector {name}", _connector_check(name)) for name in arguments.connector]
    checks.append(("NIXL", lambda: check_nixl(cuda_major)))
    delay_us: int | None = arguments.nixl_idle_delay_us
    if delay_us is not None:
        checks.append(("NIXL idle", lambda: check_nixl_idle(delay_us)))
    if arguments.amx_permission:
        checks.append(("AMX permission", check_amx_permission))
    if cuda_major is not None:
        checks += [
            ("NIXL variants", lambda: check_nixl_variants(cuda_major)),
            ("torch", lambda: check_torch_cuda(cuda_major)),
            ("LMCache CUDA ops", check_lmcache_cuda_ops),
        ]
    return checks


def _connector_check(name: str) -> Callable[[], str]:
    return lambda: check_connector(name)


def main(argv: Sequence[str] | None = None) -> int:
    failures = 0
    for label, check in planned_checks(parse_args(argv)):
        try:
            print(f"ok: {check()}", flush=True)
        except CheckFailedError as exc:
            failures += 1
            print(f"FAILED: {exc}", file=sys.stderr, flush=True)
        except Exception as exc:  # a check that breaks is a failure too, still one line
            failures += 1
            print(f"FAILED: {label}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    if failures:
        print(f"{failures} build check(s) failed: this image would not serve", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
