"""Config files the units hand to the services: plain data below the units (topologies and
routers return it), which the service model and the serializers place and write."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ConfigFile"]


@dataclass(frozen=True)
class ConfigFile:
    """A config file a service reads, rendered beside its host's deployment files."""

    name: str  # the file's name in the deployment (compose: the config's name)
    path: str  # where it is written, relative to the host's folder
    target: str  # where the container reads it
    data: dict[str, Any]  # dumped as YAML
