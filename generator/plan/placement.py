"""Which host and which GPUs (gpu profile) or cores (cpu profile) each engine gets.

Devices are not shared unless the spec says ``gpu.share: true``. Auto placement takes, per
instance, the first host with a free block of ``tp`` devices whose start is a multiple of
``tp`` in the host's list (TP groups stay contiguous and aligned, e.g. [0-3] and [4-7], never
[2-5]); prefill before decode. With sharing, an engine that finds no free block on any host
takes the aligned block with the fewest engines on it, the first such in host order (a 1P1D
stack on one GPU puts both there); how much of each GPU every engine may take is checked by
``check_gpu_shares``. No host gets more than ``MAX_ENGINES_PER_HOST`` engines.

An engine over several hosts (``<role>.nodes``) is placed as above with tp/nodes devices
(its leader), then each further node on the next host in the spec's order (wrapping round),
an aligned block of tp/nodes there.

Placement is linear in engines and devices: devices are only ever taken, so a host or block
found taken stays taken, and the least used shared block comes from a heap.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass
from typing import TypeVar

from generator.errors import PlanError
from generator.limits import MAX_ENGINES_PER_HOST
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
    # An engine over several hosts (<role>.nodes): this slot is its node ``node_rank``'s; the
    # leader's (rank 0) lists the others' here, each on a host of its own.
    node_rank: int = 0
    followers: tuple[Slot, ...] = ()

    def nodes(self) -> tuple[Slot, ...]:
        """Every node of the engine, the leader first."""
        return (self, *self.followers)


class _Pool:
    """Free devices of one host, in the order the host lists them."""

    def __init__(self, host: str, devices: list[int], field: str, *, shared: bool) -> None:
        self.host, self.devices, self.field, self.shared = host, devices, field, shared
        self.listed = set(devices)
        self.owner: dict[int, str] = {}
        self.users: dict[int, int] = {}  # engines per device (more than one only when shared)
        # Per block size, the first aligned block that may still be free: devices are only
        # ever taken, so the blocks before it stay taken (placement stays linear).
        self._first_free: dict[int, int] = {}

    def blocks(self, size: int) -> range:
        """Where the aligned blocks of ``size`` start."""
        return range(0, len(self.devices) - size + 1, size)

    def take_free(self, size: int, owner: str) -> tuple[int, ...] | None:
        for start in self.blocks(size)[self._first_free.get(size, 0) // size :]:
            block = self.devices[start : start + size]
            if not any(device in self.owner for device in block):
                self._first_free[size] = start + size
                return self._assign(block, owner)
        self._first_free[size] = len(self.devices)
        return None

    def take_aligned(self, size: int, owner: str) -> tuple[int, ...] | None:
        """A free block, else (shared) the least used one on this host."""
        found = self.take_free(size, owner)
        if found is not None or not self.shared or not self.blocks(size):
            return found
        start = min(self.blocks(size), key=lambda start: self.load(start, size))
        return self._assign(self.devices[start : start + size], owner)

    def load(self, start: int, size: int) -> int:
        """Engines on the busiest device of the block at ``start``."""
        return max(self.users.get(device, 0) for device in self.devices[start : start + size])

    def take_block(self, start: int, size: int, owner: str) -> tuple[int, ...]:
        return self._assign(self.devices[start : start + size], owner)

    def take_exact(self, wanted: list[int], owner: str, field: str) -> tuple[int, ...]:
        for device in wanted:
            if device not in self.listed:
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


class _AutoPlacer:
    """Auto placement over all hosts: the first free aligned block in host order, else (when
    shared) the least used aligned block, the first such in host order."""

    def __init__(self, by_host: dict[str, _Pool]) -> None:
        self.by_host = by_host
        self.pools = list(by_host.values())
        self._first_pool: dict[int, int] = {}  # per size: hosts before it have no free block
        self._least_used: dict[int, list[tuple[int, int, int]]] = {}  # (load, pool, start)

    def take(self, size: int, owner: str) -> tuple[_Pool, tuple[int, ...]] | None:
        first = self._first_pool.get(size, 0)
        for index in range(first, len(self.pools)):
            devices = self.pools[index].take_free(size, owner)
            if devices is not None:
                self._first_pool[size] = index
                return self.pools[index], devices
        self._first_pool[size] = len(self.pools)
        if not self.pools or not self.pools[0].shared:
            return None
        return self._take_least_used(size, owner)

    def _take_least_used(self, size: int, owner: str) -> tuple[_Pool, tuple[int, ...]] | None:
        heap = self._least_used.get(size)
        if heap is None:
            heap = [
                (p.load(s, size), i, s) for i, p in enumerate(self.pools) for s in p.blocks(size)
            ]
            heapq.heapify(heap)
            self._least_used[size] = heap
        while heap:
            load, index, start = heapq.heappop(heap)
            pool = self.pools[index]
            now = pool.load(start, size)  # explicit placements may have added engines since
            if now == load:
                heapq.heappush(heap, (load + 1, index, start))
                return pool, pool.take_block(start, size, owner)
            heapq.heappush(heap, (now, index, start))  # loads only grow: try again later
        return None


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


def own_gpu_views(slots: list[Slot]) -> dict[Slot, GpuView]:
    """Each engine sees its own GPUs only, numbered from 0 (a pod given GPUs by a device
    plugin: which host GPUs they are is the cluster's choice)."""
    return {slot: GpuView(slot.devices, tuple(range(len(slot.devices)))) for slot in slots}


def place_engines(spec: Spec) -> list[Slot]:
    placer = _AutoPlacer(_make_pools(spec))
    slots: list[Slot] = []
    for role in (Role.PREFILL, Role.DECODE):
        group = getattr(spec, role.value)
        explicit = getattr(spec.placement, role.value) if spec.placement else None
        for index in range(group.count):
            leader = _place_one(spec, placer, role, index, explicit)
            slots.append(_place_followers(spec, placer, leader, group.nodes))
    _check_engines_per_host(spec, slots)
    return slots


def _place_followers(spec: Spec, placer: _AutoPlacer, leader: Slot, nodes: int) -> Slot:
    """Nodes 1.. of an engine over several hosts: each on the next host after the leader's
    in the spec's order (wrapping round), an aligned block of tp/nodes devices there."""
    if nodes == 1:
        return leader
    names = list(placer.by_host)
    start = names.index(leader.host)
    size = len(leader.devices)
    name = f"{leader.role.value}-{leader.index}"
    followers: list[Slot] = []
    for rank in range(1, nodes):
        host = names[(start + rank) % len(names)]
        pool = placer.by_host[host]
        devices = pool.take_aligned(size, f"{name} (node {rank})")
        if devices is None:
            raise _no_room(spec, {host: pool}, leader.role, size)
        followers.append(Slot(leader.role, leader.index, host, devices, None, node_rank=rank))
    return Slot(
        leader.role, leader.index, leader.host, leader.devices, leader.http_port,
        followers=tuple(followers),
    )  # fmt: skip


def _check_engines_per_host(spec: Spec, slots: list[Slot]) -> None:
    engines = Counter(node.host for slot in slots for node in slot.nodes())
    for position, host in enumerate(spec.hosts):
        if engines[host.name] > MAX_ENGINES_PER_HOST:
            raise PlanError(
                f"hosts[{position}]",
                f"host {host.name} gets {engines[host.name]} engines, but no machine runs more "
                f"than {MAX_ENGINES_PER_HOST}",
                fix="spread the engines over more hosts (placement.prefill/decode.hosts), or "
                "lower prefill.count and decode.count",
            )


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
    spec: Spec, placer: _AutoPlacer, role: Role, index: int, explicit: GroupPlacement | None
) -> Slot:
    name = f"{role.value}-{index}"
    group = getattr(spec, role.value)
    size = group.tp // group.nodes  # each node's share of the TP ranks
    pools = placer.by_host
    if explicit is None:
        placed = placer.take(size, name)
        if placed is None:
            raise _no_room(spec, pools, role, size)
        return Slot(role, index, placed[0].host, placed[1], None)
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
        nodes = getattr(spec, role.value).nodes
        per = "per engine" if nodes == 1 else f"per host of an engine ({role.value}.nodes {nodes})"
        return PlanError(
            f"{role.value}.tp",
            f"{role.value} needs {size} {units} {per} but no host has more than {largest}",
            fix=f"lower {role.value}.tp, spread each engine over more hosts "
            f"({role.value}.nodes, tp/nodes ranks on each), or add {units} to a host",
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
