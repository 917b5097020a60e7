"""Thresholds and limits the tool judges by, each defined once (tests/test_limits.py pins them).

Names: a stack name is a DNS label of at most ``STACK_NAME_MAX`` characters (it names the
compose project, the folder under compose/ and every container). ``bench --baseline
colocated`` runs a P/D stack's colocated twin as ``<name>-colocated``, so a P/D stack's own
name leaves room for the suffix: a stack that validates can always be benchmarked against
its baseline.

Sizes: one host shows at most ``MAX_GPUS_PER_HOST`` GPUs and runs at most
``MAX_ENGINES_PER_HOST`` engines. No machine has more (HGX boards carry 8 GPUs, the largest
PCIe fabrics 32; every vLLM engine holds GBs of host memory), and what the tool writes for a
host grows with engines times GPUs there (each engine of a mixed host sees all its GPUs):
bounded, a spec validates in about a second at most (tests/benchmarks/bench_sizes.py).

KV speed: one rule for the smoke verdict (probes/kv_speed.py) and ``doctor --kv-path``
(doctor/kvpath.py), by the path the KV takes. GPU pairs on one host must move it with
cuda_ipc (NVLink/PCIe peer access, measured ~280-359 GiB/s on H200s) at no less than the
same-host floor: anything else is UCX's silent fallback (TCP moved ~0.4 GiB/s). Between hosts
RDMA is expected (a 100 Gb/s NIC moves ~11 GiB/s): TCP or less than the RDMA floor warns, as
the network may simply be slower. CPU pairs move host memory and are reported, not judged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

__all__ = [
    "BASELINE_SUFFIX",
    "CROSS_HOST_FLOOR_GIB_S",
    "DECODE_KV_USAGE_MAX",
    "LOCAL_COMPUTE_SHARE_MAX",
    "MAX_ENGINES_PER_HOST",
    "MAX_GPUS_PER_HOST",
    "MAX_SCRAPE_INTERVAL_S",
    "NVLINK_EXPECTED_GIB_S",
    "PD_NAME_MAX",
    "RATE_WINDOW_S",
    "RULE_WINDOW_SCRAPES",
    "SAME_HOST_FLOOR_GIB_S",
    "SLOW_WINDOW_S",
    "STACK_NAME_MAX",
    "STACK_NAME_PATTERN",
    "KvJudgement",
    "KvPath",
    "is_stack_name",
    "judge_kv_speed",
    "kv_floor_gib_s",
    "transport_family",
]

STACK_NAME_MAX: Final = 32
# A DNS label of STACK_NAME_MAX characters: lowercase letters, digits and '-' inside.
STACK_NAME_PATTERN: Final = rf"[a-z0-9](?:[a-z0-9-]{{0,{STACK_NAME_MAX - 2}}}[a-z0-9])?"
BASELINE_SUFFIX: Final = "-colocated"
PD_NAME_MAX: Final = STACK_NAME_MAX - len(BASELINE_SUFFIX)

MAX_GPUS_PER_HOST: Final = 64
MAX_ENGINES_PER_HOST: Final = 128

SAME_HOST_FLOOR_GIB_S: Final = 10.0
CROSS_HOST_FLOOR_GIB_S: Final = 5.0
NVLINK_EXPECTED_GIB_S: Final = 100.0  # doctor warns below it where nvidia-smi shows NVLink

# Alert rules (observe): a decoder computing more than this share of its prompt tokens itself
# is recomputing silently (lmcache-pd decoders compute 1 token a request: far below it).
LOCAL_COMPUTE_SHARE_MAX: Final = 0.05
# Decode KV cache usage above this: decode is the bottleneck (vLLM's dashboards' guidance).
DECODE_KV_USAGE_MAX: Final = 0.9
# The windows the rules read over: rates (KV speed, a minute as the verdict's per-request
# figure moves) and the counters of rarer events (failures, lease expiries, the recompute
# share). rate() and increase() need two samples in a window, and one missed scrape must not
# blank it: every window holds RULE_WINDOW_SCRAPES scrapes, which bounds
# observe.scrape_interval_s (a larger interval leaves alerts that can never fire).
RATE_WINDOW_S: Final = 60
SLOW_WINDOW_S: Final = 300
RULE_WINDOW_SCRAPES: Final = 4
MAX_SCRAPE_INTERVAL_S: Final = min(RATE_WINDOW_S, SLOW_WINDOW_S) // RULE_WINDOW_SCRAPES

_STACK_NAME = re.compile(STACK_NAME_PATTERN)


def is_stack_name(text: str) -> bool:
    return _STACK_NAME.fullmatch(text) is not None


class KvPath(StrEnum):
    SAME_HOST_GPU = "same-host GPUs"
    CROSS_HOST_GPU = "GPUs on two hosts"
    CPU = "CPU (host memory)"


def transport_family(transport: str) -> str:
    """UCX's transport name (``cuda_ipc``, ``rc_mlx5``, ``tcp``, ``cma``...) as its family."""
    if transport.startswith("cuda_ipc"):
        return "gpu-peer"
    if transport.startswith(("rc", "dc", "ud", "ib")):
        return "rdma"
    if transport.startswith("tcp"):
        return "tcp"
    if transport.startswith(("cma", "posix", "sysv", "xpmem", "knem")):
        return "shared-memory"
    return "unknown"


@dataclass(frozen=True)
class KvJudgement:
    expected: str
    passed: bool | None  # None: not judged (a figure), or a warning where ``warn`` is set
    warn: bool = False


def kv_floor_gib_s(path: KvPath) -> float | None:
    """The speed below which KV on ``path`` is judged slow (None: CPU, not judged)."""
    floors = {
        KvPath.SAME_HOST_GPU: SAME_HOST_FLOOR_GIB_S,
        KvPath.CROSS_HOST_GPU: CROSS_HOST_FLOOR_GIB_S,
    }
    return floors.get(path)


def judge_kv_speed(path: KvPath, transport: str | None, gib_s: float) -> KvJudgement:
    """``transport`` None: UCX did not report it, so the speed alone decides."""
    family = transport_family(transport) if transport else None
    if path is KvPath.CPU:
        return KvJudgement("a figure (CPU: not judged)", None)
    if path is KvPath.CROSS_HOST_GPU:
        expected = f">= {CROSS_HOST_FLOOR_GIB_S:g} GiB/s between hosts (RDMA)"
        slow = gib_s < CROSS_HOST_FLOOR_GIB_S or family == "tcp"
        return KvJudgement(expected, None if slow else True, warn=slow)
    expected = f">= {SAME_HOST_FLOOR_GIB_S:g} GiB/s, cuda_ipc (same-host GPUs)"
    fallback = gib_s < SAME_HOST_FLOOR_GIB_S or family not in (None, "gpu-peer")
    return KvJudgement(expected, not fallback)
