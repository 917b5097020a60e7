"""Sizes no machine has (generator/limits.py): more GPUs on one host than any machine shows
to one system, or more engines than the hosts could hold at ``MAX_ENGINES_PER_HOST`` each.
Refused here, before planning, in a moment; how many engines each host really gets is known
after placement (plan/placement.py checks it there)."""

from __future__ import annotations

from collections.abc import Iterator

from generator.errors import SpecIssue
from generator.limits import MAX_ENGINES_PER_HOST, MAX_GPUS_PER_HOST
from generator.spec.models import Spec

__all__ = ["host_sizes"]


def host_sizes(spec: Spec) -> Iterator[SpecIssue]:
    for index, host in enumerate(spec.hosts):
        if host.gpus is not None and len(host.gpus) > MAX_GPUS_PER_HOST:
            yield SpecIssue(
                f"hosts[{index}].gpus",
                f"lists {len(host.gpus)} GPUs, but no machine shows more than "
                f"{MAX_GPUS_PER_HOST} to one system",
                "list the GPUs of that one machine (`nvidia-smi -L`); more machines are more hosts",
            )
    engines = spec.prefill.count + spec.decode.count
    room = MAX_ENGINES_PER_HOST * len(spec.hosts)
    if engines > room:
        yield SpecIssue(
            "hosts",
            f"hold at most {room} engines ({MAX_ENGINES_PER_HOST} a host), but prefill.count + "
            f"decode.count is {engines}",
            "add hosts, or lower prefill.count and decode.count",
        )
