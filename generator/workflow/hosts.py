"""One host of a running stack, as every runtime gives it: what it runs (the neutral service
model) and what runs it (a ``ServiceRuntime``). A runtime's own extras (compose's Docker
engine and its builder) stay in its driver (generator/workflow/runtimes/)."""

from __future__ import annotations

from dataclasses import dataclass

from generator.plan import HostPlan
from generator.runtimes import ServiceRuntime
from generator.services.model import HostServices

__all__ = ["HostStack"]


@dataclass(frozen=True)
class HostStack:
    host: HostPlan
    services: HostServices  # what render planned for this host, before any serializer's shape
    runtime: ServiceRuntime

    @property
    def name(self) -> str:
        return self.host.name
