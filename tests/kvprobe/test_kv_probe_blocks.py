"""The probe's --block-kib: a transfer as many descriptors, the shape vLLM's NIXL connector
gives the KV (32 KiB per layer, K or V, and block for Llama-3.1-8B in bf16). The live pairs
(tests/kvprobe/test_kv_probe_live.py) move data; this is the list and the bounds."""

from __future__ import annotations

import pytest

from generator.kvprobe.nixl_kv_probe import blocks, parse_args


def test_the_descriptors_cover_the_buffer_once_in_order() -> None:
    assert blocks(1000, 10, 4, 3) == [(1000, 4, 3), (1004, 4, 3), (1008, 2, 3)]
    assert blocks(0, 8, 8, 0) == [(0, 8, 0)]
    listed = blocks(1 << 40, 1 << 30, 32 << 10, 0)
    assert len(listed) == 32768
    assert sum(length for _, length, _ in listed) == 1 << 30


def test_block_kib_is_bounded_by_the_buffer() -> None:
    assert (
        parse_args(["run", "--peer", "h:1", "--device", "cpu", "--block-kib", "32"]).block_kib == 32
    )
    assert parse_args(["run", "--peer", "h:1", "--device", "cpu"]).block_kib == 0
    for bad in ("-1", str(256 * 1024 + 1)):
        with pytest.raises(SystemExit):
            parse_args(["run", "--peer", "h:1", "--device", "cpu", "--block-kib", bad])


def test_threads_are_bounded() -> None:
    assert parse_args(["run", "--peer", "h:1", "--device", "cpu", "--threads", "4"]).threads == 4
    for bad in ("-1", "65"):
        with pytest.raises(SystemExit):
            parse_args(["run", "--peer", "h:1", "--device", "cpu", "--threads", bad])
