"""The smoke test and its verdict: a completion and a streaming chat completion through the
router, then proof from the decode instances' own counters that the prompt's KV came from
the prefill side. A 200 OK alone proves nothing: P/D silently falls back to recomputing
the prompt on the decoder in several known cases, and this verdict fails then.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from generator.plan import Plan
from generator.probes.colocated import run_colocated_smoke
from generator.probes.http import MetricSamples, Origin, ProbeClient, Reply, Transport, metric_sum
from generator.probes.kv_loads import kv_load_row
from generator.probes.kv_reference import KvReference
from generator.probes.kv_speed import (
    KvCounters,
    kv_speed_row,
    read_counters,
    transport_in_logs,
    wait_for_transfers,
)
from generator.probes.p2p import P2PServer, p2p_rows
from generator.probes.readiness import Router, router_of_plan
from generator.probes.requests import (
    Completion,
    answer_rows,
    chat_stream,
    complete,
    sized_prompt,
)
from generator.probes.serving import left_out_row, serving_view
from generator.probes.verdict import SmokeResult, VerdictRow
from generator.routers import router_of
from generator.topologies import VerdictSources, topology_of

__all__ = ["ReadInside", "SmokeResult", "VerdictRow", "run_smoke"]

ReadInside = Callable[[str, str], str]

_SOURCE = "vllm:prompt_tokens_by_source_total"
_SMOKE_REQUESTS = 2  # a completion and a streaming chat completion
# Where the verdict runs outside the services' containers (a pod of the cluster's export).
_INSIDE_ONLY = "not read: its API answers inside its own container only"


def run_smoke(
    plan: Plan,
    *,
    nonce: str,
    timeout_s: float = 180.0,
    read_inside: ReadInside | None,
    logs: Callable[[list[str]], str] | None = None,
    transport: Transport | None = None,
    down: Collection[str] = (),
    reference: KvReference | None = None,
) -> SmokeResult:
    """``read_inside(service, url)`` is the body of a GET of ``url`` made inside that
    service's container (None: no way in, as from another pod: what only it can read is left
    unjudged); ``logs(services)`` those services' logs (where UCX names its transport);
    ``transport`` replaces the network (unit tests: recorded pages); ``down`` names services
    that are down now: the engines they take out are left out; ``reference`` NIXL's own rate
    between the engines' devices (`doctor --kv-path`), which the KV figure is set against."""
    plan, left_out = serving_view(plan, down)
    sources = topology_of(plan).verdict_sources(plan)
    if sources is None:  # no KV moves: the colocated verdict
        return run_colocated_smoke(plan, nonce=nonce, timeout_s=timeout_s, transport=transport)
    router = router_of_plan(plan)
    model = plan.model.served_name
    headers = {plan.router.session_header: f"smoke-{nonce}"} if plan.router.session_header else {}
    with ProbeClient(plan.stack, timeout_s=timeout_s, transport=transport) as client:
        before = _decode_metrics(client, plan)
        objects_before = _lmcache_objects(plan, sources, read_inside)
        tokens = sources.kv_prompt_tokens
        prompt = sized_prompt(client, plan, nonce, tokens)
        chat_prompt = sized_prompt(client, plan, nonce + "-chat", tokens)
        kv_start = read_counters(client, plan)
        completion = complete(client, router, model, prompt, headers)
        kv_mid = wait_for_transfers(client, plan, kv_start)
        chat = chat_stream(client, router, model, chat_prompt, headers)
        kv_end = wait_for_transfers(client, plan, kv_mid)
        after = _decode_metrics(client, plan)
        objects_after = _lmcache_objects(plan, sources, read_inside)
        stickiness = _stickiness_row(plan, client, router, headers)
        p2p = _p2p_rows(plan, client, sources, nonce, read_inside)
    per_request = [("completion", kv_mid - kv_start), ("chat", kv_end - kv_mid)]
    ucx = transport_in_logs(plan, logs, per_request) if logs else None
    rows = [
        *answer_rows(completion, chat.chunks),
        *_kv_rows(sources, before, after),
        *_load_rows(plan, sources, logs, (("completion", completion.id), ("chat", chat.id))),
        kv_speed_row(plan, per_request, ucx, reference),
        _stamp_row(plan, completion),
        lmcache_row(objects_before, objects_after),
        stickiness,
        *p2p,
        *([left_out_row(left_out)] if left_out else []),
    ]
    transfers = tuple(_transfer(name, counters, ucx) for name, counters in per_request)
    return SmokeResult(rows, completion.text, chat.text, completion.prompt_tokens, transfers)


