"""The smoke verdict's "LMCache objects stored" row: the L1's object count is a gauge, so once
the L1 is full (after a benchmark, as on an H100 with a 20 GB L1: -64 objects over a smoke
that stored 42) a store evicts as it adds, and the count proves nothing."""

from __future__ import annotations

import json

import pytest

from generator.errors import ProbeError
from generator.probes.http import Origin, Reply
from generator.probes.smoke import L1State, l1_state, lmcache_row


def _status(objects: object, usage: object, watermark: object = 0.8, ratio: object = 0.2) -> Reply:
    controller = {"eviction_policy": "LRU", "trigger_watermark": watermark, "eviction_ratio": ratio}
    body = {
        "l1_manager": {"total_object_count": objects, "memory_usage_ratio": usage},
        "l1_eviction_controller": controller,
    }
    return Reply.parse(json.dumps(body), Origin("s", "lmcache-prefill-0", "/status"))


def test_the_l1_state_is_read_from_the_status() -> None:
    assert l1_state(_status(42, 0.5)) == L1State(42, 0.5, 0.8, 0.2)
    assert l1_state(_status(0, 0, 1, None)) == L1State(0, 0.0, 1.0, 0.0)
    assert l1_state(_status(3, 0.9, None)).watermark is None
    with pytest.raises(ProbeError, match="memory_usage_ratio"):
        l1_state(_status(3, "full"))
    with pytest.raises(ProbeError, match="total_object_count"):
        l1_state(_status(True, 0.1))


def test_stores_on_the_prefill_side_pass_and_none_fail() -> None:
    before = {"lmcache-prefill-0": L1State(10, 0.1, 0.8), "lmcache-decode-0": L1State(0, 0, 0.8)}
    grown = {"lmcache-prefill-0": L1State(52, 0.2, 0.8), "lmcache-decode-0": L1State(0, 0, 0.8)}
    row = lmcache_row(before, grown)
    assert (row.observed, row.passed) == ("lmcache-prefill-0 +42, lmcache-decode-0 +0", True)
    assert lmcache_row(before, before).passed is False


def test_a_full_l1_is_not_judged_by_its_count() -> None:
    before = {"lmcache-prefill-0": L1State(300, 0.97, 0.8)}
    after = {"lmcache-prefill-0": L1State(236, 0.96, 0.8)}
    row = lmcache_row(before, after)
    assert row.passed is None
    assert row.mark == "info"
    assert row.observed == "lmcache-prefill-0 -64; evicting (lmcache-prefill-0 96% of its L1)"
    # Below its watermark a fall is a failure (the store lost objects it should keep).
    calm = {"lmcache-prefill-0": L1State(300, 0.5, 0.8)}
    assert lmcache_row(calm, {"lmcache-prefill-0": L1State(236, 0.4, 0.8)}).passed is False


def test_no_server_no_row_to_judge() -> None:
    assert lmcache_row({}, {}).passed is None


def test_a_fall_in_the_band_an_eviction_leaves_is_not_judged() -> None:
    """An eviction drops eviction_ratio of the objects: a smoke whose stores crossed the
    watermark between the two reads reads below it both times (an H100 run: -68 objects at a
    usage under 0.8 before and after). Below watermark x (1 - ratio) no eviction ran."""
    before = {"lmcache-prefill-0": L1State(300, 0.70, 0.8, 0.2)}
    after = {"lmcache-prefill-0": L1State(232, 0.66, 0.8, 0.2)}
    row = lmcache_row(before, after)
    assert (row.passed, row.mark) == (None, "info")
    assert row.observed == "lmcache-prefill-0 -68; evicting (lmcache-prefill-0 66% of its L1)"
    floor = {"lmcache-prefill-0": L1State(300, 0.60, 0.8, 0.2)}
    fell = lmcache_row(floor, {"lmcache-prefill-0": L1State(232, 0.55, 0.8, 0.2)})
    assert fell.passed is False
    assert fell.observed == "lmcache-prefill-0 -68; lmcache-prefill-0 60% -> 55% of its L1"
