"""Runtimes as units, for the spec, the planner and render: one module each behind
``RuntimeKind`` (base.py), looked up by kind here. How `up` drives each is its driver's, one
module each under generator/workflow/runtimes/. Adding a runtime means its kind module here,
its driver there, and their two registrations."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType

from generator.errors import SpecIssue
from generator.runtimes.kinds import compose, process, slurm
from generator.runtimes.kinds.base import RuntimeKind
from generator.spec import Runtime, Spec

__all__ = [
    "RUNTIME_KINDS",
    "RuntimeKind",
    "runtime_issues",
    "runtime_kind",
    "runtime_section_issues",
]

RUNTIME_KINDS: Mapping[Runtime, RuntimeKind] = MappingProxyType(
    {unit.kind: unit for unit in (compose.UNIT, process.UNIT, slurm.UNIT)}
)


def runtime_kind(kind: Runtime) -> RuntimeKind:
    return RUNTIME_KINDS[kind]


def runtime_issues(spec: Spec) -> Iterator[SpecIssue]:
    """Sections another runtime reads, then the stack's own runtime's rules."""
    yield from runtime_section_issues(spec)
    yield from runtime_kind(spec.runtime).check_spec(spec)


def runtime_section_issues(spec: Spec) -> Iterator[SpecIssue]:
    """Sections another runtime reads than the stack's: also where no runtime of ours runs
    the stack (the Kubernetes export), whose own rules then do not apply."""
    unit = runtime_kind(spec.runtime)
    readers = {section: kind for kind in RUNTIME_KINDS.values() for section in kind.sections}
    for section, reader in sorted(readers.items()):
        if section in spec.model_fields_set and section not in unit.sections:
            yield SpecIssue(
                section,
                f"is read by the {reader.kind.value} runtime only (runtime is {unit.kind.value})",
                f"remove the {section} section, or set runtime: {reader.kind.value}",
            )