def _load_rows(
    plan: Plan,
    sources: VerdictSources,
    logs: Callable[[list[str]], str] | None,
    answers: tuple[tuple[str, str], ...],
) -> list[VerdictRow]:
    """Where the decoders' connector logs each load: that every smoke request's was logged."""
    if sources.load_log is None:
        return []
    text = logs([engine.name for engine in plan.decode]) if logs else None
    return [kv_load_row(sources.load_log, text, answers)]


def _p2p_rows(
    plan: Plan,
    client: ProbeClient,
    sources: VerdictSources,
    nonce: str,
    read_inside: ReadInside | None,
) -> list[VerdictRow]:
    """lmcache.p2p's rows, after the smoke's requests (a prompt of their size, its own)."""
    if not sources.p2p_servers:
        return []
    if read_inside is None:
        return [VerdictRow("lmcache.p2p", _INSIDE_ONLY, "-", None, "info")]
    engines = {engine.name: engine for engine in plan.engines}
    servers = tuple(
        P2PServer(engines[e], service, port) for e, service, port in sources.p2p_servers
    )
    prompt = sized_prompt(client, plan, nonce + "-p2p", sources.kv_prompt_tokens)
    return p2p_rows(plan, client, servers, prompt=prompt, read_inside=read_inside)


def _transfer(request: str, counters: KvCounters, transport: str | None) -> dict[str, Any]:
    return {
        "request": request,
        "mib": counters.bytes / (1 << 20),
        "ms": counters.seconds * 1e3,
        "gib_s": counters.gib_s,
        "descriptors": counters.descriptors or None,
        "transport": transport,
    }


def _decode_metrics(client: ProbeClient, plan: Plan) -> MetricSamples:
    """Decode instances' counters, summed over all decoders."""
    total: MetricSamples = {}
    for engine in plan.decode:
        url = f"http://{plan.engine_address(engine)}:{engine.http_port}/metrics"
        for key, value in client.scrape(engine.name, url).items():
            total[key] = total.get(key, 0.0) + value
    return total


@dataclass(frozen=True)
class L1State:
    """An LMCache server's L1, as its /status gives it (gauges: it counts no stores)."""

    objects: int
    usage: float  # of its memory
    watermark: float | None  # where its eviction starts (None: it has no eviction controller)
    eviction_ratio: float = 0.0  # the share of its objects one eviction drops

    @property
    def evicting(self) -> bool:
        """Its object count may have fallen by eviction: at or past its watermark a store
        evicts as it adds, and an eviction drops the ratio of its objects, leaving the usage
        as low as watermark x (1 - ratio). So a smoke whose stores crossed the watermark
        between two reads reads below it both times (measured on an H100: -68 objects at a
        usage under the watermark before and after). Below that floor no eviction ran since
        the usage was last there: stores only add."""
        if self.watermark is None:
            return False
        return self.usage >= self.watermark * (1 - self.eviction_ratio)


def _lmcache_objects(
    plan: Plan, sources: VerdictSources, read_inside: ReadInside | None
) -> dict[str, L1State] | None:
    """Each LMCache server's L1: its HTTP API listens on its host's loopback (it shows the
    server's environment), so it is read from inside the server's container (None: no way in)."""
    if read_inside is None:
        return None if sources.object_stores else {}
    states: dict[str, L1State] = {}
    for service, port in sources.object_stores:
        url = f"http://127.0.0.1:{port}/status"
        status = Reply.parse(read_inside(service, url), Origin(plan.stack, service, "/status"))
        states[service] = l1_state(status.part("storage_manager"))
    return states


def l1_state(storage: Reply) -> L1State:
    l1 = storage.part("l1_manager")
    eviction = storage.body.get("l1_eviction_controller")
    watermark = eviction.get("trigger_watermark") if isinstance(eviction, dict) else None
    watermark = None if isinstance(watermark, bool) else watermark
    ratio = eviction.get("eviction_ratio") if isinstance(eviction, dict) else None
    ratio = ratio if isinstance(ratio, int | float) and not isinstance(ratio, bool) else 0.0
    return L1State(
        objects=l1.require("total_object_count", int),
        usage=l1.number("memory_usage_ratio"),
        watermark=float(watermark) if isinstance(watermark, int | float) else None,
        eviction_ratio=min(max(float(ratio), 0.0), 1.0),
    )


