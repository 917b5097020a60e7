"""A host compose drives: its own Docker engine, and this machine's for builds. Compose's own
steps (images, link cuts) read it; nothing else needs to know a host has an engine."""

from __future__ import annotations

from dataclasses import dataclass

from generator.docker import LOCAL, ComposeStack, DockerEndpoint
from generator.errors import XpydError
from generator.workflow.hosts import HostStack

__all__ = ["DockerHost", "docker_host"]


@dataclass(frozen=True)
class DockerHost(HostStack):
    """A host whose services compose runs through its own engine (``endpoint``), with the
    same project through this machine's engine (``builder``: images are built here, where
    the build cache and base images are, then shipped)."""

    endpoint: DockerEndpoint = LOCAL
    builder: ComposeStack | None = None

    @property
    def local(self) -> bool:
        return self.endpoint.is_local


def docker_host(stack: HostStack, what: str) -> DockerHost:
    """``stack`` as a host with a Docker engine; one clear error for ``what`` where it has none."""
    if not isinstance(stack, DockerHost):
        raise XpydError(
            f"{what} needs host {stack.name}'s Docker engine, and this stack's runtime uses none",
            hint="run it on a stack with runtime: compose",
        )
    return stack
