"""The P2P verdict rows (lmcache.p2p on): every LMCache server registered with the
coordinator and connected to all its peers, and a prefix computed on one instance loaded on
another from the first one's LMCache.

The reuse is proved from counters, not responses: in a P/D stack NIXL owns a response's
``kv_transfer_params`` (LMCache PR #3866). The prompt goes to the first prefiller alone, then
to the first decoder alone (no router, no NIXL hand-off): the decoder's LMCache server misses
in its own L1, finds the chunks at its peer, and vLLM counts them as external prefix-cache
hits (``vllm:external_prefix_cache_hits_total``); the server's own counters show the chunks
came from L2, the P2P adapter (``lmcache_mp_l2_load_completed_requests_total{l2_name="p2p"}``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from generator.plan import EnginePlan, Plan
from generator.probes.http import (
    MetricSamples,
    Origin,
    ProbeClient,
    Reply,
    metric_sum,
    parse_samples,
)
from generator.probes.verdict import VerdictRow

__all__ = ["P2PServer", "PeerReuse", "p2p_rows", "peer_rows", "reuse_row"]

ReadInside = Callable[[str, str], str]

_HITS = "vllm:external_prefix_cache_hits_total"
_QUERIES = "vllm:external_prefix_cache_queries_total"
_L2_HIT_TOKENS = "lmcache_mp_lookup_hit_l2_tokens_total"
_L2_LOADS = "lmcache_mp_l2_load_completed_requests_total"
_STORED_WAIT_S = 30.0  # LMCache stores a prefill's chunks asynchronously
_POLL_S = 0.5


@dataclass(frozen=True)
class P2PServer:
    """An engine and its `lmcache server` (whose /status is read inside its container)."""

    engine: EnginePlan
    service: str
    http_port: int


def p2p_rows(
    plan: Plan,
    client: ProbeClient,
    servers: tuple[P2PServer, ...],
    *,
    prompt: str,
    read_inside: ReadInside,
) -> list[VerdictRow]:
    """The peers row, then the reuse row: the prefix of ``prompt`` (a fresh one) computed on
    the first prefiller and loaded by the first decoder from the prefiller's LMCache."""
    statuses = {s.service: _status(plan, s, read_inside) for s in servers}
    rows = [peer_rows(statuses, expected_peers=len(servers) - 1)]
    source = next(s for s in servers if s.engine in plan.prefill)
    target = next(s for s in servers if s.engine in plan.decode)
    rows.append(reuse_row(plan, client, source, target, prompt=prompt, read_inside=read_inside))
    return rows


def peer_rows(statuses: dict[str, Reply], *, expected_peers: int) -> VerdictRow:
    """Each server's own word on its registration (``p2p_state``) and peers
    (``p2p_peer_count``)."""
    seen = {
        service: (status.require("p2p_state", str), status.require("p2p_peer_count", int))
        for service, status in statuses.items()
    }
    observed = ", ".join(f"{service}: {state}, {peers}" for service, (state, peers) in seen.items())
    passed = all(
        state == "registered" and peers == expected_peers for state, peers in seen.values()
    )
    return VerdictRow(
        "LMCache P2P peers (/status)",
        observed,
        f"registered, {expected_peers} peer(s) each",
        passed,
    )


def reuse_row(
    plan: Plan,
    client: ProbeClient,
    source: P2PServer,
    target: P2PServer,
    *,
    prompt: str,
    read_inside: ReadInside,
) -> VerdictRow:
    objects = _object_count(plan, source, read_inside)
    _complete_on(client, plan, source.engine, prompt)
    _wait_stored(plan, source, read_inside, more_than=objects)
    before = _scrape(client, plan, target.engine), _server_metrics(plan, target, read_inside)
    _complete_on(client, plan, target.engine, prompt)
    after = _scrape(client, plan, target.engine), _server_metrics(plan, target, read_inside)
    reuse = PeerReuse.between(before, after)
    return VerdictRow(
        f"prefix from a peer's LMCache ({target.engine.name} <- {source.service})",
        reuse.describe(),
        "> 0 tokens, > 0 P2P loads",
        reuse.hit_tokens > 0 and reuse.p2p_loads > 0,
    )


