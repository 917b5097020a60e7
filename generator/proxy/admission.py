"""What the proxy takes on at once: requests in flight and bytes of request bodies held.

Both are plain counters on the event loop (no locks: one thread). Past either limit a request is
answered 503 with Retry-After at once, instead of queueing until the proxy runs out of memory
or sockets and stops answering its health checks too.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Admission", "BodyBudget"]


@dataclass
class BodyBudget:
    """Bytes of request bodies held by requests in flight, up to ``capacity``."""

    capacity: int
    held: int = 0

    def take(self, size: int) -> bool:
        if self.held + size > self.capacity:
            return False
        self.held += size
        return True

    def give_back(self, size: int) -> None:
        self.held -= size


@dataclass
class Admission:
    """Requests in flight, up to ``capacity``."""

    capacity: int
    in_flight: int = 0
    refused: int = 0

    def enter(self) -> bool:
        if self.in_flight >= self.capacity:
            self.refused += 1
            return False
        self.in_flight += 1
        return True

    def leave(self) -> None:
        self.in_flight -= 1
