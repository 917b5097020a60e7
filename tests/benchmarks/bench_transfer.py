"""Benchmark: ship an image from the local Docker engine to a test host's engine without a
registry (``docker save`` streamed into ``docker load``), then again (skipped: same image ID).

Run (root): python tests/benchmarks/bench_transfer.py [TAG]
TAG defaults to the newest local ``xpyd/decode`` image (the ~4 GB cpu engine image): what a
multi-host `up` sends to each host once. The test hosts (tests/integration/hosts.py) are made
for the run and removed after.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from generator.docker import LOCAL, transfer_images  # noqa: E402
from tests.integration.hosts import running_hosts  # noqa: E402


def newest(repository: str) -> str:
    listed = subprocess.run(
        ["docker", "image", "ls", repository, "--format", "{{.Repository}}:{{.Tag}}"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    if not listed:
        sys.exit(f"no {repository} image here: build one (`python -m generator up cpu-1p1d`)")
    return listed[0]  # docker lists the newest first


def main() -> None:
    tag = sys.argv[1] if len(sys.argv) > 1 else newest("xpyd/decode")
    with running_hosts() as hosts:
        started = time.monotonic()

        def progress(line: str) -> None:
            print(f"{time.monotonic() - started:6.1f}s {line}", flush=True)

        report = transfer_images([tag], LOCAL, hosts.a.endpoint, progress)
        gib = report.bytes_sent / 2**30
        print(f"{tag}: {gib:.2f} GiB in {report.seconds:.1f} s ({gib / report.seconds:.2f} GiB/s)")
        again = transfer_images([tag], LOCAL, hosts.a.endpoint, progress)
        print(f"again: skipped in {again.seconds:.2f} s; total {time.monotonic() - started:.1f} s")
        used = subprocess.run(["du", "-sh", str(hosts.a.data_root)], capture_output=True,
                              text=True, check=False).stdout.split()[0]  # fmt: skip
        print(f"hosta's data root: {used}")


if __name__ == "__main__":
    main()