@dataclass(frozen=True)
class PeerReuse:
    """What one request to the target shows: vLLM's external prefix-cache figures and its
    LMCache server's own L2 (peer) counters."""

    hit_tokens: float  # vllm:external_prefix_cache_hits_total
    query_tokens: float  # vllm:external_prefix_cache_queries_total
    l2_hit_tokens: float  # lmcache_mp_lookup_hit_l2_tokens_total
    p2p_loads: float  # lmcache_mp_l2_load_completed_requests_total{l2_name="p2p"}

    @classmethod
    def between(
        cls, before: tuple[MetricSamples, MetricSamples], after: tuple[MetricSamples, MetricSamples]
    ) -> PeerReuse:
        def engine(name: str) -> float:
            return metric_sum(after[0], name) - metric_sum(before[0], name)

        def server(name: str, labels: dict[str, str] | None = None) -> float:
            return metric_sum(after[1], name, labels) - metric_sum(before[1], name, labels)

        return cls(
            hit_tokens=engine(_HITS),
            query_tokens=engine(_QUERIES),
            l2_hit_tokens=server(_L2_HIT_TOKENS),
            p2p_loads=server(_L2_LOADS, {"l2_name": "p2p"}),
        )

    def describe(self) -> str:
        return (
            f"vLLM: {self.hit_tokens:.0f} of {self.query_tokens:.0f} prompt tokens external hits; "
            f"LMCache: {self.l2_hit_tokens:.0f} tokens from L2, {self.p2p_loads:.0f} P2P loads"
        )


def _complete_on(client: ProbeClient, plan: Plan, engine: EnginePlan, prompt: str) -> None:
    """One token of a plain completion, straight to the engine (no P/D hand-off)."""
    url = f"http://{plan.engine_address(engine)}:{engine.http_port}/v1/completions"
    body = {"model": plan.model.served_name, "prompt": prompt, "max_tokens": 1, "temperature": 0}
    client.post_json(engine.name, url, body)


def _scrape(client: ProbeClient, plan: Plan, engine: EnginePlan) -> MetricSamples:
    url = f"http://{plan.engine_address(engine)}:{engine.http_port}/metrics"
    return client.scrape(engine.name, url)


def _server_metrics(plan: Plan, server: P2PServer, read_inside: ReadInside) -> MetricSamples:
    # LMCache serves its Prometheus page on its HTTP port (its own metrics port stays shut).
    url = f"http://127.0.0.1:{server.http_port}/metrics"
    try:
        return parse_samples(read_inside(server.service, url))
    except ValueError as exc:
        problem = f"sent metrics that do not parse ({exc})"
        raise Origin(plan.stack, server.service, "/metrics").error(problem) from exc


def _status(plan: Plan, server: P2PServer, read_inside: ReadInside) -> Reply:
    # The server's HTTP API shows its environment: read from inside its container.
    url = f"http://127.0.0.1:{server.http_port}/status"
    return Reply.parse(read_inside(server.service, url), Origin(plan.stack, server.service, url))


def _object_count(plan: Plan, server: P2PServer, read_inside: ReadInside) -> int:
    l1 = _status(plan, server, read_inside).part("storage_manager").part("l1_manager")
    return l1.require("total_object_count", int)


def _wait_stored(plan: Plan, server: P2PServer, read_inside: ReadInside, *, more_than: int) -> None:
    """Until the source's L1 holds the new chunks, or the bound: a miss then shows in the row."""
    deadline = time.monotonic() + _STORED_WAIT_S
    while time.monotonic() < deadline:
        if _object_count(plan, server, read_inside) > more_than:
            return
        time.sleep(_POLL_S)
