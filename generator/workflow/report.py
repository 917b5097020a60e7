"""How a run tells its user what happens: a callback object the caller supplies.

The workflow never prints: the CLI passes a ``Reporter`` that writes to the console, a test
passes one that keeps the events. Messages are plain text (they carry user input and error
text); the level says how to show them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from generator.plan import Plan
    from generator.probes import SmokeResult

__all__ = ["EventLevel", "RecordingReporter", "Reporter"]


class EventLevel(StrEnum):
    INFO = "info"  # progress: a task started, a wait goes on
    DONE = "done"  # a task finished well
    WARN = "warn"  # something the user should look at; the run goes on
    FAILED = "failed"  # a task failed


class Reporter(Protocol):
    def event(self, level: EventLevel, message: str) -> None:
        """One line about the run (the caller adds time stamps and style)."""

    def service_log(self, service: str, condition: str, tail: str) -> None:
        """The last log lines of a service that exited or is unhealthy."""

    def verdict(self, plan: Plan, result: SmokeResult) -> None:
        """The smoke verdict, once per run that got that far."""


@dataclass
class RecordingReporter:
    """Keeps what a run reported (for callers that show it later, and for tests)."""

    events: list[tuple[EventLevel, str]] = field(default_factory=list)
    service_logs: list[tuple[str, str, str]] = field(default_factory=list)
    verdicts: list[SmokeResult] = field(default_factory=list)

    def event(self, level: EventLevel, message: str) -> None:
        self.events.append((level, message))

    def service_log(self, service: str, condition: str, tail: str) -> None:
        self.service_logs.append((service, condition, tail))

    def verdict(self, plan: Plan, result: SmokeResult) -> None:
        self.verdicts.append(result)
