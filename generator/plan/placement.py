"""Which host and which GPUs (gpu profile) or cores (cpu profile) each engine gets.

Devices are not shared unless the spec says ``gpu.share: true``. Auto placement takes, per
instance, the first host with a free block of ``tp`` devices whose start is a multiple of
``tp`` in the host's list (TP groups stay contiguous and aligned, e.g. [0-3] and [4-7], never
[2-5]); prefill before decode. With sharing, an engine that finds no free block takes the
aligned block with the fewest engines on it (a 1P1D stack on one GPU puts both there); how
much of each GPU every engine may take is checked by ``check_gpu_shares``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from generator.errors import PlanError
from generator.plan.models import Role
from generator.spec import GroupPlacement, Profile, Spec

__all__ = [
    "MAX_SHARED_FRACTION",
    "GpuView",
    "Slot",
    "check_gpu_shares",
    "gpu_views",
    "place_engines",
]

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

    def __init__(self, host: str, devices: list[int], field: str, *, shared: bool) -> None:
        self.host, self.devices, self.field, self.shared = host, devices, field, shared
        self.owner: dict[int, str] = {}
        self.users: dict[int, int] = {}  # engines per device (more than one only when shared)
        # Per block size, the first aligned block that may still be free: devices are only
        # ever taken, so the blocks before it stay taken (placement stays linear).
        self._first_free: dict[int, int] = {}

    def take_aligned(self, size: int, owner: str) -> tuple[int, ...] | None:
        starts = range(self._first_free.get(size, 0), len(self.devices) - size + 1, size)
        for start in starts:
            block = self.devices[start : start + size]
            if not any(device in self.owner for device in block):
                self._first_free[size] = start + size
                return self._assign(block, owner)
        self._first_free[size] = len(self.devices)
        blocks = [self.devices[i : i + size] for i in range(0, len(self.devices) - size + 1, size)]
        if self.shared and blocks:
            least_used = min(blocks, key=lambda block: max(self.users[d] for d in block))
            return self._assign(least_used, owner)
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
            if device in self.owner and not self.shared:
                raise PlanError(
                    field,
                    f"device {device} on host {self.host} is given to both "
                    f"{self.owner[device]} and {owner}",
                    fix="give every engine its own devices, or set gpu.share: true (cpu "
                    "profile: cpu.share: true) to let engines share one",
                )
        return self._assign(wanted, owner)

    def _assign(self, block: list[int], owner: str) -> tuple[int, ...]:
        for device in block:
            self.owner.setdefault(device, owner)
            self.users[device] = self.users.get(device, 0) + 1
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
    by_host: dict[str, list[Slot]] = {}
    for slot in slots:
        by_host.setdefault(slot.host, []).append(slot)
    views: dict[Slot, GpuView] = {}
    for same_host in by_host.values():
        mixed = len({slot.role for slot in same_host}) == 2
        shared = tuple(sorted({gpu for slot in same_host for gpu in slot.devices}))
        position = {gpu: index for index, gpu in enumerate(shared)}
        for slot in same_host:
            if mixed:
                selected = tuple(position[gpu] for gpu in slot.devices)
                views[slot] = GpuView(shared, selected)
            else:
                own = tuple(sorted(slot.devices))
                views[slot] = GpuView(own, tuple(own.index(gpu) for gpu in slot.devices))
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
    gpu = spec.profile is Profile.GPU
    attr = "gpus" if gpu else "cpus"
    pools: dict[str, _Pool] = {}
    for position, host in enumerate(spec.hosts):
        devices = list(getattr(host, attr) or [])
        field = f"hosts[{position}].{attr}"
        shared = spec.gpu.share if gpu else spec.cpu.share
        pools[host.name] = _Pool(host.name, devices, field, shared=shared)
    return pools


MAX_SHARED_FRACTION = 0.9  # vLLM's own default for one engine: CUDA context and NCCL need room


def check_gpu_shares(spec: Spec, slots: list[Slot]) -> None:
    """Engines on one GPU must each say how much of it they take, and together leave room."""
    on_gpu: dict[tuple[str, int], list[Slot]] = {}
    for slot in slots:
        for gpu in slot.devices:
            on_gpu.setdefault((slot.host, gpu), []).append(slot)
    for (host, gpu), sharing in on_gpu.items():
        if len(sharing) < 2:
            continue
        names = ", ".join(f"{s.role.value}-{s.index}" for s in sharing)
        fractions = {s: getattr(spec, s.role.value).gpu_memory_utilization for s in sharing}
        unset = sorted({s.role.value for s, fraction in fractions.items() if fraction is None})
        if unset:
            raise PlanError(
                f"{unset[0]}.gpu_memory_utilization",
                f"{names} share GPU {gpu} on host {host}, but {' and '.join(unset)} engines do "
                "not say how much of it they take (vLLM would take 90% each)",
                fix=f"set {unset[0]}.gpu_memory_utilization, e.g. 0.4 for two engines per GPU",
            )
        total = sum(fraction or 0.0 for fraction in fractions.values())
        if total > MAX_SHARED_FRACTION + 1e-9:
            raise PlanError(
                "prefill.gpu_memory_utilization",
                f"{names} share GPU {gpu} on host {host} and take {total:.2f} of its memory "
                f"together, more than {MAX_SHARED_FRACTION}",
                fix="lower prefill/decode gpu_memory_utilization so that they sum to at most "
                f"{MAX_SHARED_FRACTION} on each GPU",
            )


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
