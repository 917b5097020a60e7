"""Time from `up` to the verdict of one stack under the slurm runtime (a real Slurm cluster on
this machine: tests/integration/slurm_cluster.py) against the process runtime, same stack, same
machine, one run each, side by side (goal: slurm within 1.2x of processes).

    .venv/bin/python tests/benchmarks/bench_slurm_up.py [--stack cpu-1p1d] \\
        [--python ENGINE_PYTHON --router-python ROUTER_PYTHON]

Root (the cluster's daemons run in network namespaces). Pythons: the ones given, else made once
in a checkout copy (`python -m generator env`, not timed). Prints the machine, each runtime's
seconds from up to the verdict, and the ratio. Both runs share this machine's cores: nothing
else should run meanwhile.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from generator.cpu_features import cpu_features  # noqa: E402
from tests.integration.conftest import workspace_copy  # noqa: E402
from tests.integration.slurm_cluster import SlurmCluster  # noqa: E402
from tests.integration.slurm_files import NodeResources  # noqa: E402
from tests.tools import run_cli  # noqa: E402


def _timed(command: list[str], env: dict[str, str], cwd: Path) -> float:
    started = time.monotonic()
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - started
    if done.returncode != 0 or "verdict PASS" not in done.stderr + done.stdout:
        sys.exit(f"{' '.join(command[-6:])} failed:\n{done.stderr[-3000:]}")
    return elapsed


def _pythons(args: argparse.Namespace, copy: Path, stack: str) -> list[str]:
    if args.python and args.router_python:
        engine, router = Path(args.python), Path(args.router_python)
    else:
        made = run_cli("env", stack, root=copy)
        if made.returncode != 0:
            sys.exit(made.stderr[-3000:])
        engine = copy / ".cache/env/engine-cpu/bin/python"
        router = copy / ".cache/env/router/bin/python"
    return ["--python", str(engine), "--set", f"process.router_python={router}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", default="cpu-1p1d")
    parser.add_argument("--python")
    parser.add_argument("--router-python")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-slurm-", dir=ROOT / ".cache") as scratch:
        copy = workspace_copy(Path(scratch) / "copy")
        pythons = _pythons(args, copy, args.stack)
        cli = [sys.executable, "-m", "generator"]
        env = {"XPYD_ROOT": str(copy), "NO_COLOR": "1", "CI": "1", "PATH": "/usr/bin:/bin"}
        env |= {"HOME": str(Path.home())}
        up = [*cli, "up", args.stack, *pythons]
        process_s = _timed([*up, "--runtime", "process"], env, ROOT)
        run_cli("down", args.stack, root=copy)
        roomy = NodeResources(cpus=2, memory_mb=16_000, gpus=0)  # one node runs every service
        with SlurmCluster(nodes=(roomy, roomy)) as cluster:
            slurm_env = cluster.client_env() | env
            slurm_s = _timed(cluster.client_command(*up, "--runtime", "slurm"), slurm_env, ROOT)
            subprocess.run(
                cluster.client_command(*cli, "down", args.stack), env=slurm_env, cwd=ROOT,
                capture_output=True, check=False,
            )  # fmt: skip
        shutil.rmtree(copy / "runs", ignore_errors=True)
    features = cpu_features()
    print(f"machine: {features.model} ({' '.join(features.vector_flags)}), 2 cores shared")
    print(f"{args.stack}: up to verdict, process runtime {process_s:6.1f} s")
    print(f"{args.stack}: up to verdict, slurm runtime   {slurm_s:6.1f} s (one node of a job)")
    print(f"slurm / process: x{slurm_s / process_s:.2f} (goal <= x1.2)")


if __name__ == "__main__":
    main()
