"""How fast the KV really moved, per smoke request, and over which transport.

nixl-mp: the decoder pulls KV with NIXL READs and vLLM records each transfer's bytes and time
(`vllm:nixl_bytes_transferred`, `vllm:nixl_xfer_time_seconds`: NIXL's own telemetry, from
posting the transfer until vLLM's next poll sees it done). lmcache-pd: LMCache's prefiller
pushes KV with NIXL WRITEs and reports no network figures of its own (its metrics time local
copies), so its engines run NIXL's Prometheus exporter (`agent_tx_bytes_total`,
`agent_xfer_time_total` in microseconds). Either way GiB/s = bytes / transfer time, from the
counters' change across one request. The transport is what UCX says it selected
(UCX_PROTO_INFO in the engines' logs): cuda_ipc (NVLink/PCIe peer access), rc/dc (RDMA),
tcp, or cma/posix/sysv (shared memory, CPU).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from generator.errors import XpydError
from generator.kvprobe.nixl_kv_probe import summarize_transports
from generator.limits import KvPath, judge_kv_speed
from generator.plan import Plan
from generator.probes.http import ProbeClient, metric_sum
from generator.probes.kv_reference import KvReference
from generator.probes.verdict import VerdictRow
from generator.topologies import KvSpeedSource, topology_of

__all__ = [
    "KvCounters",
    "kv_side",
    "kv_speed_row",
    "read_counters",
    "transport_in_logs",
    "wait_for_transfers",
]

_GIB = float(1 << 30)


@dataclass(frozen=True)
class KvCounters:
    bytes: float
    seconds: float
    transfers: float
    descriptors: float = 0.0  # NIXL's, where the engines count them (0: not counted)

    def __sub__(self, other: KvCounters) -> KvCounters:
        return KvCounters(
            self.bytes - other.bytes,
            self.seconds - other.seconds,
            self.transfers - other.transfers,
            self.descriptors - other.descriptors,
        )

    @property
    def gib_s(self) -> float | None:
        return self.bytes / self.seconds / _GIB if self.seconds > 0 else None

    def describe(self) -> str:
        rate = self.gib_s
        speed = f"{rate:.2f} GiB/s" if rate is not None else "no timed transfer"
        moved = f"{self.bytes / (1 << 20):.1f} MiB in {self.seconds * 1e3:.2f} ms = {speed}"
        return moved + (f", {self.descriptors:.0f} descriptors" if self.descriptors else "")


def kv_side(plan: Plan) -> KvSpeedSource:
    """Whose counters tell, and the UCX operation that carries the KV there (the topology's
    data: nixl-mp decoders READ, lmcache-pd prefillers WRITE)."""
    sources = topology_of(plan).verdict_sources(plan)
    if sources is None:
        raise XpydError(
            f"{plan.stack} is {plan.topology.kind.value}: its engines move no KV to measure",
            hint="measure the KV path of a P/D stack (lmcache-pd or nixl-mp)",
        )
    return sources.kv_speed


def read_counters(client: ProbeClient, plan: Plan) -> KvCounters:
    source = kv_side(plan)
    engines = {engine.name: engine for engine in plan.engines}
    total = KvCounters(0.0, 0.0, 0.0)
    for engine, port in zip(source.engines, source.ports, strict=True):
        address = plan.engine_address(engines[engine])
        samples = client.scrape(engine, f"http://{address}:{port}/metrics")
        descriptors = source.descriptors_metric
        total = KvCounters(
            total.bytes + metric_sum(samples, source.bytes_metric),
            total.seconds + metric_sum(samples, source.seconds_metric) * source.seconds_per_unit,
            total.transfers + metric_sum(samples, source.transfers_metric),
            total.descriptors + (metric_sum(samples, descriptors) if descriptors else 0.0),
        )
    return total


def wait_for_transfers(
    client: ProbeClient, plan: Plan, before: KvCounters, *, timeout_s: float = 15.0
) -> KvCounters:
    """The counters once this request's transfers are counted: vLLM publishes them with its
    next stats update, a moment after the response."""
    deadline = time.monotonic() + timeout_s
    while True:
        now = read_counters(client, plan)
        if now.transfers > before.transfers and now.seconds > before.seconds:
            return now
        if time.monotonic() > deadline:
            return now
        time.sleep(0.25)


def transport_in_logs(
    plan: Plan, logs: Callable[[list[str]], str], per_request: list[tuple[str, KvCounters]]
) -> str | None:
    """The UCX transport the KV side's engines selected for KV-sized RMA operations."""
    source = kv_side(plan)
    moved = [counters for _, counters in per_request if counters.transfers > 0]
    size = int(max((c.bytes / c.transfers for c in moved), default=1 << 20))
    report = summarize_transports(
        logs(list(source.engines)), size, (source.operation,), source.memory
    )
    return None if report.transport == "unknown" else report.transport


def _share_of_probe(
    per_request: list[tuple[str, KvCounters]],
    operation: Literal["read", "write"],
    reference: KvReference | None,
) -> str:
    """ "; best N % of NIXL alone's R GiB/s (...)" (empty: no reference, or no rate)."""
    rates = [rate for _, counters in per_request if (rate := counters.gib_s) is not None]
    if reference is None or (found := reference.rate(operation)) is None or not rates:
        return ""
    pair, rate = found
    described = reference.describe(pair, rate, operation)
    return f"; best {max(rates) / rate:.0%} of NIXL alone's {described}"


def kv_speed_row(
    plan: Plan,
    per_request: list[tuple[str, KvCounters]],
    transport: str | None,
    reference: KvReference | None = None,
) -> VerdictRow:
    """GiB/s per request and the transport, judged by generator/limits.py's rule: GPUs on one
    host off cuda_ipc or below its floor fail (a silent fallback); between hosts TCP or below
    RDMA speed warns; CPU: a figure. With ``reference`` (NIXL alone between the same devices,
    `doctor --kv-path`) the best request's share of its rate too, a figure only."""
    operation = kv_side(plan).operation
    over = f" over {transport}" if transport else " (transport not reported)"
    observed = "; ".join(f"{name}: {c.describe()}" for name, c in per_request) + over
    observed += _share_of_probe(per_request, operation, reference)
    check = f"KV path speed (NIXL {operation}s, per request)"
    rates = [c.gib_s for _, c in per_request]
    path = plan.kv_path()
    if path is KvPath.CPU:
        return VerdictRow(
            check, observed, judge_kv_speed(path, transport, 0.0).expected, None, "info"
        )
    if any(rate is None for rate in rates):
        return VerdictRow(check, observed, "timed NIXL transfers", False)
    # The best request decides: a pair's first transfer also pays for connection setup and
    # memory registration, while a fallback is slow every time.
    best = max(rate for rate in rates if rate is not None)
    judged = judge_kv_speed(path, transport, best)
    return VerdictRow(
        check, observed, judged.expected, judged.passed, "WARN" if judged.warn else ""
    )
