"""bench's idle-CPU window (generator/bench/arms.py): the mean per service over its looks, and
no sleeping through a window where the runtime cannot sample at all."""

from __future__ import annotations

import time

from generator.bench.arms import idle_cpu_means


def test_the_mean_per_service_over_every_hosts_look() -> None:
    looks = iter([[{"decode-0": 4.0}, {"prefill-0": 90.0}], [{"decode-0": 6.0}, {}]])
    # 2.5 s: two looks, one every 2 s (docker stats samples about a second).
    assert idle_cpu_means(lambda: next(looks), 2.5) == {"decode-0": 5.0, "prefill-0": 90.0}


def test_a_runtime_that_cannot_sample_ends_the_window_at_once() -> None:
    """Under the Slurm runtime every look finds nothing: a 10 s window slept for nothing."""
    looks = []

    def look() -> list[dict[str, float]]:
        looks.append(time.monotonic())
        return [{}, {}]

    started = time.monotonic()
    assert idle_cpu_means(look, 30.0) == {}
    assert len(looks) == 1
    assert time.monotonic() - started < 1.0
