"""Where the time to first token goes, per run: the client's mean TTFT split into the parts the
engines time themselves, read from their own request histograms around the run.

vLLM times each request it serves (v1 metrics, per engine): from its arrival to its first
scheduling (``vllm:request_queue_time_seconds``), from there to its first token
(``..._prefill_time_seconds``), arrival to first token (``vllm:time_to_first_token_seconds``)
and arrival to finish (``vllm:e2e_request_latency_seconds``). A P/D request is two engine
requests (the prefiller's for one token, the decoder's for the rest) and what neither engine
saw: the router, HTTP and streaming the first token back ("the rest").

Routers order the two requests differently. Our proxy (lmcache-pd) asks the decoder after the
prefiller answered and its KV-sent notices came, and sends the client the prefiller's first
token as soon as the decoder's answer starts (LMCache's P/D protocol: the first token is the
prefiller's): the client's TTFT is the prefiller's request and the rest, and the decoder's
queue (its KV load) and first token come after it, in the wait for the second token (measured
on an H200: counted in the TTFT, they left a rest of -23.8 ms). vllm-router's P/D mode (nixl-
mp, NIXL pushing into the decoder's blocks) sends both at once: the decoder's request waits
unscheduled (vLLM's WAITING_FOR_REMOTE_KVS) through the prefiller's whole request, so the
client's TTFT is the decoder's TTFT and the rest, and what the decoder waited beyond the
prefiller's request is the KV's arrival. Which of the two happened is read from the times
themselves: the requests overlapped when the decoder's mean queue time is at least the
prefiller's mean request time. NIXL's own transfer time (the KV counters) is shown beside the
decoder's wait.

On a nixl-mp prefiller the store of the prompt's KV into its LMCache server runs inside the
forward pass, so it is in the prefill time. Means over the run's requests; a per-request split
would need the engines' request ids, which vLLM keeps in its logs only.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from generator.plan import EnginePlan, Plan
from generator.probes.http import MetricSamples, ProbeClient, metric_sum

__all__ = ["EngineTimes", "Histogram", "TtftPart", "read_engine_times", "ttft_parts"]

_QUEUE = "vllm:request_queue_time_seconds"
_PREFILL = "vllm:request_prefill_time_seconds"
_TTFT = "vllm:time_to_first_token_seconds"
_E2E = "vllm:e2e_request_latency_seconds"
_SOURCE_CLIENT = "vLLM bench serve (client)"


@dataclass(frozen=True)
class Histogram:
    """A histogram's running sum (seconds) and count."""

    seconds: float = 0.0
    count: float = 0.0

    def __add__(self, other: Histogram) -> Histogram:
        return Histogram(self.seconds + other.seconds, self.count + other.count)

    def __sub__(self, before: Histogram) -> Histogram:
        return Histogram(self.seconds - before.seconds, self.count - before.count)

    @property
    def mean_ms(self) -> float | None:
        return 1000 * self.seconds / self.count if self.count > 0 else None


