"""Benchmark: how long the command line takes to answer `--help` (target < 0.4 s).

A newcomer's first command is `python -m generator --help`; a CLI whose help takes most of a
second feels broken. Each command runs as a user runs it (a fresh interpreter, the checkout
first on its path), after warm-up runs (bytecode cached), timed from start to exit (wall) and
by the CPU it used (user + system: steadier than wall on a shared machine); `python -c pass`
is the floor no CLI goes under. tests/cli/test_startup.py holds what keeps it fast (no heavy
module imported at start), without a timer.

Run: python tests/benchmarks/bench_cli_start.py [--runs 20] [--warmup 3] [--against DIR]
  --against DIR: another checkout (e.g. `git archive a2fc589 | tar -x -C /tmp/before`),
  timed in turns with this one so that both see the same load.
Prints the CPU, the load average, and median / min wall and median CPU per command; exits 1
when this checkout's median wall time of `--help` is above the target.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TARGET_S = 0.4
COMMANDS = {
    "python -c pass (the floor)": ["-c", "pass"],
    "python -m generator --help": ["-m", "generator", "--help"],
    "python -m generator bench --help": ["-m", "generator", "bench", "--help"],
}


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.partition(":")[2].strip()
    return "unknown CPU"


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(checkout: Path, args: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one run in ``checkout``."""
    env = {**os.environ, "XPYD_ROOT": str(checkout), "COLUMNS": "100"}
    cpu, start = _children_cpu_s(), time.perf_counter()
    subprocess.run([sys.executable, *args], cwd=checkout, env=env, capture_output=True, check=True)
    return time.perf_counter() - start, _children_cpu_s() - cpu


def measure(
    checkouts: list[Path], args: list[str], runs: int, warmup: int
) -> list[list[tuple[float, float]]]:
    """Each checkout's runs, taken in turns."""
    for _ in range(warmup):
        for checkout in checkouts:
            run_once(checkout, args)
    results: list[list[tuple[float, float]]] = [[] for _ in checkouts]
    for _ in range(runs):
        for index, checkout in enumerate(checkouts):
            results[index].append(run_once(checkout, args))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--against", type=Path, help="another checkout, timed in turns")
    args = parser.parse_args()
    checkouts = [ROOT, *([args.against.resolve()] if args.against else [])]
    load = " ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"{cpu_model()}, {os.cpu_count()} CPUs, load average {load}; {sys.executable}")
    help_s = 0.0
    for label, command in COMMANDS.items():
        for checkout, samples in zip(
            checkouts, measure(checkouts, command, args.runs, args.warmup), strict=True
        ):
            wall = statistics.median(s for s, _ in samples)
            cpu = statistics.median(c for _, c in samples)
            print(
                f"{label:34s} {checkout.name:12.12s} wall median {wall * 1000:5.0f} ms, min "
                f"{min(s for s, _ in samples) * 1000:5.0f} ms; CPU median {cpu * 1000:5.0f} ms "
                f"({args.runs} runs)"
            )
            if checkout == ROOT and command == COMMANDS["python -m generator --help"]:
                help_s = wall
    verdict = "OK" if help_s < TARGET_S else "OVER TARGET"
    print(f"`--help` median {help_s:.3f} s here, target < {TARGET_S:.1f} s: {verdict}")
    return 0 if help_s < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
