"""Benchmark: validation at the sizes the spec allows, and at sizes no machine has.

What `validate` does (spec checks, plan, a full render in memory) is timed for:
  refused     one host with 4,096 GPUs and 2048P2048D (took 107 s and 5.9 GB), and cpu.share
              4096P4096D on one core (took 41 s): refused before planning (target < 0.5 s);
  largest     the largest single host allowed (generator/limits.py): 64 GPUs, 64P64D
              sharing them, and 64P64D on one shared core (target < 1 s each);
  scaling     8 engines a host, 512 to 4,096 engines: time per engine stays flat (linear;
              target: the largest run's per-engine time < 2x the smallest's).

Run: python tests/benchmarks/bench_sizes.py [--repeat N]
Prints each time (best of N) and exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from generator.errors import SpecError  # noqa: E402
from generator.paths import Workspace  # noqa: E402
from generator.planner import make_plan  # noqa: E402
from generator.render import render_stack  # noqa: E402
from generator.stack import parse_spec  # noqa: E402

REFUSED_TARGET_S = 0.5
LARGEST_TARGET_S = 1.0
SCALING_TARGET = 2.0
CPU_MODEL = {"id": "/opt/xpyd/models/tiny-llama", "source": "synthetic"}


def gpu_host(count: int, gpus: int, **changes: Any) -> dict[str, Any]:
    group: dict[str, Any] = {"count": count, **changes}
    return {
        "name": "big",
        "topology": "nixl-mp",
        "model": {"id": "org/model"},
        "prefill": group,
        "decode": group,
        "hosts": [{"name": "h", "gpus": list(range(gpus))}],
        "gpu": {"share": "gpu_memory_utilization" in changes},
        "nixl": {"transfer": "push"},  # what a shared GPU needs
    }


def cpu_core(count: int) -> dict[str, Any]:
    return {
        "name": "big",
        "topology": "nixl-mp",
        "profile": "cpu",
        "model": CPU_MODEL,
        "prefill": {"count": count},
        "decode": {"count": count},
        "hosts": [{"name": "h", "cpus": [0]}],
        "cpu": {"share": True},
    }


def spread(engines: int) -> dict[str, Any]:
    """``engines`` engines, 8 a host (each host all prefill or all decode)."""
    hosts = [
        {"name": f"h{i}", "address": f"10.{i // 250}.{i % 250}.1", "gpus": list(range(8))}
        for i in range(engines // 8)
    ]
    half = {"count": engines // 2}
    return {
        "name": "big",
        "topology": "nixl-mp",
        "model": {"id": "org/model"},
        "prefill": half,
        "decode": half,
        "hosts": hosts,
    }


def validate(data: dict[str, Any], workspace: Workspace) -> str:
    """What `validate` does; 'valid' or the first problem's field."""
    try:
        spec = parse_spec(data, source="bench")
    except SpecError as error:
        return f"refused ({error.issues[0].field})"
    render_stack(make_plan(spec), workspace)
    return "valid"


def best_of(repeat: int, data: dict[str, Any], workspace: Workspace) -> tuple[str, float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        outcome = validate(data, workspace)
        times.append(time.perf_counter() - start)
    return outcome, min(times)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    workspace = Workspace(ROOT)
    missed: list[str] = []
    cases = [
        ("refused", "1 host, 4096 GPUs, 2048P2048D", gpu_host(2048, 4096), REFUSED_TARGET_S),
        ("refused", "1 core, cpu.share, 4096P4096D", cpu_core(4096), REFUSED_TARGET_S),
        (
            "largest",
            "1 host, 64 GPUs, 64P64D gpu.share",
            gpu_host(64, 64, gpu_memory_utilization=0.4),
            LARGEST_TARGET_S,
        ),
        ("largest", "1 core, cpu.share, 64P64D", cpu_core(64), LARGEST_TARGET_S),
    ]
    for kind, what, data, target_s in cases:
        outcome, seconds = best_of(args.repeat, data, workspace)
        print(f"{kind:8s} {what:38s} {outcome:22s} {seconds * 1000:8.1f} ms (< {target_s} s)")
        if seconds >= target_s or (kind == "refused") != outcome.startswith("refused"):
            missed.append(what)
    per_engine = []
    for engines in (512, 1024, 2048, 4096):
        outcome, seconds = best_of(1, spread(engines), workspace)
        per_engine.append(seconds / engines)
        print(
            f"scaling  {engines:4d} engines on {engines // 8:3d} hosts{'':16s}{outcome:22s} "
            f"{seconds * 1000:8.1f} ms ({seconds / engines * 1e6:6.0f} us an engine)"
        )
    growth = per_engine[-1] / per_engine[0]
    print(f"per-engine time, 4096 vs 512 engines: x{growth:.2f} (< x{SCALING_TARGET:g})")
    if growth >= SCALING_TARGET:
        missed.append("linear scaling")
    print("OK" if not missed else f"OVER TARGET: {', '.join(missed)}")
    return 0 if not missed else 1


if __name__ == "__main__":
    sys.exit(main())
