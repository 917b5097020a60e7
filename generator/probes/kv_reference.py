"""NIXL's own rate between a stack's engines' devices, as `doctor --kv-path` last measured it
(``.cache/kvpath/<stack>.json``), for the smoke verdict to set its KV figure against.

The verdict's figure is what vLLM's connector got out of NIXL for a request; the probe's is what
NIXL moves between the same devices and namespaces when handed one buffer as one descriptor (or
``--block-kib`` ones). Their ratio says how much of the path the serving stack uses: on one H100
vLLM's 16-token blocks got a small share of it (docs/facts.md: the descriptor count). The record
is read back typed and bounded, like every state file; one that is unreadable is left out of
the verdict, not trusted."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from generator.owned import read_bounded, write_text

__all__ = ["KV_REFERENCE_DIR", "KvReference", "PairRate", "read_reference", "write_reference"]

KV_REFERENCE_DIR = PurePosixPath(".cache/kvpath")
_MAX_BYTES = 1 << 16
_MAX_PAIRS = 4096
_Text = Annotated[str, StringConstraints(max_length=200)]
_GiBs = Annotated[float, Field(ge=0, le=1e6)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PairRate(_Strict):
    pair: _Text  # "prefill-0 -> decode-0"
    read_gib_s: _GiBs | None  # medians of the probe's timed transfers
    write_gib_s: _GiBs | None
    bytes: int = Field(ge=1, le=1 << 44)  # each transfer's size
    block_kib: int = Field(ge=0, le=1 << 34)  # each descriptor's (0: one for the buffer)
    transport: _Text


class KvReference(_Strict):
    stack: _Text
    host: _Text
    measured_at: float = Field(ge=0, le=1e11)  # unix time
    mode: Literal["container", "process"]
    pairs: tuple[PairRate, ...] = Field(min_length=1, max_length=_MAX_PAIRS)

    def rate(self, operation: Literal["read", "write"]) -> tuple[PairRate, float] | None:
        """The pair whose probe moved ``operation`` fastest, and that rate (None: no pair
        measured it): the stack's best request is set against its best pair."""
        rated = [
            (pair, rate)
            for pair in self.pairs
            if (rate := pair.read_gib_s if operation == "read" else pair.write_gib_s)
        ]
        return max(rated, key=lambda item: item[1], default=None)

    def describe(self, pair: PairRate, rate: float, operation: Literal["read", "write"]) -> str:
        """How the verdict names ``pair``'s ``rate``: transfer, descriptors, transport, date."""
        mib = pair.bytes / (1 << 20)
        shape = "one descriptor" if not pair.block_kib else f"{pair.block_kib} KiB descriptors"
        day = time.strftime("%Y-%m-%d", time.gmtime(self.measured_at))
        return (
            f"{rate:.1f} GiB/s ({mib:g} MiB {operation.upper()}s in {shape} over "
            f"{pair.transport}, doctor --kv-path {day})"
        )


def _path(root: Path, stack: str) -> Path:
    return root / KV_REFERENCE_DIR / f"{stack}.json"


def reference_from(
    stack: str,
    host: str,
    mode: Literal["container", "process"],
    results: Iterable[Mapping[str, Any]],
) -> KvReference | None:
    """The record of `doctor --kv-path`'s probe results (None: no pair moved correct data)."""
    pairs = tuple(
        PairRate(
            pair=str(result.get("pair", "?")),
            read_gib_s=result.get("read_gib_s_median"),
            write_gib_s=result.get("write_gib_s_median"),
            bytes=int(result["bytes"]),
            block_kib=int(result.get("block_kib") or 0),
            transport=str(result.get("transport", "unknown")),
        )
        for result in results
        if result.get("ok") and result.get("correct") and result.get("bytes")
    )
    if not pairs:
        return None
    return KvReference(stack=stack, host=host, measured_at=time.time(), mode=mode, pairs=pairs)


def write_reference(root: Path, reference: KvReference) -> Path:
    return write_text(root, _path(root, reference.stack), reference.model_dump_json(indent=2))


def read_reference(root: Path, stack: str) -> KvReference | None:
    """The stack's last record (None: none, or one that is unreadable or not this stack's)."""
    try:
        text = read_bounded(_path(root, stack), max_bytes=_MAX_BYTES)
        reference = None if text is None else KvReference.model_validate_json(text)
    except (OSError, ValueError):
        return None
    return reference if reference is not None and reference.stack == stack else None
