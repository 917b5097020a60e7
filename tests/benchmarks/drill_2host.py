"""Fault drill across two hosts: `bench cpu-2host --fault cut:host-a@T+D`, once per router.

The two "hosts" are network namespaces on this machine, each with its own address and Docker
engine (tests/integration/hosts.py, what the multi-host tests use); the stack runs as the CI
test runs it (observed, LMCache P2P on), and then the same cut with each router kind given.
Each run's report (runs/<run-id>/fault.md, fault.json, fault.png) and every service's status and
log after it (after.log) are copied to --out before the hosts are removed; the figures line of
each is printed.

Run (root; the cpu images must build): python tests/benchmarks/drill_2host.py
    [--routers vllm-router proxy] [--cut-at-s 8] [--cut-for-s 10] [--load-s 30] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.integration.conftest import cli, workspace_copy  # noqa: E402
from tests.integration.hosts import running_hosts  # noqa: E402
from tests.integration.test_multihost_up import FEATURES, STACK, host_flags  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routers", nargs="+", default=["vllm-router", "proxy"])
    parser.add_argument("--cut-at-s", type=int, default=8)
    parser.add_argument("--cut-for-s", type=int, default=10)
    parser.add_argument("--load-s", type=int, default=30)
    parser.add_argument("--deadline-s", type=int, default=30)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "drill-2host")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="xpyd-drill-") as scratch, running_hosts() as hosts:
        root = workspace_copy(Path(scratch) / "2host")
        flags = [*host_flags(hosts.a, hosts.b), *FEATURES]
        for router in args.routers:
            run_id = f"drill-2host-{router}-{int(time.time())}"
            fault = f"cut:host-a@{args.cut_at_s}+{args.cut_for_s}"
            load = [
                "--fault-duration-s",
                str(args.load_s),
                "--fault-deadline-s",
                str(args.deadline_s),
            ]
            chosen = ["--set", f"router.kind={router}"]
            print(f"[drill] {router}: bench {STACK} --fault {fault}", flush=True)
            result = cli(
                "bench",
                STACK,
                "--fault",
                fault,
                *flags,
                *chosen,
                *load,
                "--run-id",
                run_id,
                root=root,
            )
            print(result.stdout[-3000:], result.stderr[-1500:], flush=True)
            failed += result.returncode != 0
            report = root / "runs" / run_id
            if report.is_dir():
                shutil.copytree(report, args.out / run_id, dirs_exist_ok=True)
                # Every service's log after the drill (the hosts, and with them the logs,
                # are gone once this ends).
                status = cli("status", STACK, root=root).stdout
                logs = cli("logs", STACK, "--tail", "5000", root=root).stdout
                (args.out / run_id / "after.log").write_text(status + logs, encoding="utf-8")
                summary = json.loads((report / "fault.json").read_text()).get("summary", {})
                print(f"[drill] {router}: {json.dumps(summary)}", flush=True)
        cli("down", STACK, *flags, root=root)
    print(f"[drill] reports under {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
