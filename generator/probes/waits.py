"""Waiting for services to become healthy, with tenacity: exponential backoff with a cap,
a deadline per service, progress lines, and an immediate failure (with the log tail) when
the container exits while we wait."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential,
)

from generator.errors import StackError
from generator.probes.http import Answer, ProbeClient, Transport

__all__ = ["Check", "NotReady", "wait_until_ready"]

_BACKOFF_MAX_S = 2.0  # a /health poll is cheap; a late 'ready' costs every run
_PROGRESS_EVERY_S = 15.0


class NotReady(Exception):
    """Not ready yet: try again (connection refused, 503, model not listed yet)."""


@dataclass(frozen=True)
class Check:
    """One probe of a service: ``url`` must answer 2xx and pass ``accept`` (if given)."""

    url: str
    accept: Callable[[Answer], str | None] | None = None  # returns a reason to wait

    def run(self, client: ProbeClient) -> None:
        answer = client.answer(self.url)
        if answer is None:
            raise NotReady(f"{self.url}: no answer")
        if answer.status >= 400:
            raise NotReady(f"{self.url}: HTTP {answer.status}")
        reason = self.accept(answer) if self.accept else None
        if reason:
            raise NotReady(f"{self.url}: {reason}")


def wait_until_ready(
    service: str,
    checks: list[Check],
    *,
    deadline_s: float,
    assert_alive: Callable[[], None],
    progress: Callable[[str], None],
    transport: Transport | None = None,
) -> float:
    """Run ``checks`` in order until all pass; seconds waited. ``assert_alive`` raises
    ``StackError`` when the container is gone, which ends the wait at once."""
    started = time.monotonic()
    last_note = [started]

    def note(state: RetryCallState) -> None:
        now = time.monotonic()
        if now - last_note[0] >= _PROGRESS_EVERY_S:
            last_note[0] = now
            reason = state.outcome.exception() if state.outcome else None
            progress(
                f"waiting for {service} ({now - started:.0f} s of {deadline_s:.0f} s): {reason}"
            )

    retrying = Retrying(
        retry=retry_if_exception_type(NotReady),
        wait=wait_exponential(multiplier=0.25, max=_BACKOFF_MAX_S),
        stop=stop_after_delay(deadline_s),
        before_sleep=note,
        reraise=True,
    )
    with ProbeClient("<stack>", timeout_s=5.0, transport=transport) as client:
        try:
            for attempt in retrying:
                with attempt:
                    assert_alive()
                    for check in checks:
                        check.run(client)
        except NotReady as exc:
            raise StackError(
                f"{service} was not ready after {deadline_s:.0f} s (last: {exc})",
                hint=f"look at its log: python -m generator logs <stack> {service}",
            ) from exc
    return time.monotonic() - started
