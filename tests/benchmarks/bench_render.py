"""Benchmark: validate, plan and render a 64P64D TP=8 stack over 128 hosts (target < 2 s).

Run: python tests/benchmarks/bench_render.py [--repeat N]
Prints the time of each phase (best of N) for both topologies; exits 1 above the target.
Optionally (--compose) also times `docker compose config -q` over the 128 rendered files,
which is a separate, external cost.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from generator.paths import Workspace  # noqa: E402
from generator.planner import make_plan  # noqa: E402
from generator.render import render_stack  # noqa: E402
from generator.render.writer import write_rendered  # noqa: E402
from generator.stack import parse_spec  # noqa: E402

TARGET_S = 2.0
T = TypeVar("T")


def big_spec(topology: str) -> dict[str, Any]:
    hosts = [
        {
            "name": f"node-{i:03d}",
            "address": f"10.1.{i // 250}.{i % 250 + 1}",
            "gpus": list(range(8)),
        }
        for i in range(128)
    ]
    return {
        "name": f"big-{topology}",
        "topology": topology,
        "model": {"id": "meta-llama/Llama-3.1-405B-Instruct"},
        "prefill": {"count": 64, "tp": 8},
        "decode": {"count": 64, "tp": 8},
        "hosts": hosts,
        "networking": {"rdma": True},
    }


def timed(action: Callable[[], T]) -> tuple[T, float]:
    start = time.perf_counter()
    result = action()
    return result, time.perf_counter() - start


def run_once(topology: str, workspace: Workspace, out: Path) -> dict[str, float]:
    data = big_spec(topology)
    spec, t_validate = timed(lambda: parse_spec(data, source="bench"))
    plan, t_plan = timed(lambda: make_plan(spec))
    rendered, t_render = timed(lambda: render_stack(plan, workspace))
    _, t_write = timed(lambda: write_rendered(rendered, out))
    assert len(rendered.projects) == 128
    return {"validate": t_validate, "plan": t_plan, "render": t_render, "write": t_write}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--compose", action="store_true", help="also time `docker compose config -q`"
    )
    args = parser.parse_args()
    workspace = Workspace(ROOT)
    worst = 0.0
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch)
        for topology in ("nixl-mp", "lmcache-pd"):
            runs = [run_once(topology, workspace, out) for _ in range(args.repeat)]
            best = {phase: min(run[phase] for run in runs) for phase in runs[0]}
            total = min(sum(run.values()) for run in runs)
            worst = max(worst, total)
            phases = "  ".join(
                f"{phase} {seconds * 1000:7.1f} ms" for phase, seconds in best.items()
            )
            print(
                f"64P64D TP=8, 128 hosts, {topology:10s}: total {total * 1000:7.1f} ms  ({phases})"
            )
            if args.compose:
                files = sorted(out.glob(f"compose/big-{topology}/*/compose.yaml"))
                start = time.perf_counter()
                for path in files:
                    subprocess.run(
                        ["docker", "compose", "-f", str(path), "config", "-q"], check=True
                    )
                elapsed = time.perf_counter() - start
                print(f"  docker compose config -q over {len(files)} files: {elapsed:.1f} s")
    verdict = "OK" if worst < TARGET_S else "OVER TARGET"
    print(f"slowest total {worst:.3f} s, target < {TARGET_S:.1f} s: {verdict}")
    return 0 if worst < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
