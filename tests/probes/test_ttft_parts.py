"""The TTFT split: parts read from the engines' own histograms (a real cpu decoder's page),
the P/D and colocated shapes, and parts that add up to the client's TTFT."""

from __future__ import annotations

from pathlib import Path

import pytest

from generator.probes.http import parse_samples
from generator.probes.ttft_parts import (
    EngineTimes,
    Histogram,
    RoleTimes,
    _histogram,
    ttft_parts,
)

RECORDED = Path(__file__).parent / "recorded" / "cpu-p2p" / "decode-0.txt"


def role(queue: float, prefill: float, ttft: float, e2e: float, count: float = 10) -> RoleTimes:
    return RoleTimes(*(Histogram(ms * count / 1000, count) for ms in (queue, prefill, ttft, e2e)))


def test_a_real_vllm_page_gives_its_histograms_sums_and_counts() -> None:
    samples = parse_samples(RECORDED.read_text())
    queue = _histogram(samples, "vllm:request_queue_time_seconds")
    assert queue.count > 0
    assert queue.seconds > 0
    assert queue.mean_ms == pytest.approx(1000 * queue.seconds / queue.count)


def test_the_pd_parts_add_up_to_the_clients_ttft() -> None:
    times = EngineTimes(role(5, 200, 205, 230), role(40, 20, 70, 900))
    parts = {part.part: part.mean_ms for part in ttft_parts(400.0, times, 8.0)}
    assert parts["prefiller: queue"] == pytest.approx(5)
    assert parts["prefiller: API and output"] == pytest.approx(25)  # 230 - 5 - 200
    assert parts["decoder: queue and KV wait (until first scheduled)"] == pytest.approx(40)
    assert parts["decoder: API and output"] == pytest.approx(10)  # 70 - 40 - 20
    assert parts["decoder: of which NIXL's KV transfer"] == 8.0
    assert parts["router, HTTP and streaming (the rest)"] == pytest.approx(100)  # 400-230-70
    summed = [
        "prefiller: queue",
        "prefiller: prefill (compute, KV store)",
        "prefiller: API and output",
        "decoder: queue and KV wait (until first scheduled)",
        "decoder: first token",
        "decoder: API and output",
        "router, HTTP and streaming (the rest)",
    ]
    assert sum(parts[name] or 0.0 for name in summed) == pytest.approx(400)
    assert all(parts[name] is not None for name in summed)


def test_a_colocated_run_is_one_engine_and_the_rest() -> None:
    parts = ttft_parts(300.0, EngineTimes(role(10, 250, 280, 3000)), None)
    names = [part.part for part in parts]
    assert names[0] == "TTFT (client's mean)"
    assert names[1].startswith("engine:")
    assert not any(name.startswith("decoder") for name in names)
    assert parts[-1].mean_ms == pytest.approx(20)


def test_the_difference_of_two_readings_is_the_runs_own() -> None:
    before, after = EngineTimes(role(5, 5, 5, 5, 2)), EngineTimes(role(5, 5, 5, 5, 12))
    change = after - before
    assert change.prefill.queue.count == 10
    assert change.prefill.queue.mean_ms == pytest.approx(5)


def test_no_timed_request_gives_no_parts() -> None:
    assert ttft_parts(100.0, EngineTimes(), 1.0) == []
    assert ttft_parts(None, EngineTimes(role(1, 1, 1, 1)), 1.0) == []


def test_a_router_that_sends_both_requests_at_once_is_split_along_the_decoder() -> None:
    """The means of a nixl-mp run on one H200 (vllm-router sends the decoder's request with the
    prefiller's): the decoder's queue holds the prefiller's whole request and the KV's arrival."""
    prefill = role(6.3, 334.9, 341.2, 359.7, count=30)
    decode = role(383.4, 12.4, 415.9, 1600, count=30)
    parts = {p.part: p.mean_ms for p in ttft_parts(423.4, EngineTimes(prefill, decode), 22.3)}
    assert parts["decoder: waits while the prefiller serves (sent at once)"] == pytest.approx(359.7)
    assert parts["  prefiller: prefill (compute, KV store)"] == pytest.approx(334.9)
    assert parts["decoder: KV wait after the prefiller's answer"] == pytest.approx(23.7)
    assert parts["decoder: of which NIXL's KV transfer"] == 22.3
    assert parts["decoder: API and output"] == pytest.approx(20.1)  # 415.9 - 383.4 - 12.4
    assert parts["router, HTTP and streaming (the rest)"] == pytest.approx(7.5)
    along = [
        "decoder: waits while the prefiller serves (sent at once)",
        "decoder: KV wait after the prefiller's answer",
        "decoder: first token",
        "decoder: API and output",
        "router, HTTP and streaming (the rest)",
    ]
    assert sum(parts[name] or 0.0 for name in along) == pytest.approx(423.4)


def test_the_prefillers_first_token_ends_the_ttft_and_the_decoder_comes_after() -> None:
    """The means of an lmcache-pd run on one H200: our proxy sends the prefiller's token first,
    once the decoder's answer starts; counted in the TTFT, the decoder's parts left a rest of
    -23.8 ms."""
    prefill = role(0.0, 359.0, 360.0, 377.3, count=30)
    decode = role(0.0, 47.3, 58.5, 2400, count=30)
    times = EngineTimes(prefill, decode)
    sequential = {p.part: p.mean_ms for p in ttft_parts(412.1, times, 1.5)}
    assert sequential["router, HTTP and streaming (the rest)"] == pytest.approx(-23.8, abs=0.15)
    parts = {
        p.part: p.mean_ms for p in ttft_parts(412.1, times, 1.5, first_token_from_prefiller=True)
    }
    assert parts["router, HTTP and streaming (the rest)"] == pytest.approx(34.8)  # 412.1-377.3
    summed = [name for name in parts if name.startswith(("prefiller", "router"))]
    assert len(summed) == 4  # queue, prefill, API and output, the rest
    assert sum(parts[name] or 0.0 for name in summed) == pytest.approx(412.1)
    assert parts["KV push to the decoder (not summed)"] == 1.5  # NIXL's, as before
    after = "decoder, after the client's first token"
    assert parts[f"{after}: its first token"] == pytest.approx(47.3)
    assert not any(name.startswith("decoder:") for name in parts)