def _kv_rows(
    sources: VerdictSources, before: MetricSamples, after: MetricSamples
) -> list[VerdictRow]:
    def delta(name: str, labels: dict[str, str] | None = None) -> float:
        return metric_sum(after, name, labels) - metric_sum(before, name, labels)

    external = delta(_SOURCE, {"source": "external_kv_transfer"})
    local = delta(_SOURCE, {"source": "local_compute"})
    allowed = _SMOKE_REQUESTS * sources.local_compute_per_request
    rows = [
        VerdictRow(
            "prompt tokens from prefill (decode: external_kv_transfer)",
            f"{external:.0f}",
            "> 0",
            external > 0,
        ),
        VerdictRow(
            "prompt tokens computed on decode (local_compute)",
            f"{local:.0f}",
            str(allowed),
            local == allowed,
        ),
    ]
    for counter in sources.decode_rows:
        change = delta(counter.metric)
        passed = change == 0 if counter.must_be_zero else change > 0
        expected = "0" if counter.must_be_zero else "> 0"
        rows.append(VerdictRow(counter.check, f"{change:.0f}", expected, passed))
    return rows


def _stamp_row(plan: Plan, completion: Completion) -> VerdictRow:
    identifier = completion.id
    if router_of(plan).stamp == "response-id":
        stamped = "___prefill_addr_" in identifier and "___decode_addr_" in identifier
        return VerdictRow(
            "router stamps prefill/decode pair",
            identifier[:80],
            "cmpl-___prefill_addr_..___decode_addr_..",
            stamped,
        )
    prefill, decode = completion.pair
    observed = f"X-Xpyd-Prefill: {prefill}, X-Xpyd-Decode: {decode}"
    names = {e.name for e in plan.prefill}, {e.name for e in plan.decode}
    return VerdictRow(
        "router stamps prefill/decode pair",
        observed,
        "a planned pair",
        prefill in names[0] and decode in names[1],
    )


def _stickiness_row(
    plan: Plan, client: ProbeClient, router: Router, headers: dict[str, str]
) -> VerdictRow:
    check, expected = "session stickiness", "same pair for one session"
    if len(plan.prefill) * len(plan.decode) == 1:
        return VerdictRow(check, "1 prefill x 1 decode: nothing to choose", expected, None)
    if not router_of(plan).sticky_sessions(plan):
        return VerdictRow(check, "no session header configured", expected, None)
    model = plan.model.served_name
    pairs = {complete(client, router, model, "stickiness probe", headers).pair for _ in range(4)}
    return VerdictRow(
        check, f"{len(pairs)} distinct pair(s) over 4 requests", expected, len(pairs) == 1
    )


def lmcache_row(before: dict[str, L1State] | None, after: dict[str, L1State] | None) -> VerdictRow:
    check, expected = "LMCache objects stored", "prefill side > 0"
    if before is None or after is None:
        return VerdictRow(check, _INSIDE_ONLY, expected, None, "info")
    if not before:
        return VerdictRow(check, "no LMCache server in this topology", "-", None)
    grown = {name: after[name].objects - before[name].objects for name in before}
    observed = ", ".join(f"{name} {count:+d}" for name, count in grown.items())
    prefill = [name for name in before if "-prefill-" in name]
    full = [n for n in prefill if before[n].evicting or after[n].evicting]
    if full:
        # A full L1 (after a benchmark) evicts as it stores: the count proves nothing either way.
        usage = ", ".join(f"{n} {after[n].usage:.0%} of its L1" for n in full)
        return VerdictRow(check, f"{observed}; evicting ({usage})", expected, None, "info")
    passed = sum(grown[n] for n in prefill) > 0
    if not passed:  # what the L1 held, read both times: whether an eviction could explain it
        held = (f"{n} {before[n].usage:.0%} -> {after[n].usage:.0%} of its L1" for n in prefill)
        observed = f"{observed}; {', '.join(held)}"
    return VerdictRow(check, observed, expected, passed)