@dataclass(frozen=True)
class RoleTimes:
    """One role's engines' histograms, summed."""

    queue: Histogram = Histogram()
    prefill: Histogram = Histogram()
    ttft: Histogram = Histogram()
    e2e: Histogram = Histogram()

    def __add__(self, other: RoleTimes) -> RoleTimes:
        return RoleTimes(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def __sub__(self, before: RoleTimes) -> RoleTimes:
        return RoleTimes(*(getattr(self, f.name) - getattr(before, f.name) for f in fields(self)))


@dataclass(frozen=True)
class EngineTimes:
    prefill: RoleTimes = RoleTimes()  # a colocated stack's engines all count as prefill
    decode: RoleTimes = RoleTimes()

    def __sub__(self, before: EngineTimes) -> EngineTimes:
        return EngineTimes(self.prefill - before.prefill, self.decode - before.decode)


@dataclass(frozen=True)
class TtftPart:
    part: str
    mean_ms: float | None
    source: str


def read_engine_times(client: ProbeClient, plan: Plan, *, disaggregated: bool) -> EngineTimes:
    """``disaggregated``: the stack splits requests between prefillers and decoders (else
    every engine serves whole requests and counts as one role)."""
    prefill = sum((_role_times(client, plan, e) for e in plan.prefill), RoleTimes())
    decode = sum((_role_times(client, plan, e) for e in plan.decode), RoleTimes())
    return EngineTimes(prefill, decode) if disaggregated else EngineTimes(prefill + decode)


def ttft_parts(
    client_ttft_ms: float | None,
    times: EngineTimes,
    kv_ms_per_request: float | None,
    *,
    first_token_from_prefiller: bool = False,
) -> list[TtftPart]:
    """The client's mean TTFT and its parts (none when the engines timed no request).
    ``first_token_from_prefiller``: the router answers with the prefiller's token first
    (lmcache-pd's proxy, see above)."""
    prefill, decode = times.prefill, times.decode
    if client_ttft_ms is None or not prefill.e2e.count:
        return []
    if not decode.ttft.count:  # colocated: one engine serves the whole request
        return [
            TtftPart("TTFT (client's mean)", client_ttft_ms, _SOURCE_CLIENT),
            *_engine_parts("engine", prefill, prefill.ttft),
            _rest(client_ttft_ms, [prefill.ttft]),
        ]
    kv = TtftPart(
        "decoder: of which NIXL's KV transfer", kv_ms_per_request, "NIXL (vLLM's KV counters)"
    )
    client = TtftPart("TTFT (client's mean)", client_ttft_ms, _SOURCE_CLIENT)
    prefiller = _engine_parts("prefiller", prefill, prefill.e2e)
    if first_token_from_prefiller:  # the prefiller pushes the KV: shown, not summed
        push = TtftPart("KV push to the decoder (not summed)", kv_ms_per_request, kv.source)
        rest = _rest(client_ttft_ms, [prefill.e2e])
        return [client, *prefiller, push, rest, *_after_first(decode)]
    overlap = _overlap(prefill, decode)
    if overlap is None:
        return [
            client,
            *prefiller,
            *_engine_parts("decoder", decode, decode.ttft, queue_holds_kv=True),
            kv,
            _rest(client_ttft_ms, [prefill.e2e, decode.ttft]),
        ]
    queue, whole_prefill = overlap
    first, ttft = decode.prefill.mean_ms, decode.ttft.mean_ms
    api = ttft - queue - first if ttft is not None and first is not None else None
    return [
        client,
        TtftPart(
            "decoder: waits while the prefiller serves (sent at once)",
            whole_prefill,
            f"vLLM {_E2E} (prefiller)",
        ),
        *(TtftPart(f"  {part.part}", part.mean_ms, part.source) for part in prefiller),
        TtftPart(
            "decoder: KV wait after the prefiller's answer",
            queue - whole_prefill,
            f"vLLM {_QUEUE} less the prefiller's request",
        ),
        kv,
        TtftPart("decoder: first token", first, f"vLLM {_PREFILL}"),
        TtftPart("decoder: API and output", api, f"vLLM {_TTFT}"),
        _rest(client_ttft_ms, [decode.ttft]),
    ]


def _after_first(decode: RoleTimes) -> list[TtftPart]:
    """The decoder's share of the wait for the second token, not of the TTFT."""
    after = "decoder, after the client's first token"
    return [
        TtftPart(f"{after}: queue and KV load", decode.queue.mean_ms, f"vLLM {_QUEUE}"),
        TtftPart(f"{after}: its first token", decode.prefill.mean_ms, f"vLLM {_PREFILL}"),
    ]


def _overlap(prefill: RoleTimes, decode: RoleTimes) -> tuple[float, float] | None:
    """The decoder's mean queue time and the prefiller's mean request time when the router
    sent the decoder's request alongside the prefiller's (see above); else None."""
    queue, whole = decode.queue.mean_ms, prefill.e2e.mean_ms
    if queue is None or whole is None or queue < whole:
        return None
    return queue, whole


def _engine_parts(
    who: str, role: RoleTimes, whole: Histogram, *, queue_holds_kv: bool = False
) -> list[TtftPart]:
    queue, prefill, total = role.queue.mean_ms, role.prefill.mean_ms, whole.mean_ms
    other = None
    if queue is not None and prefill is not None and total is not None:
        other = total - queue - prefill
    queue_name = "queue and KV wait (until first scheduled)" if queue_holds_kv else "queue"
    compute = "first token" if queue_holds_kv else "prefill (compute, KV store)"
    return [
        TtftPart(f"{who}: {queue_name}", queue, f"vLLM {_QUEUE}"),
        TtftPart(f"{who}: {compute}", prefill, f"vLLM {_PREFILL}"),
        TtftPart(f"{who}: API and output", other, f"vLLM {_E2E if whole is role.e2e else _TTFT}"),
    ]


def _rest(client_ttft_ms: float, engine_parts: list[Histogram]) -> TtftPart:
    means = [part.mean_ms for part in engine_parts]
    known = [mean for mean in means if mean is not None]
    rest = client_ttft_ms - sum(known) if len(known) == len(means) else None
    return TtftPart(
        "router, HTTP and streaming (the rest)", rest, "client's TTFT less the engines'"
    )


def _role_times(client: ProbeClient, plan: Plan, engine: EnginePlan) -> RoleTimes:
    address = plan.engine_address(engine)
    samples = client.scrape(engine.name, f"http://{address}:{engine.http_port}/metrics")
    return RoleTimes(*(_histogram(samples, name) for name in (_QUEUE, _PREFILL, _TTFT, _E2E)))


def _histogram(samples: MetricSamples, name: str) -> Histogram:
    return Histogram(metric_sum(samples, f"{name}_sum"), metric_sum(samples, f"{name}_count"))
