"""Per-host port bookkeeping: fixed ports first, then deterministic first-fit blocks; on a
pod network, a port every engine pod listens on (``claim_common``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from generator.errors import PlanError
from generator.plan.agent_ports import AGENT_PORTS
from generator.plan.models import PortUse

__all__ = ["PortBook"]

_MAX_PORT = 65535


@dataclass
class _Claim:
    owner: str
    purpose: str
    field: str


@dataclass
class PortBook:
    """All ports claimed so far, per host. Claims never overlap on one host, except a port
    several pods share (``claim_common``), each at its own address."""

    _claims: dict[str, dict[int, _Claim]] = field(default_factory=dict)
    # (host, preferred, size) -> where the last first-fit search for it ended: claims are
    # never released, so no block of that size is free below it (planning stays linear).
    _searched: dict[tuple[str, int, int], int] = field(default_factory=dict)
    # (host, port) -> owners after the first of a port that pods share (claim_common).
    _sharers: dict[tuple[str, int], list[_Claim]] = field(default_factory=dict)

    def claim_fixed(self, host: str, port: int, *, owner: str, purpose: str, field: str) -> int:
        """A port the user wrote down: a collision is the user's to fix, so name both fields."""
        taken = self._claims.setdefault(host, {}).get(port)
        if taken is not None:
            raise PlanError(
                field,
                f"port {port} on host {host} is already used by {taken.owner} ({taken.purpose}, "
                f"from {taken.field})",
                fix="give each service on the same host its own port",
            )
        self._claims[host][port] = _Claim(owner, purpose, field)
        return port

    def claim_block(
        self, host: str, preferred: int, size: int, *, owner: str, purpose: str, field: str
    ) -> tuple[int, ...]:
        """The first ``size`` consecutive free ports at or above ``preferred`` (skipping the
        ports of common cluster agents: on host networking they would clash)."""
        used = self._claims.setdefault(host, {})
        start = self._searched.get((host, preferred, size), preferred)
        while start + size - 1 <= _MAX_PORT:
            clash = next(
                (p for p in range(start, start + size) if p in used or p in AGENT_PORTS), None
            )
            if clash is None:
                self._searched[host, preferred, size] = start + size
                ports = tuple(range(start, start + size))
                for rank, port in enumerate(ports):
                    label = purpose if size == 1 else f"{purpose} (tp rank {rank})"
                    used[port] = _Claim(owner, label, field)
                return ports
            start = clash + 1
        raise PlanError(
            field,
            f"no {size} free consecutive ports at or above {preferred} on host {host}",
            fix=f"lower {field} so the stack's ports fit below {_MAX_PORT}",
        )

    def claim_common(
        self, owners: Sequence[tuple[str, str]], preferred: int, *, purpose: str, field: str
    ) -> int:
        """One port number for several owners, each (host, owner) a pod of its own (the
        Kubernetes export: every pod has its own address, so their sockets never meet): the
        first at or above ``preferred`` free on all their hosts. It stays claimed there, so no
        other service of those hosts takes it."""
        hosts = {host for host, _ in owners}
        for port in range(preferred, _MAX_PORT + 1):
            if port not in AGENT_PORTS and all(port not in self._claims.get(h, {}) for h in hosts):
                for host, owner in owners:
                    self._share(host, port, _Claim(owner, purpose, field))
                return port
        raise PlanError(
            field,
            f"no port at or above {preferred} is free on every host of {len(owners)} services",
            fix=f"lower {field}",
        )

    def _share(self, host: str, port: int, claim: _Claim) -> None:
        used = self._claims.setdefault(host, {})
        if port in used:
            self._sharers.setdefault((host, port), []).append(claim)
        else:
            used[port] = claim

    def table(self) -> tuple[PortUse, ...]:
        return tuple(
            PortUse(host=host, port=port, owner=claim.owner, purpose=claim.purpose)
            for host, claims in self._claims.items()
            for port, first in sorted(claims.items())
            for claim in (first, *self._sharers.get((host, port), ()))
        )
