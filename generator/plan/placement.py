"""Which host and which GPUs (gpu profile) or cores (cpu profile) each engine gets.

Devices are never shared. Auto placement takes, per instance, the first host with a free
block of ``tp`` devices whose start is a multiple of ``tp`` in the host's list (TP groups
stay contiguous and aligned, e.g. [0-3] and [4-7], never [2-5]); prefill before decode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from generator.errors import PlanError
from generator.plan.models import Role
from generator.spec import GroupPlacement, Profile, Spec

__all__ = ["GpuView", "Slot", "gpu_views", "place_engines"]

_T = TypeVar("_T")


@dataclass(frozen=True)
class Slot:
    role: Role
    index: int
    host: str
    devices: tuple[int, ...]
    http_port: int | None  # fixed by placement.<role>.http_ports, else None (auto)


class _Pool:
    """Free devices of one host, in the order the host lists them."""

    def __init__(self, host: str, devices: list[int], field: str) -> None:
        self.host, self.devices, self.field = host, devices, field
        self.owner: dict[int, str] = {}

    def take_aligned(self, size: int, owner: str) -> tuple[int, ...] | None:
        for start in range(0, len(self.devices) - size + 1, size):
            block = self.devices[start : start + size]
            if not any(device in self.owner for device in block):
                return self._assign(block, owner)
        return None

    def take_exact(self, wanted: list[int], owner: str, field: str) -> tuple[int, ...]:
        for device in wanted:
            if device not in self.devices:
                raise PlanError(
                    field,
                    f"{owner} asks for device {device}, which host {self.host} does not list "
                    f"({self.field}: {self.devices})",
                    fix=f"use devices from {self.field}, or add it there",
                )
            if device in self.owner:
                raise PlanError(
                    field,
                    f"device {device} on host {self.host} is given to both "
                    f"{self.owner[device]} and {owner}",
                    fix="give every engine its own devices; they are never shared",
                )
        return self._assign(wanted, owner)

    def _assign(self, block: list[int], owner: str) -> tuple[int, ...]:
        for device in block:
            self.owner[device] = owner
        return tuple(block)


@dataclass(frozen=True)
class GpuView:
    visible: tuple[int, ...]  # host GPU ids the engine's container sees, ascending
    selected: tuple[int, ...]  # its own GPUs, as positions among ``visible``


def gpu_views(slots: list[Slot]) -> dict[Slot, GpuView]:
    """What each engine's container sees. On a host with both prefill and decode engines each
    of them may swap KV with every engine of the other role there, and CUDA IPC needs both
    GPUs visible: so each sees the union of that host's engine GPUs and selects its own. A
    host with one role only has no same-host KV traffic: each engine sees its own GPUs."""
    views: dict[Slot, GpuView] = {}
    for slot in slots:
        same_host = [other for other in slots if other.host == slot.host]
        mixed = len({other.role for other in same_host}) == 2
        visible = sorted(
            {gpu for other in same_host for gpu in other.devices} if mixed else slot.devices
        )
        selected = tuple(visible.index(gpu) for gpu in slot.devices)
        views[slot] = GpuView(tuple(visible), selected)
    return views


def place_engines(spec: Spec) -> list[Slot]:
    pools = _make_pools(spec)
    slots: list[Slot] = []
    for role in (Role.PREFILL, Role.DECODE):
        group = getattr(spec, role.value)
        explicit = getattr(spec.placement, role.value) if spec.placement else None
        for index in range(group.count):
            slots.append(_place_one(spec, pools, role, index, explicit))
    return slots


def _make_pools(spec: Spec) -> dict[str, _Pool]:
    attr = "gpus" if spec.profile is Profile.GPU else "cpus"
    pools: dict[str, _Pool] = {}
    for position, host in enumerate(spec.hosts):
        devices = getattr(host, attr)
        field = f"hosts[{position}].{attr}"
        pools[host.name] = _Pool(host.name, list(devices) if devices is not None else [], field)
    return pools


def _units(spec: Spec) -> str:
    return "GPUs" if spec.profile is Profile.GPU else "CPU cores"


def _place_one(
    spec: Spec, pools: dict[str, _Pool], role: Role, index: int, explicit: GroupPlacement | None
) -> Slot:
    name = f"{role.value}-{index}"
    size = getattr(spec, role.value).tp
    if explicit is None:
        for pool in pools.values():
            devices = pool.take_aligned(size, name)
            if devices is not None:
                return Slot(role, index, pool.host, devices, None)
        raise _no_room(spec, pools, role, size)
    host = _pick(explicit.hosts, index)
    pool = pools[host]
    if explicit.gpus is not None:
        wanted = list(explicit.gpus[index])
        field = f"placement.{role.value}.gpus"
        if len(wanted) != size:
            raise PlanError(
                field,
                f"{name} gets {len(wanted)} devices but {role.value}.tp is {size}",
                fix=f"give {name} exactly {size} devices",
            )
        devices = pool.take_exact(wanted, name, field)
    else:
        found = pool.take_aligned(size, name)
        if found is None:
            raise _no_room(spec, {host: pool}, role, size)
        devices = found
    port = _pick(explicit.http_ports, index) if explicit.http_ports else None
    return Slot(role, index, host, devices, port)


def _pick(values: list[_T], index: int) -> _T:
    """Seed-style lists: one entry for all instances, or one per instance."""
    return values[0] if len(values) == 1 else values[index]


def _no_room(spec: Spec, pools: dict[str, _Pool], role: Role, size: int) -> PlanError:
    units = _units(spec)
    largest = max((len(pool.devices) for pool in pools.values()), default=0)
    if size > largest:
        if largest == 0:
            field = next(iter(pools.values())).field if pools else "hosts"
            return PlanError(
                field,
                f"lists no {units}, so {role.value} engines have nowhere to run",
                fix=f"list the {units} this stack may use, e.g. {field.split('.')[-1]}: [0, 1]",
            )
        return PlanError(
            f"{role.value}.tp",
            f"{role.value} needs {size} {units} per engine but no host has more than {largest}; "
            "tensor parallelism cannot span hosts",
            fix=f"lower {role.value}.tp to at most {largest}, or add {units} to a host",
        )
    need = sum(getattr(spec, r).count * getattr(spec, r).tp for r in ("prefill", "decode"))
    have = sum(len(pool.devices) for pool in pools.values())
    listing = "; ".join(f"{pool.field}: {pool.devices}" for pool in pools.values())
    return PlanError(
        f"{role.value}.count",
        f"prefill ({spec.prefill.count} x TP {spec.prefill.tp}) and decode "
        f"({spec.decode.count} x TP {spec.decode.tp}) need {need} {units} in aligned blocks; "
        f"the hosts have {have} ({listing})",
        fix=f"lower prefill/decode count or tp, or list more {units} or hosts",
    )
